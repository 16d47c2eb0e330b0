"""Data for the tests: arguments for short epochs of the embedded diabetes table, and small
datasets in the user's format. conftest.py loads these fixtures (pytest_plugins)."""

from pathlib import Path

import numpy as np
import pytest

# Short runs train the default model on the embedded data: both are small already.
SHORT_RUN_FIELDS: dict[str, object] = {}


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
