"""What the model learns: text classification, its loss, metrics and trivial baseline."""

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .config import TrainConfig
from .data import Preprocess

TASK = "text_classification"
METRIC = "accuracy"  # the metric that picks the best checkpoint and goes into summary.json
HIGHER_IS_BETTER = True
# Texts are padded to the longest of their batch, so the sequence length changes from
# batch to batch: compile one graph for any length, and no cuDNN autotuning (train.py).
DYNAMIC_SHAPES = True


def compute_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy over the batch; `logits` (B, num_classes), `targets` (B,) class ids."""
    return F.cross_entropy(logits, targets)


class Metrics:
    """Accumulates evaluation results on the device; syncs to the host once, in compute().

    Every attribute is a tensor of sums, so results from several processes add up. The
    confusion matrix (rows: true class, columns: predicted) holds accuracy and macro-F1.
    """

    def __init__(self, device: torch.device, preprocess: Preprocess):
        classes = len(preprocess.class_names)
        self.confusion = torch.zeros((classes, classes), dtype=torch.long, device=device)
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=device)

    def update(self, logits: Tensor, targets: Tensor) -> None:
        classes = logits.shape[1]
        cells = targets * classes + logits.argmax(dim=1)
        self.confusion += torch.bincount(cells, minlength=classes * classes).view(classes, -1)
        self.loss_sum += F.cross_entropy(logits.float(), targets, reduction="sum")

    def compute(self) -> dict[str, float]:
        confusion = self.confusion.double().cpu()
        count = confusion.sum().item()
        true_positives = confusion.diagonal()
        support, predicted = confusion.sum(dim=1), confusion.sum(dim=0)
        # Per-class F1 = 2 TP / (2 TP + FP + FN), over the classes that occur in the targets
        # or the predictions (as scikit-learn's f1_score(average="macro") does).
        present = (support + predicted) > 0
        f1 = 2 * true_positives[present] / (support + predicted)[present]
        return {
            METRIC: true_positives.sum().item() / count,
            "macro_f1": f1.mean().item(),
            "loss": self.loss_sum.item() / count,
        }


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
