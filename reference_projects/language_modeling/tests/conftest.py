from pathlib import Path

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState, PartialState

from language_modeling.config import load_config
from language_modeling.data import embedded_text


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
            "corpus_bytes": 20000,
            "width": 64,
            "layers": 2,
        }
        return [f"--{name}={value}" for name, value in fields.items()] + list(extra)

    return args


@pytest.fixture
def cfg():
    return load_config([])


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
