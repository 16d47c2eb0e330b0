"""Data for the tests: arguments for short epochs of the embedded digits, small datasets in
the user's format, a small pretrained model's folder, and what test_describe.py and
test_model_folder.py expect of this task. conftest.py loads these fixtures (pytest_plugins)."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from image_classification_loaded.loaders import Datasets
from image_classification_loaded.predict import main as predict

# Short runs' model: most tests run a few steps many times, and what they check does not
# depend on its size (test_fast_dev_run runs the defaults).
SHORT_RUN_FIELDS = {"width": 8}


@pytest.fixture(scope="session")
def embedded_args():
    """Arguments for the embedded data where a test needs epochs of at most 13 steps."""
    # The digits' 1,437 training images make 12 steps of 128. A narrow model: these tests
    # run the same 30 steps several times, and resuming exactly does not depend on its size.
    return ["--batch_size", "128", "--width", "8"]


@pytest.fixture(scope="session")
def user_data():
    """Arguments that train on a small dataset in the user's format, written under `root`:
    image files in class folders, decoded by 2 loader workers. 9 steps make an epoch."""

    def args(root: Path) -> list[str]:
        data_dir = _image_folder(root / "images", per_class=48)
        fields = {"data_dir": data_dir, "image_size": 16, "batch_size": 8, "num_workers": 2}
        return [f"--{name}={value}" for name, value in fields.items()]

    return args


@pytest.fixture(scope="session")
def make_image_folder():
    return _image_folder


def _image_folder(root, classes=("circle", "square"), per_class=12, size=16):
    """A tiny dataset of bright shapes on dark backgrounds, one folder per class."""
    rng = np.random.default_rng(0)
    for label, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for index in range(per_class):
            pixels = rng.integers(0, 40, (size, size, 3), dtype=np.uint8)
            y, x = np.mgrid[:size, :size]
            centre = size / 2
            shape = (
                (y - centre) ** 2 + (x - centre) ** 2 < (size / 3) ** 2
                if label == 0
                else (abs(y - centre) < size / 3) & (abs(x - centre) < size / 3)
            )
            pixels[shape] = 220
            Image.fromarray(pixels).save(root / name / f"{index}.png")
    return root


@pytest.fixture(scope="session")
def pretrained_folder(tmp_path_factory) -> Path:
    """A small ViT in a Hugging Face model folder, as save_pretrained writes one and
    --pretrained reads it: 16x16 RGB inputs in patches of 4, 2 layers of width 32, and its
    image processor. Built here, so the tests need no network; a real model's folder (e.g.
    google/vit-base-patch16-224's) holds the same files."""
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    folder = tmp_path_factory.mktemp("pretrained")
    processor = ViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.5] * 3)
    processor.save_pretrained(folder)
    torch.manual_seed(0)
    shape = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
    config = ViTConfig(image_size=16, patch_size=4, intermediate_size=64, **shape)
    ViTModel(config, add_pooling_layer=False).save_pretrained(folder)
    return folder


# For test_model_folder.py: a field of another task's config, and each command that reads a
# model folder, as a function of the folder (what follows it never matters: it is checked
# first).
FOREIGN_FIELD = "text_field"
MODEL_FOLDER_COMMANDS = {
    "predict": lambda model_dir: predict([str(model_dir), "image.png"]),
}


def class_counts(datasets: Datasets) -> list[str]:
    """The start of describe's line of each class: its name and training count."""
    names = datasets.preprocess.class_names
    counts = datasets.train_targets.flatten().bincount(minlength=len(names))
    return [f"{name} {count} " for name, count in zip(names, counts.tolist(), strict=True)]


def described_lines(datasets: Datasets) -> list[str]:
    """For test_describe.py: the lines, or their starts, that describe shows of user_data's
    datasets besides every task's (words one space apart)."""
    return [*class_counts(datasets), "image files: 96, all 16x16, modes RGB 96"]
