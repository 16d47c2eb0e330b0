"""What the model learns: the next byte of text, its loss, bits per character and baseline.

The loss is the mean cross-entropy of the next byte, in nats. The metric divides the
total information, in bits, by the number of characters scored: bits per character, the
unit in which text compressors and character-level models are compared. A character is
1 to 4 UTF-8 bytes; for ASCII text bits per character equals bits per byte (loss / ln 2),
and the embedded documentation is 99.75% ASCII, so there the two differ by 0.25%.
"""

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .config import TrainConfig
from .data import IGNORE, Preprocess, is_continuation
from .flops import flops_per_token, peak_flops, utilization

TASK = "language_modeling"
METRIC = "bits_per_char"  # the metric that picks the best checkpoint and goes into summary.json
HIGHER_IS_BETTER = False
# Full batches of fixed-size inputs: one compiled graph and one set of cuDNN kernels serve
# every step.
DYNAMIC_SHAPES = False


def compute_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean next-byte cross-entropy over every position; `logits` (B, T, V), `targets` (B, T)."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


class Metrics:
    """Accumulates evaluation results on the device; syncs to the host once, in compute().

    Every attribute is a tensor of sums, so results from several processes add up.
    """

    def __init__(self, device: torch.device, preprocess: Preprocess):
        # Every task's Metrics takes the preprocessing; bytes are bytes, whatever the corpus.
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=device)  # nats
        self.bytes = torch.zeros((), dtype=torch.long, device=device)
        self.chars = torch.zeros((), dtype=torch.long, device=device)

    def update(self, logits: Tensor, targets: Tensor) -> None:
        self.loss_sum += F.cross_entropy(
            logits.float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE, reduction="sum"
        )
        self.bytes += (targets != IGNORE).sum()
        self.chars += count_chars(targets)

    def compute(self) -> dict[str, float]:
        bits = self.loss_sum.item() / math.log(2)
        count = self.bytes.item()
        return {
            METRIC: bits / max(1, self.chars.item()),
            "bits_per_byte": bits / count,
            "loss": self.loss_sum.item() / count,
        }


def count_chars(targets: Tensor) -> Tensor:
    """Characters among the target bytes: the bytes that start one (not IGNORE padding)."""
    return ((targets != IGNORE) & ~is_continuation(targets)).sum()


def baseline(train_targets: Tensor, eval_targets: Tensor) -> float:
    """Bits per character of the unigram model: each byte predicted with its frequency in
    the training text (add-one smoothed, so a byte never seen there costs bits, not inf)."""
    counts = torch.bincount(train_targets[train_targets != IGNORE], minlength=256) + 1
    bits = -(counts.double() / counts.sum()).log2()
    scored = eval_targets[eval_targets != IGNORE]
    return bits[scored].sum().item() / max(1, count_chars(eval_targets).item())


def rates(
    samples_per_s: float | None, model: nn.Module, cfg: TrainConfig, device: torch.device
) -> dict[str, float | None]:
    """What a run logs beside samples/s: tokens/s (a sample is `context` tokens), and MFU on
    a GPU of known peak (flops.py); a CPU or another GPU has no MFU rather than a guess."""
    tokens_per_s = samples_per_s and samples_per_s * cfg.context
    peak = peak_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    if peak is None:
        return {"tokens_per_s": tokens_per_s}
    token_flops = flops_per_token(model, cfg.layers, cfg.width, cfg.context)
    return {"tokens_per_s": tokens_per_s, "mfu": utilization(tokens_per_s, token_flops, peak)}
