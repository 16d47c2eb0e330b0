"""Exact, crash-safe resume: a run killed at any step and rerun ends exactly where an
uninterrupted run ends (weights, optimizer state, every logged metric), bit for bit: on the
CPU as it runs by default, on CUDA with --deterministic true (calls.EXACT)."""

import json
import os
import random
import signal
from pathlib import Path

import pytest
from calls import EXACT, LEAN, as_arguments
from run_logs import assert_same_end, checkpoint_state, logged

from language_modeling import task
from language_modeling.checkpoint import load_checkpoint
from language_modeling.train import main

# Where the tests kill a run: other steps each time, and RESUME_KILL_SEED=N makes a failure's
# steps again (its message names both).
KILL_SEED = int(os.environ.get("RESUME_KILL_SEED", random.randrange(2**32)))
kill_steps = random.Random(KILL_SEED)
STEPS = 30  # two epochs of the tests' data (conftest.py's embedded_args, user_data) and more
RUN_FIELDS = {
    "max_steps": STEPS,
    "ema_decay": 0.9,  # the weights' average resumes exactly too (checkpoint key "average")
    "log_every": 1,
    "eval_every": 10,
    "checkpoint_every": 5,
    **EXACT,
    **LEAN,
}


def run_args(output_dir: Path, *extra: str) -> list[str]:
    return as_arguments({"output_dir": output_dir, **RUN_FIELDS}, *extra)


def assert_same_run(whole: Path, resumed: Path, from_step: int) -> None:
    """Identical metrics after the resume point, weights, optimizer and schedule state."""
    where = f"resumed at step {from_step} (RESUME_KILL_SEED={KILL_SEED})"
    assert logged(resumed) == logged(whole), f"metrics differ, {where}"
    assert_same_end(resumed, whole, STEPS, where)
    final = checkpoint_state(resumed / "checkpoints" / f"step-{STEPS:06d}.pt")
    assert final["average"], "no average of the weights to compare: ema_decay is off"


@pytest.fixture(scope="module", params=["embedded", "user-data"])
def reference(request, tmp_path_factory, embedded_args, user_data):
    """The uninterrupted run: the embedded dataset, or a small one in the user's format."""
    root = tmp_path_factory.mktemp("reference")
    extra = user_data(root) if request.param == "user-data" else list(embedded_args)
    main(run_args(root / "whole", *extra))
    return root, extra


def steps_per_epoch(output_dir: Path) -> int:
    """The first step logged in epoch 1, from the uninterrupted run's metrics."""
    records = [r for r in logged(output_dir) if "split" not in r]
    return next(r["step"] for r in records if r["epoch"] >= 1)


# Resume points before and after the first epoch boundary.
@pytest.mark.parametrize("epoch", [0, 1], ids=["first-epoch", "second-epoch"])
def test_sigkill_at_a_random_step_then_resume_is_exact(reference, interrupt, tmp_path, epoch):
    root, extra = reference
    epoch_steps = steps_per_epoch(root / "whole")
    assert epoch_steps * 2 + 3 <= STEPS, "an epoch must be short enough for two in one run"
    at_step = kill_steps.randint(epoch * epoch_steps + 2, (epoch + 1) * epoch_steps - 1)
    args = run_args(tmp_path, *extra)
    assert interrupt(args, tmp_path, at_step, signal.SIGKILL) == -signal.SIGKILL
    main(args)  # the same command again: resume auto
    assert_same_run(root / "whole", tmp_path, at_step)


def test_sigterm_checkpoints_the_current_step_and_exits_75(reference, interrupt, tmp_path):
    root, extra = reference
    args = run_args(tmp_path, *extra)
    assert interrupt(args, tmp_path, 13, signal.SIGTERM) == 75
    latest = (tmp_path / "checkpoints" / "latest").read_text().strip()
    stopped_at = load_checkpoint(tmp_path / "checkpoints" / latest)["progress"]["step"]
    assert 13 <= stopped_at < STEPS  # the step in progress when the signal came
    main(args)
    assert_same_run(root / "whole", tmp_path, stopped_at)


# No evaluation beats the first by 100: of those at steps 3, 6, 9 and 12, the third without
# improvement (step 12) stops the run.
EARLY_STOP = ["--eval_every", "3", "--early_stopping_patience", "3"]
EARLY_STOP += ["--early_stopping_min_delta", "100"]


def test_a_run_killed_before_it_stops_early_stops_at_the_same_step(
    interrupt, tmp_path, embedded_args
):
    main(run_args(tmp_path / "whole", *embedded_args, *EARLY_STOP))
    summary = json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert summary["stopped_early"] is True and summary["steps"] == 12
    args = run_args(tmp_path / "killed", *embedded_args, *EARLY_STOP)
    at_step = kill_steps.randint(7, 11)  # resumes from the checkpoint of step 5 or of step 10
    where = f"killed at step {at_step} (RESUME_KILL_SEED={KILL_SEED})"
    assert interrupt(args, tmp_path / "killed", at_step, signal.SIGKILL) < 0
    resumed = main(args)  # the same command again: resume auto
    assert resumed["stopped_early"] is True and resumed["steps"] == 12, where
    assert logged(tmp_path / "killed") == logged(tmp_path / "whole"), where
    assert_same_end(tmp_path / "killed", tmp_path / "whole", 12, where)


def test_nan_loss_stops_naming_the_step_and_keeps_good_checkpoints(
    tmp_path, monkeypatch, embedded_args
):
    calls = []

    compute_loss = task.compute_loss

    def loss_that_breaks_at_step_8(outputs, targets):
        calls.append(1)
        loss = compute_loss(outputs, targets)
        return loss * float("nan") if len(calls) == 8 else loss

    monkeypatch.setattr(task, "compute_loss", loss_that_breaks_at_step_8)
    with pytest.raises(SystemExit, match="nan at step 8"):
        main(run_args(tmp_path, *embedded_args, "--log_every", "4"))
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step-000005.pt"
    assert load_checkpoint(tmp_path / "checkpoints" / "step-000005.pt")["progress"]["step"] == 5


def test_unwritable_output_dir_fails_before_training(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit, match="--output_dir"):
        main(run_args(blocker / "run"))
