"""Segment images with a trained model, writing one mask PNG per image.

    python -m semantic_segmentation.predict outputs/run/model *.png [--out DIR]

Loads model/ as training wrote it: the weights, the config that shaped the network, and
the preprocessing fitted on the training data, so inference sees what training saw. Each
mask is a single-channel PNG of class ids at the image's own size, named like the image
(DIR/image.png, default DIR: predictions), the format --data_dir reads masks in.
"""

import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn

from .data import Preprocess
from .images import load_image
from .loaders import DataError
from .model_folder import ModelFolderError, load_trained
from .utils.cli import Parser


@torch.inference_mode()
def predict(model: nn.Module, preprocess: Preprocess, images: list[Image.Image]) -> torch.Tensor:
    """Class ids (N, image_size, image_size): the model's resolution, as in evaluation."""
    batch = torch.stack([preprocess(image) for image in images])
    return model(batch).argmax(dim=1)


def to_mask_image(mask: torch.Tensor, size: tuple[int, int]) -> Image.Image:
    """Class ids as a mode-L image of `size` (width, height), resized by nearest neighbour."""
    image = Image.fromarray(mask.numpy().astype(np.uint8))  # 2-D uint8: mode L
    return image if image.size == size else image.resize(size, Image.Resampling.NEAREST)


def histogram(mask: Image.Image, class_names: tuple[str, ...]) -> str:
    """Pixels of each class, e.g. `background=812 circle=150 square=0 triangle=62`."""
    counts = np.bincount(np.asarray(mask).ravel(), minlength=len(class_names))
    return " ".join(f"{name}={count}" for name, count in zip(class_names, counts, strict=True))


def main(argv: list[str] | None = None) -> None:
    parser = Parser("predict", "Segment images with a trained model, one mask PNG per image.")
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="a training run's model/ folder")
    parser.add_argument("paths", metavar="IMAGE", nargs="+", type=Path, help="images to segment")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("predictions"),
        metavar="DIR",
        help="where the masks are written (default: %(default)s)",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        model, preprocess = load_trained(args.model_dir)
    except ModelFolderError as error:
        raise SystemExit(f"error: {error}") from None
    args.out.mkdir(parents=True, exist_ok=True)
    for path in args.paths:
        try:
            image = load_image(path)
        except DataError as error:
            raise SystemExit(f"error: {error}") from None
        (mask,) = predict(model, preprocess, [image])
        mask_image = to_mask_image(mask, image.size)
        mask_path = args.out / f"{path.stem}.png"
        mask_image.save(mask_path)
        print(f"{path}\t{mask_path}\t{histogram(mask_image, preprocess.class_names)}")


if __name__ == "__main__":
    main()
