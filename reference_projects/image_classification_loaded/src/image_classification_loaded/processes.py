"""What running as several processes decides: the Accelerator that joins them and its log,
each process's share of the data, how the model is spread over them (sharded: sharding.py),
when gradients are reduced, and the loop's log window, metrics log, progress bar, profiler
and preemption handler, each the global one (the main process logs and writes; every
process stops together)."""

import gc
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

import torch
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs
from torch import nn
from torch.distributed.fsdp import FSDPModule

from .average import NoAverage, WeightAverage
from .checkpoint import Progress
from .config import TrainConfig
from .distributed import (
    DiscardedLog,
    GlobalLogWindow,
    SharedPreemption,
    broadcast_buffers,
    check_launch,
    sum_over_processes,
)
from .loaders import Datasets, Loader, build_loaders
from .run_folder.records import METRICS_FILE, MetricsLog
from .sharding import shard_model
from .utils.monitor import ProgressReport, TrainingClock, configure_logging
from .utils.profiling import NoProfiler, build_profiler

log = logging.getLogger(__name__)


class StepWithModel(Protocol):
    """optim.TrainStep, which imports this module: what the end of the processes needs."""

    model: nn.Module | None


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
    if accelerator.num_processes == 1:  # started alone: no process group to tell
        work()
    elif accelerator.is_main_process:
        failed = True
        try:
            work()
            failed = False
        finally:
            _share_verdict(accelerator, failed)
    elif _share_verdict(accelerator, False):
        raise SystemExit(1)


def _share_verdict(accelerator: Accelerator, failed: bool) -> bool:
    """Rank 0's verdict, on every process; after a failure the group is closed, as one torn
    down at exit can abort a process (SIGABRT)."""
    verdict = torch.tensor([int(failed)], device=accelerator.device)
    torch.distributed.broadcast(verdict, src=0)
    failed = bool(verdict.item())
    if failed:
        accelerator.state.destroy_process_group()
    return failed


def process_seed(cfg: TrainConfig, accelerator: Accelerator) -> int:
    """This process's seed: dropout and loader workers differ by process; weights and batch
    order do not (DDP broadcasts the weights, loaders.py shares the order)."""
    return (cfg.seed + accelerator.process_index) % 2**32


def process_loaders(
    cfg: TrainConfig, datasets: Datasets, accelerator: Accelerator, generator: torch.Generator
) -> tuple[Loader, Loader]:
    """This process's share of each global batch, for training and evaluation (loaders.py)."""
    rank, world_size = accelerator.process_index, accelerator.num_processes
    return build_loaders(cfg, datasets, accelerator.device, generator, rank, world_size)


def _sync_batchnorm(model: nn.Module, accelerator: Accelerator) -> nn.Module:
    """BatchNorm over the global batch, as one process would compute it (no collective here).

    PyTorch's SyncBatchNorm needs GPUs (DDP refuses it on the CPU): CPU processes keep
    BatchNorm statistics of their own share of each batch, so their steps differ slightly
    from one process's with the global batch.
    """
    has_batchnorm = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    if accelerator.num_processes == 1 or not has_batchnorm:
        return model
    if accelerator.device.type == "cpu":
        log.info("BatchNorm statistics are per process: SyncBatchNorm needs GPUs")
        return model
    return nn.SyncBatchNorm.convert_sync_batchnorm(model)


def distribute_model(
    model: nn.Module,
    average: NoAverage | WeightAverage,
    cfg: TrainConfig,
    accelerator: Accelerator,
) -> nn.Module:
    """The model to train on several processes, with BatchNorm over the global batch,
    sharded (sharding.py), and its weights' average sharded as it is."""
    model = _sync_batchnorm(model, accelerator)
    if average.module is not model:  # a copy (ema_decay)
        shard_model(average.module, cfg, accelerator)
    return shard_model(model, cfg, accelerator)


def prepare_model(accelerator: Accelerator, model: nn.Module) -> nn.Module:
    """The model as Accelerate runs it, its forward under the precision's autocast, if any,
    but not wrapped in DDP: it is sharded (distribute_model). Accelerate's evaluation mode
    is that preparation, for training here too."""
    return accelerator.prepare_model(model, evaluation_mode=True)


def gradient_sync(
    accelerator: Accelerator, model: nn.Module, last_micro_batch: bool
) -> AbstractContextManager:
    """Gradients are reduce-scattered in backward on a group's last micro-batch only; the
    others' are summed locally first."""
    if isinstance(model, FSDPModule):  # not when started alone
        model.set_requires_gradient_sync(last_micro_batch)
    return nullcontext()


def evaluation_outputs(
    model: nn.Module, loader: Loader, device: torch.device
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The model's outputs and the targets of each batch of this process's share.

    Every forward of a sharded model is a collective (its gathers): a process whose share
    ran out first (the last batch may leave it nothing, a small set every batch) runs the
    model on rank 0's first sample and drops the result, so that the others' gathers do not
    wait for it.
    """
    batches = iter(loader)
    first = next(batches, None)
    padding = None
    if torch.distributed.is_initialized():  # not when started alone: nothing to wait for
        sample = [None if first is None else first[0][:1].cpu()]
        torch.distributed.broadcast_object_list(sample, src=0)
        padding = sample[0].to(device)
    for index in range(len(loader)):  # the same count on every process
        batch = first if index == 0 else next(batches, None)
        if batch is None:
            model(padding)
            continue
        inputs = batch[0].to(device, non_blocking=True)
        yield model(inputs), batch[1].to(device, non_blocking=True)


def evaluation_buffers(model: nn.Module, accelerator: Accelerator) -> None:
    """Each process evaluates its share with rank 0's buffers (BatchNorm statistics)."""
    broadcast_buffers(model, accelerator)


def global_metrics(metrics: Any, accelerator: Accelerator) -> Any:
    """Every process's share of the evaluation, summed: each sample counted once."""
    return sum_over_processes(metrics, accelerator)


def close_processes(accelerator: Accelerator, train_step: StepWithModel) -> None:
    """Close the process group once DDP has let go of it. Were DDP's reducer the group's last
    holder, freeing it would join the group's threads while holding the GIL, which a thread
    freeing a collective's tensors waits for: the run would log `done` and hang. The group's
    own close releases the GIL while it joins them. The barrier first gives those threads
    time to free the last collectives' tensors (its own has none that Python holds)."""
    if not torch.distributed.is_initialized():  # started alone: no group, and no DDP
        return
    accelerator.wait_for_everyone()
    train_step.model = None  # the DDP wrapper; Accelerate holds the only other reference
    accelerator.free_memory()
    gc.collect()  # DDP in a reference cycle would otherwise outlive the group
    accelerator.state.destroy_process_group()


def open_metrics_log(accelerator: Accelerator, output_dir: Path, progress: Progress) -> MetricsLog:
    """metrics.jsonl, written by the main process only."""
    if accelerator.is_main_process:
        return MetricsLog(output_dir / METRICS_FILE, resume_step=progress.step)
    return DiscardedLog()


def start_log_window(
    accelerator: Accelerator, cfg: TrainConfig, progress: Progress, clock: TrainingClock
) -> GlobalLogWindow:
    """The window of the steps since the last log step, with a resumed run's losses."""
    first_step = progress.step - len(progress.window_losses)
    return GlobalLogWindow(
        accelerator, accelerator.device, first_step, progress.window_losses, clock
    )


def progress_report(accelerator: Accelerator, progress: Progress) -> ProgressReport:
    """The main process's progress bar (or log lines); the others show none."""
    return ProgressReport(progress.total_steps, progress.step, accelerator.is_main_process)


def start_profiler(
    accelerator: Accelerator, cfg: TrainConfig, output_dir: Path
) -> torch.profiler.profile | NoProfiler:
    """The main process's profiler: it writes every file of the run, and DDP's gradient
    all-reduce in its trace shows how long it waited for the others."""
    return build_profiler(cfg.profile and accelerator.is_main_process, output_dir / "profile")


def preemption(accelerator: Accelerator, train_step: StepWithModel) -> SharedPreemption:
    """The loop's stop on a signal. A stopped run closes its process group before it exits:
    one left to the interpreter's exit can abort a process (SIGABRT), and a SLURM job would
    see 134 instead of 75, and not be requeued."""
    return SharedPreemption(accelerator, on_stop=lambda: close_processes(accelerator, train_step))
