"""Evaluation: the task's metrics over the whole evaluation set, every sample counted once."""

from typing import Any

import torch
from accelerate import Accelerator
from torch import nn

from . import task


def evaluate(
    model: nn.Module, loader, accelerator: Accelerator, preprocess: Any
) -> dict[str, float]:
    """The task's metrics of `model` (left in training mode) over every batch of `loader`."""
    device = accelerator.device
    model.eval()
    release_cached_memory(device)  # training's cached blocks, for evaluation's other shapes
    metrics = task.Metrics(device, preprocess)
    with torch.inference_mode():
        for inputs, targets in loader:
            inputs = inputs.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            metrics.update(model(inputs), targets)
    release_cached_memory(device)  # and evaluation's, before training allocates again
    model.train()
    return metrics.compute()


def release_cached_memory(device: torch.device) -> None:
    """Return the CUDA caching allocator's free blocks to the device: around evaluation only,
    where the shapes change; on every step it would only cost a device sync."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
