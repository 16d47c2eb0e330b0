"""Data: scikit-learn's diabetes table, or your own CSV file with a named target column.

The embedded dataset is scikit-learn's copy of the diabetes study of Efron et al. (2004):
442 patients, 10 numeric features (age, sex, body mass index, blood pressure and six blood
serum measurements) and a measure of disease progression one year later, installed with
scikit-learn, so nothing is downloaded. With `--data_dir DIR`, DIR holds train.csv, a table
with a header row; `--target_column` names the column to predict and every other column is
a feature. An optional val.csv with the same columns holds the validation rows; without
one, `val_fraction` of train.csv is held out. Both go through the same `Preprocess`, which
is saved with the model for inference.
"""

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split

from .config import FAST_DEV_RUN_VAL_BATCHES, ConfigError, TrainConfig
from .loaders import (
    SPLIT_SEED,
    Datasets,
    TensorData,
    fingerprint,
    first_batches_only,
    first_validation_batches,
)
from .tables import Table, not_a_file, read_csv
from .utils.files import write_json

# Rows a table needs so that both splits hold a few samples; R^2 needs at least two.
MIN_ROWS = 10


@dataclass(frozen=True)
class Preprocess:
    """Raw feature rows -> standardised float32 tensor (N, F), and the target both ways.

    Means and standard deviations are those of the training split only, so nothing about
    the validation rows leaks into training. The model works in standardised units of the
    target; `to_target_units` turns its outputs back into the target's own units.
    """

    feature_names: tuple[str, ...]
    feature_mean: tuple[float, ...]
    feature_std: tuple[float, ...]
    target_column: str  # the config field of the same name: export checks they agree
    target_mean: float
    target_std: float

    def __call__(self, features: np.ndarray) -> torch.Tensor:
        """Raw features (N, F), columns in `feature_names` order -> model inputs (N, F)."""
        scaled = (np.asarray(features, dtype=np.float64) - self.feature_mean) / self.feature_std
        return torch.from_numpy(scaled.astype(np.float32))

    def to_model_units(self, target: np.ndarray) -> torch.Tensor:
        """Targets (N,) in their own units -> standardised float32, what the model predicts."""
        scaled = (np.asarray(target, dtype=np.float64) - self.target_mean) / self.target_std
        return torch.from_numpy(scaled.astype(np.float32))

    def to_target_units(self, predictions: torch.Tensor) -> np.ndarray:
        """Model outputs (N,) -> float64 predictions in the target's own units."""
        return predictions.double().numpy() * self.target_std + self.target_mean

    def save(self, path: Path) -> None:
        # allow_nan=False: Infinity and NaN are not JSON; a statistic that overflowed is a
        # bug to stop at, never a file that other readers cannot parse.
        write_json(path, asdict(self), allow_nan=False)  # atomically

    @classmethod
    def load(cls, path: Path) -> "Preprocess":
        fields = json.loads(path.read_text())
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})


def build_datasets(cfg: TrainConfig) -> Datasets:
    if cfg.data_dir is None:
        datasets = _standardised(cfg, *_split(_diabetes(), cfg.val_fraction))
    else:
        datasets = _standardised(cfg, *_user_tables(cfg))
    if cfg.overfit_batches:
        datasets = first_batches_only(datasets, cfg.overfit_batches * cfg.batch_size)
    if cfg.fast_dev_run:
        datasets = first_validation_batches(datasets, FAST_DEV_RUN_VAL_BATCHES, cfg.batch_size)
    return datasets


def describe(datasets: Datasets) -> list[str]:
    """The data command's lines on this data: the features, and the target's range."""
    preprocess = datasets.preprocess
    names = preprocess.feature_names
    lines = [f"features: {len(names)} ({', '.join(names)})"]
    for split_name, targets in (("train", datasets.train_targets), ("val", datasets.val_targets)):
        values = preprocess.to_target_units(targets)
        lines.append(
            f"target '{preprocess.target_column}' in {split_name}: {values.min():.4g} to "
            f"{values.max():.4g}, mean {values.mean():.4g}"
        )
    return lines


def split(num_rows: int, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the training and validation splits, fixed by SPLIT_SEED."""
    train_idx, val_idx = train_test_split(
        np.arange(num_rows), test_size=val_fraction, random_state=SPLIT_SEED
    )
    return np.sort(train_idx), np.sort(val_idx)


def _diabetes() -> Table:
    # scaled=False: the measurements in their own units (age in years, BMI in kg/m^2...),
    # standardised below like a user's table, instead of sklearn's pre-scaled copy.
    diabetes = load_diabetes(scaled=False)
    values = np.column_stack([diabetes.data, diabetes.target])
    lines = np.arange(len(values)) + 1
    return Table((*diabetes.feature_names, "target"), values, lines, "the embedded data")


def _user_tables(cfg: TrainConfig) -> tuple[Table, Table, bytes]:
    """train.csv and val.csv of --data_dir, or train.csv split; checked for training."""
    folder = Path(cfg.data_dir)
    train_path, val_path = folder / "train.csv", folder / "val.csv"
    for path in (train_path, val_path):
        problem = not_a_file(path)
        if problem:
            raise ConfigError(f"--data_dir: '{path}' {problem}; {path.name} must be a CSV file")
    if not train_path.is_file():
        held = ", ".join(sorted(path.name for path in folder.iterdir())) or "nothing"
        raise ConfigError(f"--data_dir: '{folder}' holds no train.csv (it holds: {held})")
    table = read_csv(train_path, source="--data_dir: ")
    if cfg.target_column not in table.columns:
        raise ConfigError(
            f"--data_dir: '{train_path}' has no column '{cfg.target_column}' (its columns: "
            f"{', '.join(table.columns)}); name the target with --target_column"
        )
    if len(table.columns) < 2:
        raise ConfigError(f"--data_dir: '{train_path}' holds only the target column, no features")
    if not val_path.is_file():
        if len(table.values) < MIN_ROWS:
            raise ConfigError(
                f"--data_dir: '{train_path}' has {len(table.values)} data rows; at least "
                f"{MIN_ROWS} are needed to hold out a validation split (or add a val.csv)"
            )
        return _split(table, cfg.val_fraction)
    val = read_csv(val_path, source="--data_dir: ")
    if set(val.columns) != set(table.columns):
        raise ConfigError(
            f"--data_dir: '{val_path}' has columns {', '.join(val.columns)}; expected those of "
            f"train.csv: {', '.join(table.columns)}"
        )
    if len(table.values) < 2 or len(val.values) < 2:
        raise ConfigError(
            f"--data_dir: '{folder}': train.csv and val.csv need at least 2 data rows each"
        )
    # Columns are found by name, so val.csv may order them differently.
    val = Table(table.columns, val.features(table.columns), val.lines, val.source)
    return table, val, _table_bytes(table) + _table_bytes(val)


def _split(table: Table, val_fraction: float) -> tuple[Table, Table, bytes]:
    """The training and validation rows of one table, and what the data fingerprint hashes:
    the table and which rows went to which split."""
    train_idx, val_idx = split(len(table.values), val_fraction)
    data = _table_bytes(table) + train_idx.tobytes() + val_idx.tobytes()
    return table.rows(train_idx), table.rows(val_idx), data


def _table_bytes(table: Table) -> bytes:
    return "\n".join(table.columns).encode() + table.values.tobytes()


def _standardised(cfg: TrainConfig, train: Table, val: Table, data: bytes) -> Datasets:
    names = tuple(name for name in train.columns if name != cfg.target_column)
    features, target = train.features(names), train.column(cfg.target_column)
    # Overflow is refused by _check_standardised in a line naming the value, not warned about.
    with np.errstate(all="ignore"):
        # A constant feature keeps a std of 1: it becomes 0 after centring, never divides by 0.
        feature_std, target_std = features.std(axis=0), float(target.std())
        preprocess = Preprocess(
            feature_names=names,
            feature_mean=tuple(features.mean(axis=0).tolist()),
            feature_std=tuple(np.where(feature_std > 0, feature_std, 1.0).tolist()),
            target_column=cfg.target_column,
            target_mean=float(target.mean()),
            target_std=target_std,
        )
        train_data = TensorData(preprocess(features), preprocess.to_model_units(target))
        val_features, val_target = val.features(names), val.column(cfg.target_column)
        val_data = TensorData(preprocess(val_features), preprocess.to_model_units(val_target))
    if target_std == 0:
        source = (
            "the embedded data" if cfg.data_dir is None else f"'{Path(cfg.data_dir, 'train.csv')}'"
        )
        raise ConfigError(
            f"--target_column: '{cfg.target_column}' of {source} is constant in the training "
            "split; there is nothing to learn"
        )
    _check_standardised(preprocess, (train, train_data), (val, val_data))
    return Datasets(
        train=train_data,
        val=val_data,
        preprocess=preprocess,
        train_targets=train_data.targets,
        val_targets=val_data.targets,
        fingerprint=fingerprint(data, np.arange(len(train_data)), np.arange(len(val_data))),
    )


def _check_standardised(preprocess: Preprocess, *splits: tuple[Table, TensorData]) -> None:
    """A one-line ConfigError naming a value that standardisation cannot represent: one that
    makes its column's mean or standard deviation overflow float64 (the column is zeroed
    otherwise), or one too many standard deviations from the mean for float32."""
    names = (*preprocess.feature_names, preprocess.target_column)
    means = (*preprocess.feature_mean, preprocess.target_mean)
    stds = (*preprocess.feature_std, preprocess.target_std)
    train = splits[0][0]
    for name, mean, std in zip(names, means, stds, strict=True):
        if not (math.isfinite(mean) and math.isfinite(std)):
            values = train.column(name)
            row = int(np.argmax(np.abs(values)))
            raise ConfigError(
                f"--data_dir: {train.source}: column '{name}' holds {values[row]:g} on line "
                f"{train.lines[row]}, too large to standardise with the column's other values "
                "(its standard deviation overflows float64); rescale the column (other units "
                "or a logarithm) so that its values differ by less than about 1e150"
            )
    for table, data in splits:
        finite = torch.isfinite(torch.column_stack([data.inputs, data.targets]))
        if not finite.all():
            row, column = (int(index) for index in (~finite).nonzero()[0])
            value = table.column(names[column])[row]
            deviations = abs(value - means[column]) / stds[column]
            raise ConfigError(
                f"--data_dir: {table.source}: column '{names[column]}' holds {value:g} on line "
                f"{table.lines[row]}, {deviations:.3g} standard deviations from the training "
                "split's mean: standardised, it exceeds float32's range (3.4e38); rescale the "
                "column or drop the row"
            )


if __name__ == "__main__":  # the data command: see describe.py
    from .describe import main

    main()
