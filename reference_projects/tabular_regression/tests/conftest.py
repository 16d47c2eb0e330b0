from pathlib import Path

import numpy as np
import pytest
import torch
from accelerate.state import AcceleratorState, GradientState, PartialState

from tabular_regression.config import load_config


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
        }
        return [f"--{name}={value}" for name, value in fields.items()] + list(extra)

    return args


@pytest.fixture
def cfg():
    return load_config([])


@pytest.fixture(scope="session")
def embedded_args():
    """Arguments for the embedded data where a test needs epochs of at most 13 steps."""
    return []  # 353 training rows make 11 steps an epoch at the default batch size


@pytest.fixture(scope="session")
def user_data():
    """Arguments that train on a small dataset in the user's format, written under `root`:
    a folder with train.csv, 200 rows whose target column is `y`. 10 steps of 16 rows make an
    epoch."""

    def args(root: Path) -> list[str]:
        data_dir = _table(root / "table" / "train.csv", rows=200).parent
        fields = {"data_dir": data_dir, "target_column": "y", "batch_size": 16}
        return [f"--{name}={value}" for name, value in fields.items()]

    return args


@pytest.fixture(scope="session")
def make_table():
    return _table


def _table(path: Path, rows: int = 120, seed: int = 0) -> Path:
    """A CSV file of features a, b, c (on different scales) and a target y that depends on
    them, non-linearly in c, plus noise."""
    rng = np.random.default_rng(seed)
    a, b, c = rng.normal(50, 10, rows), rng.normal(0, 0.01, rows), rng.normal(0, 1, rows)
    y = 0.5 * a - 300 * b + 4 * c**2 + rng.normal(0, 1, rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = np.column_stack([a, b, c, y])
    np.savetxt(path, table, fmt="%.6g", delimiter=",", header="a,b,c,y", comments="")
    return path
