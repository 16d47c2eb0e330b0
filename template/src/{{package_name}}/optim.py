"""Optimizer and learning-rate schedule."""

import math
from functools import partial

import torch
from torch import nn

from .config import TrainConfig


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW over trainable parameters; biases and norm weights (1-D) get no weight decay.

    Freeze parameters (requires_grad_(False)) before this is called: the optimizer only
    ever sees the parameters that require gradients now.
    """
    trainable = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in trainable if p.ndim >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in trainable if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr)


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: TrainConfig, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Stepped once per optimizer step (not per micro-batch, not per epoch)."""
    schedule = partial(warmup_cosine, warmup_steps=cfg.warmup_steps, total_steps=total_steps)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


def warmup_cosine(step: int, warmup_steps: int, total_steps: int) -> float:
    """LR multiplier: linear warmup to 1 over warmup_steps, then cosine decay to 0."""
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    decay_steps = max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup_steps) / decay_steps)))
