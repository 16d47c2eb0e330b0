"""Experiment tracking with TensorBoard, through Accelerate's tracker integration.

    tensorboard --logdir outputs/run/tensorboard

Event files go to output_dir/tensorboard; `--logdir outputs` compares every run under outputs/.

The loop sends its training record at log steps and the evaluation metrics at evaluation
steps (`accelerator.log`), and nothing in between: a training step pays nothing for tracking.
Accelerate talks to the tracker from the main process only.
"""

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from accelerate import Accelerator

from ..config import ConfigError, TrainConfig
from .distributed import on_main_process
from .monitor import Preempted
from .records import unwritable_reason

log = logging.getLogger("image_classification_loaded")
PROJECT = "tensorboard"  # TensorBoard's project is the folder in output_dir for its event files


class TrackerError(ConfigError):
    """The tracker cannot start; raised before the first training step, in one line."""


class TrackerRun:
    """The tracker's run for this process, as returned by start_tracker().

    Used as a context manager around the loop, it closes the run when the loop stops with an
    error, and records why: failed, or killed when preempted or interrupted. A run that
    completes is closed by `accelerator.end_training()` once the summary is written.
    """

    def __init__(self, accelerator: Accelerator):
        self.accelerator = accelerator

    def __enter__(self) -> "TrackerRun":
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, traceback: Any) -> None:
        if error is not None and self.accelerator.is_main_process:
            _end_stopped(self.accelerator, killed=isinstance(error, Preempted | KeyboardInterrupt))


def start_tracker(accelerator: Accelerator, cfg: TrainConfig, resumed_step: int) -> TrackerRun:
    """Start the tracker's run with the resolved config as its hyperparameters.

    Raises TrackerError, before any training, when the tracker cannot start: an unwritable
    folder, a malformed setting, a missing package.
    Only the main process tracks; when it cannot start, every process stops.
    """
    on_main_process(accelerator, lambda: _start_or_explain(accelerator, cfg, resumed_step))
    return TrackerRun(accelerator)


def _start_or_explain(accelerator: Accelerator, cfg: TrainConfig, resumed_step: int) -> None:
    try:
        _start(accelerator, cfg, Path(cfg.output_dir), resumed_step)
    except TrackerError:
        raise
    except Exception as error:  # each library raises its own types; all of them stop the run
        raise TrackerError(f"tensorboard cannot start: {_one_line(error)}") from None
    if not accelerator.trackers:  # Accelerate silently skips a tracker whose package is missing
        raise TrackerError("tensorboard is not installed; `pip install -e .` installs it")


def tracked(split: str, values: dict[str, Any]) -> dict[str, Any]:
    """Metric names as the tracker shows them, grouped by split: `train/loss`, `val/accuracy`."""
    return {f"{split}/{name}": value for name, value in values.items() if name != "step"}


def _start(accelerator: Accelerator, cfg: TrainConfig, output_dir: Path, resumed_step: int) -> None:
    # Accelerator(project_dir=output_dir) puts the event files in output_dir/PROJECT.
    directory = _writable_dir(output_dir / PROJECT)
    # A resumed run first hides the events the interrupted run logged after its checkpoint,
    # so the curves do not double back (as metrics.jsonl drops those lines).
    writer_kwargs = {"purge_step": resumed_step + 1} if resumed_step else {}
    accelerator.init_trackers(
        PROJECT, config=asdict(cfg), init_kwargs={"tensorboard": writer_kwargs}
    )
    log.info("tensorboard: view this run with `tensorboard --logdir %s`", directory)


def _end_stopped(accelerator: Accelerator, killed: bool) -> None:
    """TensorBoard has no run status: close the event file, which holds every logged step."""
    accelerator.get_tracker("tensorboard").finish()


def _writable_dir(directory: Path) -> Path:
    """Create the tracker's folder and prove it writable, so a bad path fails before training."""
    reason = unwritable_reason(directory)
    if reason:
        raise TrackerError(f"tensorboard cannot write to '{directory}' ({reason})")
    return directory


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split()) or type(error).__name__
