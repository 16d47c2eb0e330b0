"""Resuming with changed settings: refused in one line before anything is written, unless
accepted with --resume_changed; free fields change silently; an extended run's schedule.
And what a folder holds: one run at a time, and nothing of an earlier run replaced unasked."""

import dataclasses
import json
import shutil
import time
from pathlib import Path

import pytest
import torch
from calls import refusal

from text_classification.checkpoint import (
    list_checkpoints,
    load_checkpoint,
)
from text_classification.config import (
    RESUME_FREE_FIELDS,
    apply_fast_dev_run,
    load_config,
)
from text_classification.optim import learning_rate
from text_classification.train import main


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def trained_records(output_dir: Path) -> list[dict]:
    records = map(json.loads, (output_dir / "metrics.jsonl").read_text().splitlines())
    return [record for record in records if "split" not in record]


def logged_lr(output_dir: Path) -> dict[int, float]:
    records = map(json.loads, (output_dir / "metrics.jsonl").read_text().splitlines())
    return {r["step"]: r["lr"] for r in records if "split" not in r}


def warnings_logged(capsys) -> list[str]:
    """The warnings the run logged (to stderr, through tqdm.write)."""
    return [line for line in capsys.readouterr().err.splitlines() if " WARNING " in line]


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        (["--batch_size", "8"], ["batch_size x processes", " -> 8 x 1"]),
        (["--grad_accum_steps", "2"], ["grad_accum_steps 1 -> 2"]),
        (["--lr", "0.01"], ["lr ", " -> 0.01"]),
        (["--seed", "1"], ["seed 0 -> 1"]),
        (["--width", "16"], ["width ", " -> 16"]),
        (["--dropout", "0.25", "--seed", "3"], ["dropout ", " -> 0.25", "seed 0 -> 3"]),
    ],
    ids=["batch", "accumulation", "lr", "seed", "model-shape", "two-fields"],
)
def test_a_changed_field_is_refused_and_nothing_is_written(trained, short_run, changed, named):
    before = snapshot(trained)
    message = refusal(main, short_run("--max_steps", "9", *changed))
    assert all(part in message for part in named), message
    assert "--output_dir" in message and "--resume_changed true" in message
    assert snapshot(trained) == before  # no config.yaml rewritten, no checkpoint pruned
    for path in list_checkpoints(trained / "checkpoints"):
        load_checkpoint(path)


def test_other_data_is_refused(trained, short_run, user_data, tmp_path):
    before = snapshot(trained)
    with pytest.raises(SystemExit, match=r"data \(fingerprint \w+ -> \w+\)"):
        main(short_run(*user_data(tmp_path / "data")))
    assert snapshot(trained) == before


def test_the_data_folder_may_move(short_run, user_data, tmp_path):
    """The fingerprint of the data is compared, not the folder's name."""
    data_args = user_data(tmp_path / "data")
    main(short_run(*data_args))
    shutil.move(tmp_path / "data", tmp_path / "moved")
    moved = [arg.replace(str(tmp_path / "data"), str(tmp_path / "moved")) for arg in data_args]
    assert moved != data_args
    assert main(short_run("--max_steps", "8", *moved))["steps"] == 8


def test_an_accepted_change_resumes_the_weights_and_says_it_is_not_exact(
    trained, short_run, capsys
):
    changed = ("--max_steps", "9", "--batch_size", "8")
    assert main(short_run(*changed, "--resume_changed", "true"))["steps"] == 9
    warnings = warnings_logged(capsys)
    assert any("batch_size" in w and "no longer exact" in w for w in warnings), warnings
    newest = list_checkpoints(trained / "checkpoints")[-1]
    assert load_checkpoint(newest)["config"]["batch_size"] == 8


def test_free_fields_change_without_a_word(trained, short_run, capsys):
    free = ("--log_every", "2", "--eval_every", "1", "--checkpoint_every", "1")
    main(short_run("--max_steps", "8", "--keep_checkpoints", "3", *free))
    warnings = warnings_logged(capsys)
    assert not [w for w in warnings if "exact" in w], warnings
    assert load_checkpoint(list_checkpoints(trained / "checkpoints")[-1])["progress"]["step"] == 8
    assert {"output_dir", "max_steps", "epochs", "log_every", "keep_checkpoints"} <= (
        RESUME_FREE_FIELDS
    )


def test_an_extended_run_follows_the_schedule_of_its_new_total(trained, short_run, capsys):
    """A run extended from 6 to 12 steps keeps the rates it trained with, then decays as a
    12-step run would: stretched to the new end, down from the stretched curve's rate."""
    first = logged_lr(trained)
    main(short_run("--max_steps", "12"))
    rates = logged_lr(trained)
    assert {step: rates[step] for step in first} == first
    cfg = load_config(["--warmup_steps", "2"])  # as short_run's
    stretched = {step: learning_rate(step - 1, cfg, 12) for step in range(7, 13)}  # 0-based
    assert {step: rates[step] for step in range(7, 13)} == pytest.approx(stretched, rel=1e-6)
    assert all(rates[step] > rates[step + 1] > 0 for step in range(7, 12))
    assert "ends at step 12 instead of 6" in capsys.readouterr().err


def test_a_checkpoint_of_two_processes_resumes_on_one_with_the_same_global_batch(
    trained, short_run, capsys
):
    """As one written by 2 processes with half the batch each looks (a distributed=multi
    render's): an RNG entry per process."""
    newest = trained / "checkpoints" / "step-000006.pt"
    payload = load_checkpoint(newest)
    half = payload["config"]["batch_size"] // 2
    torch.save(
        payload | {"config": payload["config"] | {"batch_size": half}, "rng": payload["rng"] * 2},
        newest,
    )
    with pytest.raises(SystemExit, match=f"batch_size x processes {half} x 2 -> {half} x 1"):
        main(short_run("--max_steps", "9", "--batch_size", str(half)))
    assert main(short_run("--max_steps", "8"))["steps"] == 8
    assert "written at world size 2, this run's is 1" in capsys.readouterr().err


def test_a_fast_dev_run_sets_only_fields_a_resume_may_change(cfg):
    """So a run may continue a fast dev run's checkpoint, as the generator's check does."""
    fast = apply_fast_dev_run(dataclasses.replace(cfg, fast_dev_run=True))
    changed = {
        name for name, value in dataclasses.asdict(fast).items() if getattr(cfg, name) != value
    }
    assert "max_steps" in changed and changed <= RESUME_FREE_FIELDS


def test_a_folder_with_records_but_no_checkpoint_is_refused_unless_resume_none(trained, short_run):
    """Deleted checkpoints: a new run would replace the old metrics, model and summary."""
    shutil.rmtree(trained / "checkpoints")
    before = snapshot(trained)
    message = refusal(main, short_run())
    records = "metrics.jsonl, summary.json, model/model.safetensors"
    assert f"holds an earlier run ({records})" in message, message
    assert "--resume none" in message
    assert snapshot(trained) == before
    assert main(short_run("--resume", "none"))["steps"] == 6


def test_a_run_stopped_before_its_first_checkpoint_starts_over(trained, short_run, capsys):
    shutil.rmtree(trained / "checkpoints")  # as a run killed before step 3 leaves it:
    (trained / "checkpoints").mkdir()  # checkpoints/ never held one
    (trained / "summary.json").unlink()
    shutil.rmtree(trained / "model")
    assert main(short_run())["steps"] == 6
    assert "resuming" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("blocker", "kind"),
    [("checkpoints", "file"), ("model/model.safetensors", "folder"), ("summary.json", "folder")],
)
def test_a_file_or_folder_in_the_way_of_an_output_is_refused_before_training(
    short_run, tmp_path, blocker, kind
):
    output_dir = tmp_path / "run"
    in_the_way = output_dir / blocker
    if kind == "file":
        in_the_way.parent.mkdir(parents=True)
        in_the_way.write_text("")
    else:
        in_the_way.mkdir(parents=True)
    before = snapshot(output_dir)
    message = refusal(main, short_run(output_dir=output_dir))
    assert f"'{in_the_way}' is a {kind}" in message and "another --output_dir" in message
    assert snapshot(output_dir) == before and not (output_dir / "config.yaml").exists()


def test_a_second_run_in_a_folder_in_use_is_refused_naming_the_first(
    short_run, tmp_path, start_training
):
    output_dir = tmp_path / "run"
    # Long enough to be training while the second starts; killed once that is refused.
    first = start_training(short_run("--max_steps", "100000", output_dir=output_dir))
    try:
        metrics, deadline = output_dir / "metrics.jsonl", time.monotonic() + 120
        while not (metrics.exists() and metrics.stat().st_size) and first.is_alive():
            assert time.monotonic() < deadline, "the first run never logged a step"
            time.sleep(0.01)
        config = (output_dir / "config.yaml").read_text()
        message = refusal(main, short_run("--seed", "1", output_dir=output_dir))
        assert f"in use by another run (process {first.pid} on " in message, message
        assert (output_dir / "config.yaml").read_text() == config
    finally:
        first.kill()
        first.join()
    # The OS released the killed run's lock: a run continues from its checkpoints.
    assert main(short_run(output_dir=output_dir))["steps"] >= 6


def test_a_resumed_run_may_log_every_fewer_or_more_steps(short_run, tmp_path):
    """A checkpoint keeps the losses of the steps its run had not logged yet (steps 1-3 of a
    --log_every 10 run): a run resumed with another log_every logs them by its own, and a
    huge one costs no memory (the window holds the steps run, not log_every of them)."""
    quiet = ("--eval_every", "100")
    main(short_run(*quiet, output_dir=tmp_path / "whole"))  # logs every step
    loss = {record["step"]: record["loss"] for record in trained_records(tmp_path / "whole")}
    main(short_run(*quiet, "--log_every", "10", output_dir=tmp_path / "paused"))
    checkpoint = tmp_path / "paused" / "checkpoints" / "step-000003.pt"
    assert len(load_checkpoint(checkpoint)["progress"]["window_losses"]) == 3
    for log_every, windows in (("2", [(1, 4), (5, 6)]), (str(10**12), [(1, 6)])):
        resumed = tmp_path / f"every-{log_every}"
        resume = ("--log_every", log_every, "--resume", str(checkpoint))
        main(short_run(*quiet, *resume, output_dir=resumed))
        records = trained_records(resumed)
        assert [record["step"] for record in records] == [last for _, last in windows]
        means = [sum(loss[s] for s in range(a, b + 1)) / (b - a + 1) for a, b in windows]
        assert [record["loss"] for record in records] == pytest.approx(means, rel=1e-6)


def test_a_run_resumed_past_its_end_before_any_evaluation_saves_its_model(short_run, tmp_path):
    main(short_run("--eval_every", "100", output_dir=tmp_path / "first"))
    checkpoint = tmp_path / "first" / "checkpoints" / "step-000003.pt"  # before any evaluation
    past = tmp_path / "past"
    resume = ("--max_steps", "2", "--eval_every", "100", "--resume", str(checkpoint))
    summary = main(short_run(*resume, output_dir=past))
    assert summary["steps"] == 3 and summary["best_value"] is None
    assert "before its first evaluation" in (past / "model" / "README.md").read_text()
    assert (past / "model" / "model.safetensors").is_file()
