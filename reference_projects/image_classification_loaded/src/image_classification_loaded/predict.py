"""Classify images with a trained model.

    python -m image_classification_loaded.predict outputs/run/model image.png [...]

Loads model/ as training wrote it: the weights, the config that shaped the network, and
the preprocessing fitted on the training data, so inference sees what training saw.
"""

import sys

import torch
from PIL import Image
from torch import nn

from .images import load_image
from .loaders import DataError
from .model_folder import ModelFolderError, load_trained
from .preprocess import Preprocess
from .utils.cli import Parser


@torch.inference_mode()
def predict(model: nn.Module, preprocess: Preprocess, images: list[Image.Image]) -> list[str]:
    batch = torch.stack([preprocess(image) for image in images])
    return [preprocess.class_names[i] for i in model(batch).argmax(dim=1).tolist()]


def main(argv: list[str] | None = None) -> None:
    parser = Parser("predict", "Classify images with a trained model.")
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="a training run's model/ folder")
    parser.add_argument("paths", metavar="IMAGE", nargs="+", help="image files to classify")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        model, preprocess = load_trained(args.model_dir)
        images = [load_image(path) for path in args.paths]
    except (ModelFolderError, DataError) as error:
        raise SystemExit(f"error: {error}") from None
    for path, label in zip(args.paths, predict(model, preprocess, images), strict=True):
        print(f"{path}\t{label}")


if __name__ == "__main__":
    main()
