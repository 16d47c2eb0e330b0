"""The tracker's run around the training loop, whichever tracker tracking.py starts: a
tracker that cannot start stops the run before training, in one line; a loop that stops
with an error closes the run as failed or killed.

The loop sends its training record at log steps and the evaluation metrics at evaluation
steps (`accelerator.log`), and nothing in between: a training step pays nothing for tracking.
Accelerate talks to the tracker from the main process only.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelerate import Accelerator

from ..config import ConfigError, TrainConfig
from .monitor import Preempted
from .processes import on_main_process
from .records import unwritable_reason


class TrackerError(ConfigError):
    """The tracker cannot start; raised before the first training step, in one line."""


class TrackerRun:
    """The tracker's run for this process, as returned by start_tracker().

    Used as a context manager around the loop, it closes the run when the loop stops with an
    error, and records why: failed, or killed when preempted or interrupted. A run that
    completes is closed by `accelerator.end_training()` once the summary is written.
    """

    def __init__(self, accelerator: Accelerator, end_stopped: Callable[[Accelerator, bool], None]):
        self.accelerator = accelerator
        self.end_stopped = end_stopped

    def __enter__(self) -> "TrackerRun":
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, traceback: Any) -> None:
        if error is not None and self.accelerator.is_main_process:
            killed = isinstance(error, Preempted | KeyboardInterrupt)
            self.end_stopped(self.accelerator, killed)


def start_run(
    accelerator: Accelerator,
    cfg: TrainConfig,
    resumed_step: int,
    start: Callable[[Accelerator, TrainConfig, Path, int], None],
    end_stopped: Callable[[Accelerator, bool], None],
) -> TrackerRun:
    """Start the tracker's run (`start`) with the resolved config as its hyperparameters.

    Raises TrackerError, before any training, when the tracker cannot start: an unwritable
    folder, a malformed setting, a missing package.
    Only the main process tracks; when it cannot start, every process stops.
    """
    on_main_process(accelerator, lambda: _start_or_explain(accelerator, cfg, resumed_step, start))
    return TrackerRun(accelerator, end_stopped)


def _start_or_explain(
    accelerator: Accelerator,
    cfg: TrainConfig,
    resumed_step: int,
    start: Callable[[Accelerator, TrainConfig, Path, int], None],
) -> None:
    try:
        start(accelerator, cfg, Path(cfg.output_dir), resumed_step)
    except TrackerError:
        raise
    except Exception as error:  # each library raises its own types; all of them stop the run
        raise TrackerError(f"tensorboard cannot start: {one_line(error)}") from None
    if not accelerator.trackers:  # Accelerate silently skips a tracker whose package is missing
        raise TrackerError("tensorboard is not installed; `pip install -e .` installs it")


def tracked(split: str, values: dict[str, Any]) -> dict[str, Any]:
    """Metric names as the tracker shows them, grouped by split: `train/loss`, `val/accuracy`."""
    return {f"{split}/{name}": value for name, value in values.items() if name != "step"}


def writable_dir(directory: Path) -> Path:
    """Create the tracker's folder and prove it writable, so a bad path fails before training."""
    reason = unwritable_reason(directory)
    if reason:
        raise TrackerError(f"tensorboard cannot write to '{directory}' ({reason})")
    return directory


def one_line(error: Exception) -> str:
    return " ".join(str(error).split()) or type(error).__name__
