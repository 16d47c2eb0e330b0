"""Predict the target for every row of a CSV file with a trained model.

    python -m tabular_regression.predict outputs/run/model rows.csv

Prints one prediction per data row, in the target's own units. The file needs a header
and every feature column the model was trained on, in any order; the target column may
be there or not (it is ignored). Loads model/ as training wrote it: the weights, the config
that shaped the network, and the standardisation fitted on the training split.
"""

import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .config import ConfigError
from .data import Preprocess, read_csv
from .model_folder import ModelFolderError, load_trained
from .utils.cli import Parser


@torch.inference_mode()
def predict(model: nn.Module, preprocess: Preprocess, features: np.ndarray) -> np.ndarray:
    """Raw feature rows (N, F), columns in `preprocess.feature_names` order -> (N,) float64
    predictions in the target's own units."""
    return preprocess.to_target_units(model(preprocess(features)))


def read_features(path: str | Path, preprocess: Preprocess) -> np.ndarray:
    """The feature columns of a CSV file, in training order; a one-line ConfigError if the
    file is unreadable, lacks a feature or has a column training never saw."""
    table = read_csv(Path(path))
    known = {*preprocess.feature_names, preprocess.target_column}
    missing = [name for name in preprocess.feature_names if name not in table.columns]
    unknown = [name for name in table.columns if name not in known]
    problems = []
    if missing:
        problems.append(f"lacks the feature column(s) {', '.join(missing)}")
    if unknown:
        problems.append(f"has column(s) the model was not trained on: {', '.join(unknown)}")
    if not len(table.values):
        problems.append("holds no data rows")
    if problems:
        raise ConfigError(f"'{path}' {'; '.join(problems)}")
    return table.features(preprocess.feature_names)


def main(argv: list[str] | None = None) -> None:
    parser = Parser("predict", "Predict the target for every row of a CSV file.")
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="a training run's model/ folder")
    parser.add_argument("path", metavar="FILE.csv", help="rows with the training features")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        model, preprocess = load_trained(args.model_dir)
        features = read_features(args.path, preprocess)
    except (ModelFolderError, ConfigError) as error:
        raise SystemExit(f"error: {error}") from None
    for value in predict(model, preprocess, features):
        print(f"{value:.6g}")


if __name__ == "__main__":
    main()
