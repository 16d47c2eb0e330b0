"""Resuming with changed settings: refused in one line before anything is written, unless
accepted with --resume_changed; free fields change silently; an extended run's schedule."""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from calls import refusal

from language_modeling.checkpoint import (
    list_checkpoints,
    load_checkpoint,
)
from language_modeling.config import (
    RESUME_FREE_FIELDS,
    apply_fast_dev_run,
    load_config,
)
from language_modeling.optim import learning_rate
from language_modeling.train import main


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


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
