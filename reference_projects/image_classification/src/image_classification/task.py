"""What the model learns: image classification, its loss, metrics and trivial baseline."""

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .config import TrainConfig
from .preprocess import Preprocess

TASK = "image_classification"
METRIC = "accuracy"  # the metric that picks the best checkpoint and goes into summary.json
HIGHER_IS_BETTER = True
# Full batches of fixed-size inputs: one compiled graph and one set of cuDNN kernels serve
# every step.
DYNAMIC_SHAPES = False


def compute_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy over the batch; `logits` (B, num_classes), `targets` (B,) class ids."""
    return F.cross_entropy(logits, targets)


class Metrics:
    """Accumulates evaluation results on the device; syncs to the host once, in compute().

    Every attribute is a tensor of sums, so results from several processes add up.
    """

    def __init__(self, device: torch.device, preprocess: Preprocess):
        # Every task's Metrics takes the preprocessing; accuracy needs nothing from it.
        self.correct = torch.zeros((), dtype=torch.long, device=device)
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.count = torch.zeros((), dtype=torch.long, device=device)

    def update(self, logits: Tensor, targets: Tensor) -> None:
        self.correct += (logits.argmax(dim=1) == targets).sum()
        self.loss_sum += F.cross_entropy(logits.float(), targets, reduction="sum")
        self.count += len(targets)

    def compute(self) -> dict[str, float]:
        count = self.count.item()
        return {METRIC: self.correct.item() / count, "loss": self.loss_sum.item() / count}


def baseline(train_targets: Tensor, eval_targets: Tensor) -> float:
    """Accuracy of always predicting the training split's most frequent class."""
    majority = torch.bincount(train_targets).argmax()
    return (eval_targets == majority).float().mean().item()


def rates(
    samples_per_s: float | None, model: nn.Module, cfg: TrainConfig, device: torch.device
) -> dict[str, float | None]:
    """What a run logs beside samples/s: nothing for this task (a language model adds its
    tokens/s and MFU)."""
    return {}
