"""Evaluation: the task's metrics over the whole evaluation set, every sample counted once,
and what each evaluation decides: the best checkpoint, and whether the run stops early."""

import logging
from dataclasses import dataclass
from typing import Any

import torch
from accelerate import Accelerator
from torch import nn

from . import task
from .checkpoint import Progress
from .config import TrainConfig
from .processes import evaluation_buffers, evaluation_outputs, global_metrics
from .search.pruning import NoPruning, TrialPruning, trial_pruning

log = logging.getLogger(__name__)


def evaluate(
    model: nn.Module, loader, accelerator: Accelerator, preprocess: Any
) -> dict[str, float]:
    """The task's metrics of `model` (left in training mode) over every batch of `loader`."""
    device = accelerator.device
    evaluation_buffers(model, accelerator)
    model.eval()
    release_cached_memory(device)  # training's cached blocks, for evaluation's other shapes
    metrics = task.Metrics(device, preprocess)
    with torch.inference_mode():
        for outputs, targets in evaluation_outputs(model, loader, device):
            metrics.update(outputs, targets)
    release_cached_memory(device)  # and evaluation's, before training allocates again
    model.train()
    return global_metrics(metrics, accelerator).compute()


def improves(value: float, best: float | None, by: float = 0.0) -> bool:
    """Whether `value` beats `best` by more than `by`, in the direction of the task's metric."""
    if best is None:
        return True
    return value - best > by if task.HIGHER_IS_BETTER else best - value > by


@dataclass(frozen=True)
class EarlyStopping:
    """Ends a run after `patience` evaluations in a row that do not beat the best metric so far
    by more than `min_delta` (patience 0: never), or when a sweep's pruner stops its trial
    (`pruning`). It keeps its count, the best metric and the pruner's verdict in Progress,
    which every checkpoint holds, so a resumed run stops at the step at which an
    uninterrupted one stops."""

    patience: int
    min_delta: float
    pruning: NoPruning | TrialPruning = NoPruning()

    def record(self, progress: Progress, metric: float) -> None:
        """Note an evaluation's metric: the count of evaluations without improvement, and the
        best metric so far (any improvement, however small, makes a new best checkpoint)."""
        if improves(metric, progress.best_metric, self.min_delta):
            progress.stale_evaluations = 0
        else:
            progress.stale_evaluations += 1
        if improves(metric, progress.best_metric):
            progress.best_metric, progress.best_step = metric, progress.step
        if self.pruning.prunes(progress.step, metric):
            progress.pruned = True
            log.info("pruned: the sweep's pruner stops this trial at step %d", progress.step)
        elif self.stops(progress):
            log.info(
                "stopping early: %d evaluations without an improvement of more than %g "
                "(--early_stopping_patience, --early_stopping_min_delta)",
                self.patience,
                self.min_delta,
            )

    def stops(self, progress: Progress) -> bool:
        return progress.pruned or 0 < self.patience <= progress.stale_evaluations


def early_stopping(cfg: TrainConfig, accelerator: Accelerator) -> EarlyStopping:
    """The run's early stopping, which a sweep's trial (`sweep_trial`) may also prune."""
    pruning = trial_pruning(cfg.sweep_trial, accelerator)
    return EarlyStopping(cfg.early_stopping_patience, cfg.early_stopping_min_delta, pruning)


def release_cached_memory(device: torch.device) -> None:
    """Return the CUDA caching allocator's free blocks to the device: around evaluation only,
    where the shapes change; on every step it would only cost a device sync."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
