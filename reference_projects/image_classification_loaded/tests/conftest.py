from pathlib import Path

import numpy as np
import pytest
import torch
from accelerate.state import AcceleratorState, GradientState, PartialState
from PIL import Image

from image_classification_loaded.config import load_config
from image_classification_loaded.train import main as train


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
            # Compiling costs seconds per run; test_fast_dev_run trains the compiled model.
            "compile": False,
            "export_at_end": False,  # test_export.py exports; other tests need not pay for it
        }
        return [f"--{name}={value}" for name, value in fields.items()] + list(extra)

    return args


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """A fast dev run's 4 steps, ending with the verified export, in outputs/run, where the
    README's examples read it (a fast dev run itself writes into outputs/run/fast-dev-run)."""
    run_dir = tmp_path_factory.mktemp("project") / "outputs" / "run"
    args = ["--output_dir", str(run_dir), "--max_steps", "4", "--eval_every", "2"]
    args += ["--checkpoint_every", "2", "--log_every", "1"]
    args += ["--compile", "false"]  # test_train's fast dev run covers the compiled model
    train(args)
    return run_dir


@pytest.fixture
def cfg():
    return load_config([])


@pytest.fixture(scope="session")
def embedded_args():
    """Arguments for the embedded data where a test needs epochs of at most 13 steps."""
    return ["--batch_size", "128"]  # the digits' 1,437 training images make 12 steps


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
