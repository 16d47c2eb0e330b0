"""Data for the tests: arguments for short epochs of the embedded shapes, small datasets in
the user's format, and what test_describe.py and test_model_folder.py expect of this task.
conftest.py loads these fixtures (pytest_plugins)."""

import functools
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from semantic_segmentation import data
from semantic_segmentation.data import synthetic_shapes
from semantic_segmentation.loaders import Datasets
from semantic_segmentation.predict import main as predict

# Short runs' data and model: most tests run a few steps many times, and what they check
# does not depend on either's size (test_fast_dev_run runs the defaults).
SHORT_RUN_FIELDS = {"num_images": 400, "image_size": 16}


@pytest.fixture(scope="session", autouse=True)
def shapes_drawn_once():
    """The session's runs share one copy of each number of embedded shapes, read-only:
    drawing them takes about as long as a short run trains. test_data.py checks that the
    same count always draws the same."""

    @functools.cache
    def drawn_once(count: int) -> tuple[np.ndarray, np.ndarray]:
        images, masks = synthetic_shapes(count)
        images.flags.writeable = masks.flags.writeable = False
        return images, masks

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(data, "synthetic_shapes", drawn_once)
        yield


@pytest.fixture(scope="session")
def embedded_args():
    """Arguments for the embedded data where a test needs epochs of at most 13 steps."""
    # 200 shapes at 16x16 pixels: 160 training images make 10 steps of 16.
    return ["--num_images", "200", "--image_size", "16", "--batch_size", "16"]


@pytest.fixture(scope="session")
def user_data():
    """Arguments that train on a small dataset in the user's format, written under `root`:
    32x32 PNG images and masks, resized to 16x16 and decoded by 2 loader workers. 9 steps
    make an epoch."""

    def args(root: Path) -> list[str]:
        data_dir = _segmentation_folder(root / "shapes", count=96)
        fields = {"data_dir": data_dir, "image_size": 16, "batch_size": 8, "num_workers": 2}
        return [f"--{name}={value}" for name, value in fields.items()]

    return args


@pytest.fixture(scope="session")
def make_segmentation_folder():
    return _segmentation_folder


def _segmentation_folder(root: Path, count: int = 24, suffix: str = ".png") -> Path:
    """`count` synthetic 32x32 shapes as root/images/NNN{suffix} and root/masks/NNN.png."""
    images, masks = synthetic_shapes(count, seed=1)  # not the embedded dataset's seed
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    for index, (image, mask) in enumerate(zip(images, masks, strict=True)):
        Image.fromarray(image).save(root / "images" / f"{index:03d}{suffix}")
        Image.fromarray(mask).save(root / "masks" / f"{index:03d}.png")
    return root


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
    return [*class_counts(datasets), "image files: 96, all 32x32, modes RGB 96"]
