"""What resume.py decides and says, called on checkpoints written here without a run: the
refusal and its notes word for word, the global batch at any world size, where a resumed run
goes on in its epoch, a run at its end, a stretched decay, and which records are kept."""

import dataclasses
import logging
from pathlib import Path

import pytest

from tabular_regression import resume
from tabular_regression.checkpoint import (
    CONFIG,
    DATA,
    MODEL,
    PROGRESS,
    RNG,
    CheckpointRefused,
    Progress,
    load_checkpoint,
    save_checkpoint,
)

CHECKPOINT = Path("run/checkpoints/step-000006.pt")


def written_state(cfg, processes: int = 1, data: str = "data", **progress) -> dict:
    """A checkpoint as resume.py reads it: the config of the run that wrote it, an RNG entry
    per process (its world size), its data's fingerprint and its progress."""
    progress = dataclasses.asdict(Progress(**progress))
    return {CONFIG: dataclasses.asdict(cfg), RNG: [{}] * processes, DATA: data, PROGRESS: progress}


def test_a_refusal_names_every_change_and_the_two_ways_on(cfg):
    changed = dataclasses.replace(cfg, seed=cfg.seed + 1)
    with pytest.raises(CheckpointRefused) as refused:
        resume.check_resume(CHECKPOINT, written_state(cfg), changed, "other", 1)
    assert str(refused.value) == (
        f"--resume: '{CHECKPOINT}' was trained with other settings: "
        f"seed {cfg.seed} -> {cfg.seed + 1}, data (fingerprint data -> other). Start a new run "
        "with another --output_dir (or --resume none), or continue its weights and optimizer "
        "state anyway with --resume_changed true (no longer exact)"
    )


def test_accepted_changes_and_another_world_size_are_each_said_once(cfg):
    accepted = dataclasses.replace(
        cfg, seed=cfg.seed + 1, batch_size=cfg.batch_size * 2, resume_changed=True
    )
    notes = resume.check_resume(CHECKPOINT, written_state(cfg, processes=2), accepted, "other", 1)
    assert notes == [
        f"resuming '{CHECKPOINT}' with changed settings (seed {cfg.seed} -> {cfg.seed + 1}, "
        "data (fingerprint data -> other)): the weights and optimizer state continue, the run "
        "is no longer exact",
        f"'{CHECKPOINT}' was written at world size 2, this run's is 1: the weights and data "
        "order continue; not exact: each process's share of a batch, the order gradients are "
        "summed in, and the random streams (dropout, augmentation) of processes the "
        "checkpoint has none for",
    ]


def test_the_global_batch_is_compared_at_any_world_size(cfg):
    """batch_size x processes: the same when 2 processes continue 2, or 1 at twice the batch."""
    assert resume.check_resume(CHECKPOINT, written_state(cfg, processes=2), cfg, "data", 2) == []
    doubled = written_state(dataclasses.replace(cfg, batch_size=cfg.batch_size * 2))
    (note,) = resume.check_resume(CHECKPOINT, doubled, cfg, "data", 2)
    assert "written at world size 1, this run's is 2" in note


def test_a_resume_in_other_data_starts_its_epoch_over(cfg):
    state = written_state(cfg, step=7, epoch=1, batch=2)
    assert resume.resumed_progress(state, cfg, "data", 1, 10).batch == 2
    assert resume.resumed_progress(state, cfg, "other", 1, 10).batch == 0


def test_a_larger_batch_with_no_full_batch_left_in_its_epoch_starts_the_epoch_over(cfg):
    """13 batches of 7 are 91 samples into an epoch of 100: 9 batches of 10, no batch of 30."""
    state = written_state(dataclasses.replace(cfg, batch_size=7), step=13, batch=13)
    tens = dataclasses.replace(cfg, batch_size=10)
    assert resume.resumed_progress(state, tens, "data", 1, 100 // 10).batch == 9
    thirties = dataclasses.replace(cfg, batch_size=30)
    assert resume.resumed_progress(state, thirties, "data", 1, 100 // 30).batch == 0


@pytest.fixture
def resume_log(caplog, monkeypatch):
    """resume_log(): the lines resume.py has logged so far in the test."""
    # train.py's logging setup stops propagation; caplog listens at the root logger.
    monkeypatch.setattr(logging.getLogger(resume.__name__.partition(".")[0]), "propagate", True)
    caplog.set_level(logging.INFO, logger=resume.__name__)
    return lambda: [record.getMessage() for record in caplog.records]


def checkpoint_in(output_dir: Path, written_by, progress: Progress, processes: int = 1) -> Path:
    states = {MODEL: {}, **written_state(written_by, processes)}
    return save_checkpoint(output_dir / "checkpoints", progress, states, keep=1, is_best=False)


def test_a_resume_at_its_runs_end_says_nothing_is_left_to_train(cfg, tmp_path, resume_log):
    cfg = dataclasses.replace(cfg, output_dir=str(tmp_path))
    path = checkpoint_in(tmp_path, cfg, Progress(step=6, total_steps=6))
    progress, resumed_from, state = resume.resume_point(cfg, "data", 1, 4, 6)
    assert (progress.step, resumed_from, state[CONFIG]) == (6, path, dataclasses.asdict(cfg))
    assert resume_log() == [
        f"resuming from {path} at step 6",
        "the checkpoint is at or past this run's end (step 6): nothing is left to train; its "
        "weights are evaluated and saved",
    ]


@pytest.mark.parametrize(("written_total", "said"), [(6, True), (0, False)])
def test_an_extended_run_says_its_decay_is_stretched(
    cfg, tmp_path, resume_log, written_total, said
):
    """A checkpoint's total_steps of 0 (format version 1) did not record where its run ended."""
    cfg = dataclasses.replace(cfg, output_dir=str(tmp_path))
    path = checkpoint_in(tmp_path, cfg, Progress(step=3, total_steps=written_total))
    assert resume.resume_point(cfg, "data", 1, 4, 12)[0].total_steps == 12
    stretched = (
        "the run now ends at step 12 instead of 6: the learning-rate decay is stretched to "
        "the new end from here on"
    )
    assert resume_log() == [f"resuming from {path} at step 3"] + [stretched] * said


def test_a_resume_logs_the_notes_of_its_check_as_they_are(cfg, tmp_path, resume_log):
    """Written by 2 processes, continued by 1 at twice the batch: a note of the world size."""
    path = checkpoint_in(tmp_path, cfg, Progress(step=3, total_steps=6), processes=2)
    cfg = dataclasses.replace(cfg, output_dir=str(tmp_path), batch_size=cfg.batch_size * 2)
    resume.resume_point(cfg, "data", 1, 4, 6)
    notes = resume.check_resume(path, load_checkpoint(path), cfg, "data", 1)
    assert len(notes) == 1 and f"'{path}' was written at world size 2" in notes[0]
    assert resume_log() == [*notes, f"resuming from {path} at step 3"]


def test_only_a_metrics_file_with_something_in_it_is_a_record_to_keep(tmp_path):
    """As a run killed before its first log line leaves it, an empty one loses nothing."""
    (tmp_path / "metrics.jsonl").write_text("")
    resume.check_nothing_to_lose(tmp_path)
    (tmp_path / "metrics.jsonl").write_text("\n")  # one byte is already a record
    with pytest.raises(CheckpointRefused) as refused:
        resume.check_nothing_to_lose(tmp_path)
    assert str(refused.value) == (
        f"--output_dir '{tmp_path}' holds an earlier run (metrics.jsonl) but no checkpoint to "
        "continue it from: give this run another --output_dir, or start over in this one with "
        "--resume none (its records are replaced)"
    )


@pytest.mark.parametrize("left", ["step-000003.pt", "latest"])
def test_records_beside_a_checkpoint_that_does_not_load_are_kept(tmp_path, left):
    """checkpoints/ held a checkpoint (now unreadable, or only its marker is left): no run
    stopped before its first checkpoint, whose folder may be started over."""
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / left).write_text("")
    with pytest.raises(CheckpointRefused, match=r"holds an earlier run \(summary.json\)"):
        resume.check_nothing_to_lose(tmp_path)
    (tmp_path / "checkpoints" / left).unlink()
    resume.check_nothing_to_lose(tmp_path)
