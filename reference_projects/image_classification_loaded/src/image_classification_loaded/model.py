"""The model: a small convolutional network that returns logits."""

import math

from torch import Tensor, nn

from .config import TrainConfig
from .preprocess import Preprocess


class ConvStage(nn.Sequential):
    """Two 3x3 convolutions with BatchNorm and ReLU; the caller decides on downsampling."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__(
            # No conv bias: the BatchNorm right after it has its own shift.
            nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),  # safe: BatchNorm's output is not needed for its backward
            nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )


class ConvNet(nn.Module):
    """Stages of convolutions, each halving the resolution but the last, then a linear head.

    (B, C, S, S) -> stages -> (B, width * 2**(n-1), S / 2**(n-1), S / 2**(n-1))
    -> global average pool -> dropout -> linear -> (B, num_classes) logits.
    """

    def __init__(
        self, in_channels: int, num_classes: int, num_stages: int, width: int, dropout: float
    ):
        super().__init__()
        widths = [width * 2**i for i in range(num_stages)]
        # A ModuleList, not a Python list: a plain list would hide the stages from
        # .parameters(), .to() and state_dict() (utils/modules.py checks for that).
        self.stages = nn.ModuleList(
            ConvStage(c_in, c_out)
            for c_in, c_out in zip([in_channels, *widths[:-1]], widths, strict=True)
        )
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Dropout(dropout),
            nn.Linear(widths[-1], num_classes),
        )

    def forward(self, images: Tensor) -> Tensor:
        x = images
        for stage in self.stages[:-1]:
            x = self.pool(stage(x))
        return self.head(self.stages[-1](x))  # logits: the loss applies the softmax


def build_model(cfg: TrainConfig, preprocess: Preprocess) -> nn.Module:
    """The network for `cfg`, sized for the data that `preprocess` (saved with it) prepares;
    with --pretrained, the pretrained model and a new head (pretrained.py)."""
    if cfg.pretrained is not None:
        from .pretrained import build_pretrained  # imports Transformers: only when used

        return build_pretrained(cfg, preprocess)
    # Downsample until about 4x4 pixels remain: 8x8 images get 2 stages, 32x32 get 4.
    num_stages = max(2, int(math.log2(preprocess.image_size)) - 1)
    num_classes = len(preprocess.class_names)
    return ConvNet(preprocess.image_channels, num_classes, num_stages, cfg.width, cfg.dropout)
