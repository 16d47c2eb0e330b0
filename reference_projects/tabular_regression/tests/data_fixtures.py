"""Data for the tests: arguments for short epochs of the embedded diabetes table, small
datasets in the user's format, and what test_describe.py and test_model_folder.py expect of
this task. conftest.py loads these fixtures (pytest_plugins)."""

from pathlib import Path

import numpy as np
import pytest

from tabular_regression.loaders import Datasets
from tabular_regression.predict import main as predict
from tabular_regression.reference import main as reference

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


# For test_model_folder.py: a field of another task's config, and each command that reads a
# model folder, as a function of the folder (what follows it never matters: it is checked
# first).
FOREIGN_FIELD = "text_field"
MODEL_FOLDER_COMMANDS = {
    "predict": lambda model_dir: predict([str(model_dir), "rows.csv"]),
    "reference": lambda model_dir: reference([str(model_dir)]),
}


def described_lines(datasets: Datasets) -> list[str]:
    """For test_describe.py: the lines, or their starts, that describe shows of user_data's
    datasets besides every task's (words one space apart)."""
    names = datasets.preprocess.feature_names
    return [f"features: {len(names)} ({', '.join(names)})", "target 'y' in train: "]
