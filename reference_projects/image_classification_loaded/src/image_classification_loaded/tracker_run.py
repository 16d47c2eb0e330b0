"""The tracker's run around the training loop, whichever tracker tracking.py starts: a
tracker that cannot start stops the run before training, in one line; a loop that stops
with an error closes the run as failed or killed.

The loop sends its records of metrics.jsonl, training at log steps and evaluation at
evaluation steps (`TrackerRun.log`), and nothing in between: a training step pays nothing
for tracking.
Accelerate talks to the tracker from the main process only.

A resumed run continues the tracker's run of the run it resumes, whose id the first start
stored in output_dir/RUN_ID_FILE: the steps trained again between the checkpoint and the
interruption are not sent twice, and those up to the checkpoint that the tracker lost (a
killed process's last records) are sent from metrics.jsonl.
"""

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelerate import Accelerator

from .checkpoint import atomic_write
from .config import ConfigError, TrainConfig
from .processes import on_main_process
from .run_folder.records import logged_records, unwritable_reason
from .utils.monitor import Preempted

log = logging.getLogger(__name__)
TRACKER = "tensorboard"
RUN_ID_FILE = "tracker_run.json"  # {TRACKER: run id}, for resumed runs to continue
# start(accelerator, cfg, output_dir, resumed_step) -> the last step the tracker's run holds
Start = Callable[[Accelerator, TrainConfig, Path, int], int]


class TrackerError(ConfigError):
    """The tracker cannot start; raised before the first training step, in one line."""


class TrackerRun:
    """The tracker's run for this process, as returned by start_tracker().

    Used as a context manager around the loop, it closes the run when the loop ends: as
    finished, or, when the loop stops with an error, as failed, or killed when preempted or
    interrupted.
    """

    def __init__(self, accelerator: Accelerator, end_stopped: Callable[[Accelerator, bool], None]):
        self.accelerator = accelerator
        self.end_stopped = end_stopped
        self.tracked_until = 0  # steps the tracker's run already holds (a continued run's)

    def log(self, record: dict[str, Any]) -> None:
        """Send a record of metrics.jsonl, as `split/name` at its step, unless the run holds
        that step already: a resumed run trains those steps again, to the same values."""
        if record["step"] > self.tracked_until:
            self.accelerator.log(tracked(record), step=record["step"])

    def start(self, cfg: TrainConfig, resumed_step: int, start: Start) -> None:
        output_dir = Path(cfg.output_dir)
        try:
            self.tracked_until = start(self.accelerator, cfg, output_dir, resumed_step)
        except TrackerError:
            raise
        except Exception as error:  # each library raises its own types; all of them stop the run
            raise TrackerError(f"tensorboard cannot start: {one_line(error)}") from None
        if not self.accelerator.trackers:  # Accelerate skips a tracker whose package is missing
            raise TrackerError("tensorboard is not installed; `pip install -e .` installs it")
        # What a killed process logged last may never have reached the tracker's files; the
        # checkpoint's steps are in metrics.jsonl.
        for record in logged_records(output_dir, self.tracked_until, resumed_step):
            self.log(record)
        self.tracked_until = max(self.tracked_until, resumed_step)

    def __enter__(self) -> "TrackerRun":
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, traceback: Any) -> None:
        if not self.accelerator.trackers:  # a process other than the main one: none started
            return
        if error is None:
            # Not accelerator.end_training(): it also destroys the process group, which the
            # final evaluation, checkpoint and close_processes() still use.
            for tracker in self.accelerator.trackers:
                tracker.finish()
        else:
            killed = isinstance(error, Preempted | KeyboardInterrupt)
            self.end_stopped(self.accelerator, killed)


def start_run(
    accelerator: Accelerator,
    cfg: TrainConfig,
    resumed_step: int,
    start: Start,
    end_stopped: Callable[[Accelerator, bool], None],
) -> TrackerRun:
    """Start the tracker's run (`start`) with the resolved config as its hyperparameters.

    Raises TrackerError, before any training, when the tracker cannot start: an unwritable
    folder, a malformed setting, a missing package.
    Only the main process tracks; when it cannot start, every process stops.
    """
    run = TrackerRun(accelerator, end_stopped)
    on_main_process(accelerator, lambda: run.start(cfg, resumed_step, start))
    return run


def stored_run_id(output_dir: Path, resumed_step: int) -> str | None:
    """The id of the tracker's run that a resumed run continues; None for a new run."""
    path = output_dir / RUN_ID_FILE
    if not resumed_step:
        return None
    try:
        return str(json.loads(path.read_text())[TRACKER])
    except FileNotFoundError:  # a run folder of an earlier template, or without a tracker
        reason = f"{output_dir} has no {RUN_ID_FILE}"
    except (OSError, ValueError, KeyError, TypeError) as error:
        reason = f"cannot read {path}: {one_line(error)}"
    log.warning("%s: %s; starting a new run", TRACKER, reason)
    return None


def store_run_id(output_dir: Path, run_id: str) -> None:
    """Keep the run's id for the runs that resume this one."""
    content = json.dumps({TRACKER: run_id}) + "\n"
    atomic_write(output_dir / RUN_ID_FILE, lambda file: file.write(content.encode()))


def tracked(record: dict[str, Any]) -> dict[str, Any]:
    """Metric names as the tracker shows them, grouped by split: `train/loss`, `val/accuracy`."""
    split = record.get("split", "train")
    return {f"{split}/{k}": v for k, v in record.items() if k not in ("step", "split")}


def writable_dir(directory: Path) -> Path:
    """Create the tracker's folder and prove it writable, so a bad path fails before training."""
    reason = unwritable_reason(directory)
    if reason:
        raise TrackerError(f"tensorboard cannot write to '{directory}' ({reason})")
    return directory


def one_line(error: Exception) -> str:
    return " ".join(str(error).split()) or type(error).__name__
