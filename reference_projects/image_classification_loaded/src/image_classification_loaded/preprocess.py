"""How an image becomes the network's input: the one definition of preprocessing, saved with
the model (model/preprocess.json) for predict and export.

Preprocess is this project's own (the configured size, normalised with the training images'
statistics); PretrainedImages is a pretrained model's (pretrained.py reads its input size and
normalisation from its image processor) and carries the model's config beside them.
"""

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from .utils.files import write_json

# How an image becomes the network's input (model.json names both for code without ours).
RESAMPLE = Image.Resampling.BILINEAR
PIXEL_MAX = 255.0  # 8-bit pixels to [0, 1]


@dataclass(frozen=True)
class Preprocess:
    """PIL image -> normalised float tensor (C, H, W): the one definition of preprocessing."""

    image_size: int
    image_channels: int
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    class_names: tuple[str, ...] = ()

    def __call__(self, image: Image.Image) -> torch.Tensor:
        pixels = self.to_unit_range(image)
        mean = torch.tensor(self.mean).view(-1, 1, 1)
        std = torch.tensor(self.std).view(-1, 1, 1)
        return (pixels - mean) / std

    @property
    def mode(self) -> str:
        """The PIL mode every image is converted to (an alpha channel is dropped, a palette
        looked up, grey repeated or colours weighted into grey)."""
        return "L" if self.image_channels == 1 else "RGB"

    def to_unit_range(self, image: Image.Image) -> torch.Tensor:
        image = image.convert(self.mode)
        size = (self.image_size, self.image_size)
        if image.size != size:
            image = image.resize(size, RESAMPLE)  # the whole image: no crop, aspect not kept
        array = np.asarray(image, dtype=np.float32) / PIXEL_MAX  # (H, W) or (H, W, C)
        return torch.from_numpy(array).reshape(*size, self.image_channels).permute(2, 0, 1)

    def save(self, path: Path) -> None:
        # allow_nan=False: strict JSON, never Infinity or NaN, which other readers refuse.
        write_json(path, asdict(self), allow_nan=False)  # atomically

    @classmethod
    def load(cls, path: Path) -> "Preprocess":
        """The preprocessing saved at `path`: this one, or a pretrained model's."""
        fields = json.loads(path.read_text())
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
        if "architecture" in fields:
            return PretrainedImages(**fields)
        return cls(**fields)


@dataclass(frozen=True)
class PretrainedImages(Preprocess):
    """Preprocess with a pretrained model's input size, channels, mean and std, from its image
    processor (images are resized to the square size, scaled to [0, 1] and normalised), and
    the model's config: saved together into model/preprocess.json."""

    architecture: dict[str, Any] = field(default_factory=dict, repr=False)  # config.json
    # Where the pretrained weights come from; None: the architecture alone (predict and
    # export load trained weights into it). Not saved: model/ does not need the source.
    weights_from: str | None = field(default=None, compare=False)

    def save(self, path: Path) -> None:
        content = {k: v for k, v in asdict(self).items() if k != "weights_from"}
        write_json(path, content, allow_nan=False)  # atomically, as the other preprocessing
