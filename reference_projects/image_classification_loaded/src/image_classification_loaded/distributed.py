"""What several processes share: the launch check, global losses and metrics, and agreeing
to stop (checkpoint.py gathers every process's random states; processes.py has the main
process's writes, each process's share of the data and SyncBatchNorm).

Accelerate initialises the process group from the launcher's environment (torchrun,
`accelerate launch` or srun) when train.py creates the Accelerator. Every function here that
takes the accelerator is a collective: all processes call it at the same point of the loop,
or the others wait until `dist_timeout_s` runs out and the run fails.
"""

import os
from collections.abc import Callable
from typing import Any

import torch
from accelerate import Accelerator
from torch import nn

from .config import ConfigError
from .run_folder.records import MetricsLog
from .utils.monitor import LogWindow, Preemption


def check_launch(accelerator: Accelerator) -> None:
    """Refuse processes that were launched together but did not join one group (no collective)."""
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched != accelerator.num_processes:
        # Accelerate only forms a CPU group when asked to run on the CPU; without it each
        # process would train alone, all of them writing into one output_dir.
        raise ConfigError(
            f"{launched} processes were launched but each would train alone; on a machine "
            "without GPUs add --cpu true, so that they train together over gloo"
        )


def broadcast_buffers(model: nn.Module, accelerator: Accelerator) -> None:
    """Give every process rank 0's buffers (BatchNorm running statistics) before evaluation.

    DDP broadcasts them at each training forward, after which each process updates its own
    copy from its share of the batch; evaluation and the checkpoint must use one model.
    """
    if accelerator.num_processes > 1:
        for buffer in model.buffers():
            torch.distributed.broadcast(buffer, src=0)


def sum_over_processes(metrics: Any, accelerator: Accelerator) -> Any:
    """Add up every process's evaluation sums, so each sample counts exactly once.

    A task's Metrics keeps its state as tensors of sums (counts included), so the global
    metrics are the task's compute() over the summed tensors; other attributes are constants.
    """
    for name, value in vars(metrics).items():
        if isinstance(value, torch.Tensor):
            setattr(metrics, name, accelerator.reduce(value, "sum"))
    return metrics


class GlobalLogWindow(LogWindow):
    """A LogWindow of losses averaged over every process: one process with the global batch
    would log the same. They are averaged when read (at log steps and checkpoints), so a
    training step has no collective besides DDP's gradient all-reduce."""

    def __init__(self, accelerator: Accelerator, *args: Any):
        super().__init__(*args)
        self.accelerator = accelerator
        self.averaged = self.steps  # a resumed window starts with losses already averaged

    def restart(self, first_step: int) -> None:
        super().restart(first_step)
        self.averaged = 0

    def pending_losses(self) -> list[float]:
        if self.steps > self.averaged:
            fresh = torch.stack(self.losses[self.averaged :])
            self.losses[self.averaged :] = self.accelerator.reduce(fresh, "mean").unbind()
            self.averaged = self.steps
        return super().pending_losses()

    def counted_samples(self) -> int:
        # Every process trains on equal shares of each global batch (drop_last).
        return self.samples * self.accelerator.num_processes


class SharedPreemption(Preemption):
    """A signal to any process stops every process after the same step.

    Processes receive a scheduler's signal at different steps, or only some receive it, so
    `requested` changes only in agree(), which the loop calls at log steps: choose log_every
    so that that many steps take well under the scheduler's warning time.
    """

    def __init__(self, accelerator: Accelerator, on_stop: Callable[[], None]):
        super().__init__()
        self.accelerator = accelerator
        self.signalled = 0  # the signal this process received, if any
        self.on_stop = on_stop  # once the loop has stopped on a signal, and checkpointed

    def __exit__(self, *exc_info: object) -> None:
        super().__exit__(*exc_info)
        if self.requested:
            self.on_stop()

    def _request(self, signum: int, frame: object) -> None:
        self.signalled = signum
        self.second_ctrl_c_stops_at_once(signum)
        if self.accelerator.num_processes == 1:  # alone, it stops after the current step
            self.requested = signum

    def agree(self) -> None:
        flag = torch.tensor(self.signalled, device=self.accelerator.device)
        self.requested = int(self.accelerator.reduce(flag, "max")) or None


class DiscardedLog(MetricsLog):
    """The metrics log of the processes other than the main one, which writes metrics.jsonl."""

    def __init__(self) -> None:
        """No file: nothing to open."""

    def write(self, record: dict[str, Any]) -> None:
        return None

    def close(self) -> None:
        return None
