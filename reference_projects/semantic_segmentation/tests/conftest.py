from pathlib import Path

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState, PartialState
from PIL import Image

from semantic_segmentation.config import load_config
from semantic_segmentation.data import synthetic_shapes


def reset_accelerate_state() -> None:
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    PartialState._reset_state()


@pytest.fixture(autouse=True)
def fresh_accelerate_state():
    """Each training run in a test starts from a clean Accelerate state, as a new process would,
    whatever a wider fixture's run left."""
    reset_accelerate_state()
    yield
    reset_accelerate_state()


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and tests may run in parallel. For the whole
    session, so that runs in fixtures wider than a test compute as the tests' runs do."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def short_run(tmp_path, short_run_in):
    """Arguments for a short run into a fresh output directory; extra arguments override."""

    def args(*extra: str, output_dir=None) -> list[str]:
        return short_run_in(output_dir or tmp_path / "run", *extra)

    return args


@pytest.fixture(scope="session")
def short_run_in():
    """short_run's arguments for a given output directory, for fixtures wider than a test."""

    def args(output_dir: Path, *extra: str) -> list[str]:
        fields = {
            "output_dir": output_dir,
            "max_steps": 6,
            "log_every": 1,
            "eval_every": 3,
            "checkpoint_every": 3,
            # Small data and a small model: most tests run a few steps many times, and what
            # they check does not depend on either's size (test_fast_dev_run runs the defaults).
            "num_images": 400,
            "image_size": 16,
        }
        return [f"--{name}={value}" for name, value in fields.items()] + list(extra)

    return args


@pytest.fixture
def cfg():
    return load_config([])


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
