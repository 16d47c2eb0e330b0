"""Data for the tests: arguments for short epochs of the embedded Python docs, small datasets
in the user's format, and what test_describe.py and test_model_folder.py expect of this task.
conftest.py loads these fixtures (pytest_plugins)."""

from pathlib import Path

import pytest

from language_modeling.data import embedded_text
from language_modeling.loaders import Datasets
from language_modeling.predict import main as predict
from language_modeling.sample import main as sample

# Short runs' data and model: most tests run a few steps many times, and what they check
# does not depend on either's size (test_fast_dev_run runs the defaults).
SHORT_RUN_FIELDS = {"corpus_bytes": 20000, "width": 64, "layers": 2}


@pytest.fixture(scope="session")
def embedded_args():
    """Arguments for the embedded data where a test needs epochs of at most 13 steps."""
    # The first 12 KB of the docs: 10.8 KB of training text make 10 steps of 32 windows; the
    # default run is two epochs, so ask for enough of them. A two-layer model: these tests
    # run the same 30 steps several times, and resuming exactly does not depend on its size.
    return ["--corpus_bytes", "12000", "--epochs", "10", "--width", "64", "--layers", "2"]


@pytest.fixture(scope="session")
def user_data():
    """Arguments that train on a small dataset in the user's format, written under `root`:
    a folder of three .txt files, 6 KB of text. 10 steps of 16 windows make an epoch; the
    model is embedded_args' two layers."""

    def args(root: Path) -> list[str]:
        data_dir = _text_folder(root / "texts", files=3, size=2000)
        fields = {"data_dir": data_dir, "batch_size": 16, "epochs": 10, "width": 64, "layers": 2}
        return [f"--{name}={value}" for name, value in fields.items()]

    return args


@pytest.fixture(scope="session")
def make_text_folder():
    return _text_folder


def _text_folder(root: Path, files: int = 3, size: int = 2000) -> Path:
    """`files` UTF-8 .txt files of `size` characters each: passages of the Python docs."""
    root.mkdir(parents=True)
    text = embedded_text()
    for index in range(files):
        start = 50_000 * (index + 1)
        (root / f"part{index}.txt").write_text(text[start : start + size], encoding="utf-8")
    return root


# For test_model_folder.py: a field of another task's config, and each command that reads a
# model folder, as a function of the folder (what follows it never matters: it is checked
# first).
FOREIGN_FIELD = "text_field"
MODEL_FOLDER_COMMANDS = {
    "predict": lambda model_dir: predict([str(model_dir), "text.txt"]),
    "sample": lambda model_dir: sample([str(model_dir), "--length", "3"]),
}


def described_lines(datasets: Datasets) -> list[str]:
    """For test_describe.py: the lines, or their starts, that describe shows of user_data's
    datasets besides every task's (words one space apart)."""
    return [f"train text: {len(datasets.train_targets)} bytes, "]
