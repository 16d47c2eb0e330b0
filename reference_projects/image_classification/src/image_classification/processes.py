"""What running as one process decides: the Accelerator and its log, the loaders, the model
as built, gradients that need no reduction, and the loop's log window, metrics log,
progress bar, profiler and preemption handler."""

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Protocol

import torch
from accelerate import Accelerator
from torch import nn

from .average import NoAverage, WeightAverage
from .checkpoint import Progress
from .config import ConfigError, TrainConfig
from .loaders import Datasets, Loader, build_loaders
from .run_folder.records import METRICS_FILE, MetricsLog
from .utils.monitor import LogWindow, Preemption, ProgressReport, TrainingClock, configure_logging
from .utils.profiling import NoProfiler, build_profiler

log = logging.getLogger(__name__)


class StepWithModel(Protocol):
    """optim.TrainStep, which imports this module: what the end of the processes needs."""

    model: nn.Module | None


def start_accelerator(cfg: TrainConfig) -> Accelerator:
    """The device and mixed precision of this run, and the package's log lines on stderr."""
    configure_logging(logging.INFO)
    accelerator = Accelerator(
        cpu=cfg.cpu,
        mixed_precision="no",
    )
    # Several processes launched on a machine without GPUs would each train alone.
    if accelerator.num_processes > 1 or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError(
            "this project was rendered with distributed=single; launch it as one process, "
            "or re-render it with `copier update --data distributed=multi`"
        )
    return accelerator


def process_seed(cfg: TrainConfig, accelerator: Accelerator) -> int:
    """The seed of dropout, loader workers and the batch order: the run's."""
    return cfg.seed


def process_loaders(
    cfg: TrainConfig, datasets: Datasets, accelerator: Accelerator, generator: torch.Generator
) -> tuple[Loader, Loader]:
    """The training and evaluation loaders: this process loads every batch (loaders.py)."""
    return build_loaders(cfg, datasets, accelerator.device, generator)


def distribute_model(
    model: nn.Module,
    average: NoAverage | WeightAverage,
    cfg: TrainConfig,
    accelerator: Accelerator,
) -> nn.Module:
    """One process trains the whole model, and sees the whole batch: its BatchNorm
    statistics are the batch's already."""
    return model


def prepare_model(accelerator: Accelerator, model: nn.Module) -> nn.Module:
    """The model as Accelerate runs it: its forward under the precision's autocast, if any."""
    return accelerator.prepare(model)


def gradient_sync(
    accelerator: Accelerator, model: nn.Module, last_micro_batch: bool
) -> AbstractContextManager:
    """One process: backward has no gradients to reduce between processes."""
    return nullcontext()


def evaluation_outputs(
    model: nn.Module, loader: Loader, device: torch.device
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The model's outputs and the targets of each batch of the evaluation set."""
    for inputs, targets in loader:
        inputs = inputs.to(device, non_blocking=True)
        yield model(inputs), targets.to(device, non_blocking=True)


def evaluation_buffers(model: nn.Module, accelerator: Accelerator) -> None:
    """One process: the buffers it evaluates with (BatchNorm statistics) are its own."""


def global_metrics(metrics: Any, accelerator: Accelerator) -> Any:
    """One process evaluated every sample: its metrics are the global ones."""
    return metrics


def close_processes(accelerator: Accelerator, train_step: StepWithModel) -> None:
    """One process has no group to close: its end releases everything."""


def on_main_process(accelerator: Accelerator, work: Callable[[], None]) -> None:
    """The run's writes (run folder, checkpoints, model/): this process is the only one."""
    work()


def open_metrics_log(accelerator: Accelerator, output_dir: Path, progress: Progress) -> MetricsLog:
    return MetricsLog(output_dir / METRICS_FILE, resume_step=progress.step)


def start_log_window(
    accelerator: Accelerator, cfg: TrainConfig, progress: Progress, clock: TrainingClock
) -> LogWindow:
    """The window of the steps since the last log step, with a resumed run's losses."""
    first_step = progress.step - len(progress.window_losses)
    return LogWindow(accelerator.device, first_step, progress.window_losses, clock)


def progress_report(accelerator: Accelerator, progress: Progress) -> ProgressReport:
    return ProgressReport(progress.total_steps, progress.step)


def start_profiler(
    accelerator: Accelerator, cfg: TrainConfig, output_dir: Path
) -> torch.profiler.profile | NoProfiler:
    return build_profiler(cfg.profile, output_dir / "profile")


def preemption(accelerator: Accelerator, train_step: StepWithModel) -> Preemption:
    return Preemption()
