"""Checkpoints: complete, atomic, loadable with weights_only, in step order at any step,
versioned, and checked on resume."""

import os

import pytest
import torch
from calls import refusal
from safetensors.torch import load_file

from language_modeling import checkpoint
from language_modeling.checkpoint import (
    find_resume_checkpoint,
    list_checkpoints,
    load_checkpoint,
)
from language_modeling.train import main


def test_checkpoint_holds_the_whole_training_state(trained):
    payload = load_checkpoint(trained / "checkpoints" / "step-000006.pt")
    assert {"model", "optimizer", "progress", "rng", "config", "data_fingerprint"} <= payload.keys()
    assert payload["format"] == checkpoint.FORMAT_VERSION
    assert payload["progress"]["step"] == 6
    assert len(payload["rng"]) == 1  # one entry per process, whatever the render
    # The learning rate is a function of the step, so the step restores the schedule.
    assert payload["optimizer"]["param_groups"][0]["lr"] > 0
    assert torch.load(trained / "checkpoints" / "step-000006.pt", weights_only=True)


def test_keeps_the_newest_and_the_best(short_run, tmp_path):
    main(short_run("--max_steps", "12", "--keep_checkpoints", "1"))
    directory = tmp_path / "run" / "checkpoints"
    kept = {path.name for path in list_checkpoints(directory)}
    best = (directory / "best").read_text().strip()
    assert kept == {"step-000012.pt", best}


def test_corrupt_newest_checkpoint_falls_back_to_the_previous(trained, caplog):
    newest = trained / "checkpoints" / "step-000006.pt"
    newest.write_bytes(newest.read_bytes()[:1000])  # truncated, as by a full disk
    path, payload = find_resume_checkpoint(trained / "checkpoints")
    assert path.name == "step-000003.pt" and payload["progress"]["step"] == 3
    assert "step-000006.pt" in caplog.text


def test_resume_from_a_missing_or_corrupt_path_is_a_one_line_error(trained, short_run):
    corrupt = trained / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint")
    for path in (trained / "missing.pt", corrupt):
        assert str(path) in refusal(main, short_run("--resume", str(path)))


def test_a_crash_before_the_rename_keeps_the_previous_checkpoint(trained, monkeypatch):
    def crash(*args):
        raise OSError("simulated power cut")

    monkeypatch.setattr(os, "replace", crash)
    payload = load_checkpoint(trained / "checkpoints" / "step-000006.pt")
    progress = checkpoint.Progress(**{**payload["progress"], "step": 7})
    with pytest.raises(OSError, match="power cut"):
        checkpoint.save_checkpoint(trained / "checkpoints", progress, payload, 2, False)
    monkeypatch.undo()
    assert (trained / "checkpoints" / "latest").read_text().strip() == "step-000006.pt"
    path, _ = find_resume_checkpoint(trained / "checkpoints")
    assert path.name == "step-000006.pt"


def test_checkpoint_of_another_model_names_the_mismatched_keys(trained, short_run):
    accepted = ("--resume_changed", "true")  # past the resume guard, which refuses it first
    with pytest.raises(SystemExit, match="does not fit this model.*shape"):
        main(short_run("--width", "16", "--max_steps", "9", *accepted))


def relabel(run_dir, step: int) -> None:
    """Make the run's newest checkpoint the only one, as if taken at `step`."""
    directory = run_dir / "checkpoints"
    newest = list_checkpoints(directory)[-1]
    payload = load_checkpoint(newest)
    for path in list_checkpoints(directory):
        path.unlink()
    progress = checkpoint.Progress(**{**payload["progress"], "step": step})
    checkpoint.save_checkpoint(directory, progress, payload, keep=2, is_best=True)


@pytest.mark.parametrize("step", [999_999, 10**9 - 1])
def test_checkpoints_stay_in_step_order_past_a_million_steps(trained, short_run, step):
    """Names gain a digit at 10**6 (step-1000000.pt sorts before step-999999.pt as text):
    resume, keep-N and the latest marker order by the step number."""
    relabel(trained, step)
    longer = ("--max_steps", str(step + 3), "--epochs", str(step), "--checkpoint_every", "1")
    summary = main(short_run(*longer, "--keep_checkpoints", "2"))
    assert summary["steps"] == step + 3
    kept = list_checkpoints(trained / "checkpoints")
    steps = [load_checkpoint(path)["progress"]["step"] for path in kept]
    assert steps[-2:] == [step + 2, step + 3]  # the newest two kept, in step order
    latest = (trained / "checkpoints" / "latest").read_text().strip()
    assert latest == f"step-{step + 3:06d}.pt"
    path, _ = find_resume_checkpoint(trained / "checkpoints")
    assert path.name == latest
    assert main(short_run(*longer))["steps"] == step + 3  # resumes at the end: nothing to train


def test_a_checkpoint_of_a_newer_format_is_refused_in_one_line(trained, short_run):
    newest = trained / "checkpoints" / "step-000006.pt"
    payload = load_checkpoint(newest)
    torch.save({**payload, "format": checkpoint.FORMAT_VERSION + 1}, newest)
    message = refusal(main, short_run("--max_steps", "9"))
    assert f"format version {checkpoint.FORMAT_VERSION + 1}" in message
    assert f"1 to {checkpoint.FORMAT_VERSION}" in message
    # Not skipped for the older one, whose run would prune the newer checkpoint.
    assert {p.name for p in list_checkpoints(trained / "checkpoints")} == {
        "step-000003.pt",
        "step-000006.pt",
    }


def as_version_1(payload: dict) -> dict:
    """The layout before checkpoints had a format: no version, data fingerprint or schedule
    total; one process kept its RNG states as a dict, the loader generator's beside them."""
    old = {k: v for k, v in payload.items() if k not in ("format", "data_fingerprint", "rng")}
    old["progress"] = {k: v for k, v in payload["progress"].items() if k != "total_steps"}
    rng = dict(payload["rng"][0])
    old["data_generator"] = rng.pop("data_generator")
    old["rng"] = rng
    return old


def test_a_checkpoint_written_before_format_versions_resumes_exactly(trained, short_run, tmp_path):
    assert_resumes_exactly(trained, short_run, tmp_path, as_version_1)


def assert_resumes_exactly(trained, short_run, tmp_path, earlier) -> None:
    """Step 3's checkpoint, made `earlier`, resumes to the whole run's weights."""
    step_3 = trained / "checkpoints" / "step-000003.pt"
    old = tmp_path / "old" / "step-000003.pt"
    old.parent.mkdir()
    torch.save(earlier(load_checkpoint(step_3)), old)
    main(short_run("--resume", str(old), output_dir=tmp_path / "resumed"))
    whole = load_file(trained / "model" / "model.safetensors")
    resumed = load_file(tmp_path / "resumed" / "model" / "model.safetensors")
    assert all(torch.equal(whole[key], resumed[key]) for key in whole)
