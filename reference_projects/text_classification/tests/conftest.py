import csv
import json
from pathlib import Path

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState, PartialState

from text_classification.config import load_config
from text_classification.reviews import generate_reviews


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
            # A small model: most tests run a few steps many times, and what they check does
            # not depend on its size (test_fast_dev_run runs the defaults).
            "width": 32,
            "layers": 1,
        }
        return [f"--{name}={value}" for name, value in fields.items()] + list(extra)

    return args


@pytest.fixture
def cfg():
    return load_config([])


@pytest.fixture(scope="session")
def embedded_args():
    """Arguments for the embedded data where a test needs epochs of at most 13 steps."""
    # 4,800 training reviews make 10 steps of 512. A one-layer encoder: these tests run the
    # same 30 steps several times, and resuming exactly does not depend on the model's size.
    return ["--batch_size", "512", "--width", "32", "--layers", "1"]


@pytest.fixture(scope="session")
def user_data():
    """Arguments that train on a small dataset in the user's format, written under `root`:
    a folder with train.csv, 200 reviews, batched by 2 loader workers. 10 steps of 16 make an
    epoch; the model is embedded_args' one layer."""

    def args(root: Path) -> list[str]:
        train = _text_file(root / "reviews" / "train.csv", *generate_reviews(200, seed=1))
        fields = {"data_dir": train.parent, "batch_size": 16, "num_workers": 2}
        fields |= {"width": 32, "layers": 1}
        return [f"--{name}={value}" for name, value in fields.items()]

    return args


@pytest.fixture(scope="session")
def make_text_file():
    return _text_file


def _text_file(path: Path, texts: list[str], labels: list, fields=("text", "label")) -> Path:
    """Texts and labels as a CSV file with a header, or as JSONL: one object per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [dict(zip(fields, row, strict=True)) for row in zip(texts, labels, strict=True)]
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    else:
        with path.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
    return path
