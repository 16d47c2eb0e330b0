"""Optimizer, learning-rate schedule (linear warmup, then cosine decay to zero) and the
optimizer step that the training loop and tune.py both run."""

import math
import time
from collections.abc import Iterator

import torch
from accelerate import Accelerator
from torch import nn

from . import task
from .average import NoAverage, WeightAverage
from .backbone import optimizer_groups, thaw_when_due
from .config import TrainConfig
from .precision import StepPrecision, build_adamw
from .processes import gradient_sync
from .utils.monitor import LogWindow

# Warmup lasts warmup_steps, but at most this share of the run: a short run (small data, few
# epochs) would otherwise train below its peak learning rate from start to end.
MAX_WARMUP_SHARE = 0.2
# A run of fewer optimizer steps rarely trains well; one derived from --epochs says so.
FEW_STEPS = 100


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW over trainable parameters; biases and norm weights (1-D) get no weight decay.

    Freeze parameters (requires_grad_(False)) before this is called: the optimizer only
    ever sees the parameters that require gradients now.
    """
    trainable = [p for p in model.parameters() if p.requires_grad]
    groups = optimizer_groups(model, trainable, cfg)  # a pretrained backbone's apart
    return build_adamw(groups, cfg)  # fused or not, as the precision's scaler allows


def learning_rate(step: int, cfg: TrainConfig, total_steps: int) -> float:
    """The learning rate for optimizer step `step` (0-based): a pure function of the step.

    Being stateless, the schedule resumes exactly from the step stored in a checkpoint, and
    setting it costs nothing per step (torch's LRScheduler wraps optimizer.step instead). A
    run resumed with another total (--max_steps or --epochs, to extend it) follows the
    schedule of its new total from then on: the decay stretched to the new end.
    """
    warmup_steps = min(cfg.warmup_steps, int(total_steps * MAX_WARMUP_SHARE))
    return cfg.lr * warmup_cosine(step, warmup_steps, total_steps)


def warmup_cosine(step: int, warmup_steps: int, total_steps: int) -> float:
    """LR multiplier: linear warmup to 1 over warmup_steps, then cosine decay to 0."""
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    decay_steps = max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup_steps) / decay_steps)))


class TrainStep:
    """One optimizer step: forward and backward over a group of micro-batches, gradients
    accumulated, then clipping, the scheduled learning rate, the update and the weights'
    average (ema_decay). Losses, samples and the wait for batches go to the log window;
    what the mixed precision changes in a step is precision.py's (StepPrecision)."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        accelerator: Accelerator,
        cfg: TrainConfig,
        total_steps: int,
        average: NoAverage | WeightAverage,
    ):
        self.model, self.optimizer, self.accelerator = model, optimizer, accelerator
        self.cfg, self.total_steps, self.average = cfg, total_steps, average
        self.precision = StepPrecision(accelerator)

    def __call__(
        self, micro_batches: Iterator, group: int, step: int, window: LogWindow
    ) -> tuple[torch.Tensor, float]:
        """Train step `step` (0-based) on the next `group` micro-batches: the gradient norm
        before clipping, and the learning rate. Each loss is divided by the group's size, as
        an epoch's last group may be short."""
        device = self.accelerator.device
        for index in range(group):
            fetch_start = time.perf_counter()
            inputs, targets = next(micro_batches)
            inputs = inputs.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            window.data_s += time.perf_counter() - fetch_start
            with gradient_sync(self.accelerator, self.model, index == group - 1):
                loss = task.compute_loss(self.model(inputs), targets) / group
                self.accelerator.backward(loss)
            window.add_loss(loss.detach())
            window.samples += len(targets)
        grad_norm = self.precision.clip(self.model, self.cfg.max_grad_norm)
        lr = learning_rate(step, self.cfg, self.total_steps)
        for param_group in self.optimizer.param_groups:
            # 1.0 where a checkpoint saved before groups had a scale resumed the optimizer
            param_group["lr"] = lr * param_group.get("lr_scale", 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.average.update()  # NoAverage: nothing
        self.precision.count_skipped(self.optimizer)  # a gradient scaler's, where one runs
        # before the checkpoint of this step, which then holds the thawed backbone
        self.model = thaw_when_due(self.model, self.optimizer, self.cfg, step + 1)
        window.end_step()
        return grad_norm, lr
