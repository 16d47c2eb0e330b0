"""What the model learns: semantic segmentation, its loss, metrics and trivial baseline.

Mean IoU (intersection over union) is computed from a confusion matrix of pixel counts over
the whole evaluation set, not averaged over batches or images: for each class c,
IoU_c = TP / (TP + FP + FN) in pixels. A class absent from both the predictions and the
ground truth (TP + FP + FN = 0) has no IoU and is left out of the mean rather than counted
as 1 or 0; a class present in the ground truth but never predicted counts as 0.
"""

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .config import TrainConfig
from .data import Preprocess

TASK = "semantic_segmentation"
METRIC = "mean_iou"  # the metric that picks the best checkpoint and goes into summary.json
HIGHER_IS_BETTER = True
# Full batches of fixed-size inputs: one compiled graph and one set of cuDNN kernels serve
# every step.
DYNAMIC_SHAPES = False


def compute_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy over every pixel; `logits` (B, K, H, W), `targets` (B, H, W) ids."""
    return F.cross_entropy(pixel_rows(logits), targets.flatten())


def pixel_rows(logits: Tensor) -> Tensor:
    """(B, K, H, W) -> (B * H * W, K): a row of class logits per pixel. Cross-entropy over
    these rows is the same as over the image-shaped logits, but CUDA has a deterministic
    kernel only for rows (--deterministic true refuses the image-shaped one)."""
    return logits.movedim(1, -1).flatten(0, -2)


def confusion_matrix(predictions: Tensor, targets: Tensor, num_classes: int) -> Tensor:
    """(K, K) pixel counts: row = true class, column = predicted class."""
    index = targets.flatten() * num_classes + predictions.flatten()
    return torch.bincount(index, minlength=num_classes**2).view(num_classes, num_classes)


def mean_iou(confusion: Tensor) -> float:
    """The mean of IoU over classes present in the predictions or the ground truth."""
    confusion = confusion.double()
    true_positives = confusion.diagonal()
    union = confusion.sum(dim=0) + confusion.sum(dim=1) - true_positives  # TP + FP + FN
    present = union > 0
    return (true_positives[present] / union[present]).mean().item()


class Metrics:
    """Accumulates evaluation results on the device; syncs to the host once, in compute().

    Every attribute is a tensor of sums, so results from several processes add up.
    """

    def __init__(self, device: torch.device, preprocess: Preprocess):
        classes = len(preprocess.class_names)  # (true, predicted) pixel counts
        self.confusion = torch.zeros((classes, classes), dtype=torch.long, device=device)
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.pixels = torch.zeros((), dtype=torch.long, device=device)

    def update(self, logits: Tensor, targets: Tensor) -> None:
        num_classes = logits.shape[1]
        self.confusion += confusion_matrix(logits.argmax(dim=1), targets, num_classes)
        rows = pixel_rows(logits.float())
        self.loss_sum += F.cross_entropy(rows, targets.flatten(), reduction="sum")
        self.pixels += targets.numel()

    def compute(self) -> dict[str, float]:
        confusion = self.confusion.cpu()
        pixels = self.pixels.item()
        return {
            METRIC: mean_iou(confusion),
            "pixel_accuracy": confusion.diagonal().sum().item() / pixels,
            "loss": self.loss_sum.item() / pixels,
        }


def baseline(train_targets: Tensor, eval_targets: Tensor) -> float:
    """Mean IoU of predicting the training split's most frequent pixel class (background)
    everywhere: its IoU is its share of the pixels, and every other class present scores 0."""
    majority = torch.bincount(train_targets.flatten()).argmax()
    num_classes = int(max(eval_targets.max().item(), majority.item())) + 1
    predictions = torch.full_like(eval_targets, majority.item())
    return mean_iou(confusion_matrix(predictions, eval_targets, num_classes))


def rates(
    samples_per_s: float | None, model: nn.Module, cfg: TrainConfig, device: torch.device
) -> dict[str, float | None]:
    """What a run logs beside samples/s: nothing for this task (a language model adds its
    tokens/s and MFU)."""
    return {}
