"""Checkpoints: complete, atomic, loadable with weights_only, and checked on resume."""

import os

import pytest
import torch

from image_classification import checkpoint
from image_classification.checkpoint import (
    find_resume_checkpoint,
    list_checkpoints,
    load_checkpoint,
)
from image_classification.train import main


@pytest.fixture
def trained(short_run, tmp_path):
    """A 6-step run with checkpoints at steps 3 and 6."""
    main(short_run())
    return tmp_path / "run"


def test_checkpoint_holds_the_whole_training_state(trained):
    payload = load_checkpoint(trained / "checkpoints" / "step-000006.pt")
    assert {"model", "optimizer", "progress", "rng", "config"} <= payload.keys()
    assert payload["progress"]["step"] == 6
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
        with pytest.raises(SystemExit) as exit_info:
            main(short_run("--resume", str(path)))
        assert str(path) in str(exit_info.value.code) and "\n" not in str(exit_info.value.code)


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
    with pytest.raises(SystemExit, match="does not fit this model.*shape"):
        main(short_run("--width", "8", "--max_steps", "9"))
