"""The model: a small U-Net that returns a logit per class for every pixel."""

import torch
from torch import Tensor, nn

from .config import TrainConfig
from .data import Preprocess


class ConvBlock(nn.Sequential):
    """Two 3x3 convolutions with BatchNorm and ReLU, at constant resolution."""

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


class UpStage(nn.Module):
    """Double the resolution, join the encoder's features of that resolution, convolve."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, out_channels, kernel_size=2, stride=2)
        self.block = ConvBlock(2 * out_channels, out_channels)

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        return self.block(torch.cat([self.up(x), skip], dim=1))


class UNet(nn.Module):
    """Encoder stages that halve the resolution, a bottleneck, decoder stages that double it
    back, each joined to the encoder output of its resolution (the skip connections that keep
    the outlines sharp), then a 1x1 convolution to class logits.

    (B, C, S, S) -> encoder: (B, width * 2**i, S / 2**i, S / 2**i) for i < depth
    -> bottleneck (B, width * 2**depth, S / 2**depth, ...) -> decoder -> (B, width, S, S)
    -> head -> (B, num_classes, S, S) logits.
    """

    def __init__(self, in_channels: int, num_classes: int, depth: int, width: int, dropout: float):
        super().__init__()
        widths = [width * 2**i for i in range(depth + 1)]
        # ModuleLists, not Python lists: a plain list would hide the stages from
        # .parameters(), .to() and state_dict() (utils/modules.py checks for that).
        self.encoder = nn.ModuleList(
            ConvBlock(c_in, c_out)
            for c_in, c_out in zip([in_channels, *widths[:-2]], widths[:-1], strict=True)
        )
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = ConvBlock(widths[-2], widths[-1])
        self.dropout = nn.Dropout2d(dropout)  # drops whole feature maps of the bottleneck
        self.decoder = nn.ModuleList(
            UpStage(c_in, c_out) for c_in, c_out in zip(widths[:0:-1], widths[-2::-1], strict=True)
        )
        self.head = nn.Conv2d(widths[0], num_classes, kernel_size=1)

    def forward(self, images: Tensor) -> Tensor:
        skips: list[Tensor] = []  # annotated: scripting cannot infer an empty list's type
        x = images
        for stage in self.encoder:
            x = stage(x)
            skips.append(x)
            x = self.pool(x)
        x = self.dropout(self.bottleneck(x))
        for stage in self.decoder:
            x = stage(x, skips.pop())  # the deepest skip first
        return self.head(x)  # logits: the loss applies the softmax


def build_model(cfg: TrainConfig, preprocess: Preprocess) -> nn.Module:
    """The network for `cfg`, sized for the data that `preprocess` (saved with it) prepares."""
    num_classes = len(preprocess.class_names)
    return UNet(preprocess.image_channels, num_classes, cfg.depth, cfg.width, cfg.dropout)
