"""The loop's log: each record of a training step or an evaluation goes to
output_dir/metrics.jsonl and to the tensorboard run (tracking.py), from the main process."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from accelerate import Accelerator

from .checkpoint import Progress
from .config import TrainConfig
from .processes import open_metrics_log
from .run_folder.records import MetricsLog
from .tracker_run import TrackerRun
from .tracking import start_tracker


class RunLog:
    """metrics.jsonl and the tracker's run, written together."""

    def __init__(self, metrics_log: MetricsLog, tracker: TrackerRun):
        self.metrics_log = metrics_log
        self.tracker = tracker

    def write(self, record: dict[str, Any]) -> None:
        self.metrics_log.write(record)
        self.tracker.log(record)


@contextmanager
def open_run_log(
    accelerator: Accelerator, cfg: TrainConfig, progress: Progress
) -> Iterator[RunLog]:
    """The tracker's run, continued when resuming, then metrics.jsonl, around the loop.

    A tracker that cannot start stops the run here, before its first step. The tracker's run
    ends with the loop: finished, or failed or killed by the error that stopped the loop.
    """
    with (
        start_tracker(accelerator, cfg, progress.step) as tracker,
        open_metrics_log(accelerator, Path(cfg.output_dir), progress) as metrics_log,
    ):
        yield RunLog(metrics_log, tracker)
