"""What the model learns: image classification, its loss, metrics and trivial baseline."""

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .config import TrainConfig
from .preprocess import PIXEL_MAX, RESAMPLE, Preprocess

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


# --- export: what an exported model takes and returns (shapes name their dynamic dimensions)
INPUT, OUTPUT = "images", "logits"


def export_signature(preprocess: Preprocess) -> dict[str, list[dict]]:
    """Names, shapes and dtypes of the exported model's input and output, for model.json,
    with the steps that make the input from an image and what the output means: all that
    code without this project needs to reproduce predict."""
    sample = [preprocess.image_channels, preprocess.image_size, preprocess.image_size]
    size = [preprocess.image_size, preprocess.image_size]  # width, height
    steps = [  # Preprocess's, in order: an image file to one sample of the input
        {"op": "decode", "with": "PIL.Image.open"},
        {"op": "convert", "mode": preprocess.mode, "with": "PIL.Image.Image.convert"},
        {"op": "resize", "size": size, "resample": RESAMPLE.name.lower(), "crop": None},
        {"op": "divide", "by": PIXEL_MAX},
        {"op": "normalize", "mean": list(preprocess.mean), "std": list(preprocess.std)},
        {"op": "layout", "order": ["channels", "height", "width"]},
    ]
    images = {"name": INPUT, "shape": ["batch", *sample], "dtype": "float32", "steps": steps}
    classes = list(preprocess.class_names)
    logits = {"name": OUTPUT, "shape": ["batch", len(classes)], "dtype": "float32"}
    logits |= {"softmax": False, "answer": "argmax", "labels": classes}
    return {"inputs": [images], "outputs": [logits]}


def example_inputs(preprocess: Preprocess, batch_size: int, generator: torch.Generator) -> Tensor:
    """A random batch shaped as preprocessed images, to export and to verify an export with."""
    shape = (batch_size, preprocess.image_channels, preprocess.image_size, preprocess.image_size)
    return torch.randn(shape, generator=generator)
