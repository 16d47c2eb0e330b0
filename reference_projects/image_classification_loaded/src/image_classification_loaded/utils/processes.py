"""What running as several processes decides: the Accelerator that joins them and its log,
and the loop's log window, metrics log, progress bar and preemption handler, each the
global one (the main process logs and writes; every process stops together)."""

import logging
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs, broadcast_object_list

from ..checkpoint import Progress
from ..config import TrainConfig
from .distributed import (
    DiscardedLog,
    GlobalLogWindow,
    SharedPreemption,
    check_launch,
)
from .monitor import ProgressReport, TrainingClock, configure_logging
from .records import MetricsLog

log = logging.getLogger(__name__)


def start_accelerator(cfg: TrainConfig) -> Accelerator:
    """The process group, device and mixed precision of this process, and its log lines.

    The group is set up here, from the launcher's environment, before the model exists. A
    collective that some process never reaches fails after dist_timeout_s.
    """
    group_options = InitProcessGroupKwargs(timeout=timedelta(seconds=cfg.dist_timeout_s))
    accelerator = Accelerator(
        cpu=cfg.cpu,
        mixed_precision="bf16",
        kwargs_handlers=[group_options],
        log_with="tensorboard",  # started by start_tracker(), just before the loop
        project_dir=Path(cfg.output_dir),
    )
    check_launch(accelerator)
    # The other processes log errors only: their warnings would repeat the main one's.
    configure_logging(logging.INFO if accelerator.is_main_process else logging.ERROR)
    return accelerator


def on_main_process(accelerator: Accelerator, work: Callable[[], None]) -> None:
    """Run `work` (the run folder, a checkpoint, model/, the tracker's start) on the main
    process only; the others wait for it, and stop within seconds when it raises.

    Without the shared verdict the others would go on to the next collective and wait there
    for dist_timeout_s, wherever the launcher does not stop them for the failed process (srun
    --kill-on-bad-exit=0, which lets a preempted job requeue; a plain env:// start). The
    main process raises its error, which main() reports in one line; the others exit with
    status 1 and nothing to add.
    """
    if accelerator.is_main_process:
        failed = True
        try:
            work()
            failed = False
        finally:
            _share_verdict(accelerator, failed)
    elif _share_verdict(accelerator, None):
        raise SystemExit(1)


def _share_verdict(accelerator: Accelerator, failed: bool | None) -> bool:
    """Rank 0's verdict, on every process; after a failure the group is closed, as one torn
    down at exit can abort a process (SIGABRT)."""
    failed = broadcast_object_list([failed], from_process=0)[0]
    # A barrier last: a process group closed right after a broadcast can deadlock, its
    # threads waiting for the GIL to free the broadcast's tensors while the close joins them.
    accelerator.wait_for_everyone()
    if failed:
        accelerator.state.destroy_process_group()
    return failed


def open_metrics_log(
    accelerator: Accelerator, output_dir: Path, progress: Progress
) -> MetricsLog | DiscardedLog:
    """metrics.jsonl, written by the main process only."""
    if accelerator.is_main_process:
        return MetricsLog(output_dir / "metrics.jsonl", resume_step=progress.step)
    return DiscardedLog()


def start_log_window(
    accelerator: Accelerator, cfg: TrainConfig, progress: Progress, clock: TrainingClock
) -> GlobalLogWindow:
    """The window of the steps since the last log step, with a resumed run's losses."""
    first_step = progress.step - len(progress.window_losses)
    return GlobalLogWindow(
        accelerator, cfg.log_every, accelerator.device, first_step, progress.window_losses, clock
    )


def progress_report(accelerator: Accelerator, progress: Progress) -> ProgressReport:
    """The main process's progress bar (or log lines); the others show none."""
    return ProgressReport(progress.total_steps, progress.step, accelerator.is_main_process)


def preemption(accelerator: Accelerator) -> SharedPreemption:
    return SharedPreemption(accelerator)
