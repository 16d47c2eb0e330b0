"""What the model learns: regression of one number, its loss, metrics and trivial baseline.

Targets and predictions are in standardised units (the training target's mean subtracted,
divided by its standard deviation; data.py's Preprocess converts both ways). R^2 is the
same in either unit; an RMSE in the target's own units is sqrt(loss) x target_std.
"""

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .config import TrainConfig
from .data import Preprocess

TASK = "tabular_regression"
METRIC = "r2"  # the metric that picks the best checkpoint and goes into summary.json
HIGHER_IS_BETTER = True
# Full batches of fixed-size inputs: one compiled graph and one set of cuDNN kernels serve
# every step.
DYNAMIC_SHAPES = False


def compute_loss(predictions: Tensor, targets: Tensor) -> Tensor:
    """Mean squared error over the batch; `predictions` and `targets` (B,), standardised."""
    return F.mse_loss(predictions, targets)


class Metrics:
    """Accumulates evaluation results on the device; syncs to the host once, in compute().

    Every attribute is a tensor of sums, so results from several processes add up. R^2 is
    1 - SSE / SST, where SST = sum(y^2) - (sum y)^2 / n around the evaluated targets' mean.
    """

    def __init__(self, device: torch.device, preprocess: Preprocess):
        self.target_std = preprocess.target_std  # RMSE in the target's own units
        self.squared_error = torch.zeros((), dtype=torch.float64, device=device)
        self.target_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.target_square_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.count = torch.zeros((), dtype=torch.long, device=device)

    def update(self, predictions: Tensor, targets: Tensor) -> None:
        targets = targets.double()
        self.squared_error += (predictions.double() - targets).square().sum()
        self.target_sum += targets.sum()
        self.target_square_sum += targets.square().sum()
        self.count += len(targets)

    def compute(self) -> dict[str, float]:
        count = self.count.item()
        squared_error = self.squared_error.item()
        total = self.target_square_sum.item() - self.target_sum.item() ** 2 / count
        return {
            METRIC: 1.0 - squared_error / max(total, 1e-12),
            "rmse": (squared_error / count) ** 0.5 * self.target_std,
            "loss": squared_error / count,
        }


def baseline(train_targets: Tensor, eval_targets: Tensor) -> float:
    """R^2 of always predicting the training split's mean (slightly below 0 on other data)."""
    eval_targets = eval_targets.double()
    squared_error = (eval_targets - train_targets.double().mean()).square().sum()
    total = (eval_targets - eval_targets.mean()).square().sum()
    return 1.0 - (squared_error / total.clamp_min(1e-12)).item()


def rates(
    samples_per_s: float | None, model: nn.Module, cfg: TrainConfig, device: torch.device
) -> dict[str, float | None]:
    """What a run logs beside samples/s: nothing for this task (a language model adds its
    tokens/s and MFU)."""
    return {}
