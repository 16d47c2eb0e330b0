"""The references a trained model must beat, scored on the same validation split.

    python -m tabular_regression.reference [--field value ...]
    python -m tabular_regression.reference outputs/run/model

Prints R^2 and RMSE (in the target's own units) of predicting the training mean (the
baseline in summary.json) and of scikit-learn's LinearRegression fitted on the same training
split, for the data the fields select; given a model/ folder, for the data it was trained on,
and of that model too. On a few hundred rows linear regression is hard to beat:
a network that loses to it has learned nothing worth its complexity.
"""

import math
import sys
from pathlib import Path

import torch
from sklearn.linear_model import LinearRegression

from .config import ConfigError, TrainConfig, load_config
from .data import build_datasets
from .loaders import Datasets
from .model_folder import ModelFolderError, check_model_folder, load_trained, read_config


def linear_regression_r2(cfg: TrainConfig) -> float:
    """Validation R^2 of ordinary least squares fitted on the training split of `cfg`'s data."""
    return linear_regression(build_datasets(cfg))["r2"]


def linear_regression(datasets: Datasets) -> dict[str, float]:
    train, val = datasets.train, datasets.val
    fit = LinearRegression().fit(train.inputs.double().numpy(), train.targets.double().numpy())
    predictions = torch.from_numpy(fit.predict(val.inputs.double().numpy()))
    return score(predictions, datasets)


def mean_predictor(datasets: Datasets) -> dict[str, float]:
    return score(torch.full_like(datasets.val_targets, datasets.train_targets.mean()), datasets)


def trained_model(model_dir: Path, datasets: Datasets) -> dict[str, float]:
    model, _ = load_trained(model_dir)
    with torch.inference_mode():
        return score(model(datasets.val.inputs), datasets)


def score(predictions: torch.Tensor, datasets: Datasets) -> dict[str, float]:
    """R^2 and RMSE in the target's units of standardised predictions on the validation split."""
    errors = predictions.double() - datasets.val.targets.double()
    targets = datasets.val.targets.double()
    total = (targets - targets.mean()).square().sum().item()
    mse = errors.square().mean().item()
    return {
        "r2": 1.0 - errors.square().sum().item() / total,
        "rmse": math.sqrt(mse) * datasets.preprocess.target_std,
    }


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    args = list(sys.argv[1:] if argv is None else argv)
    model_dir = Path(args.pop(0)) if args and not args[0].startswith("-") else None
    try:
        if model_dir is not None:
            if args:
                raise ConfigError("with MODEL_DIR, the data comes from its config.yaml alone")
            check_model_folder(model_dir)
            cfg = read_config(model_dir)
        else:
            cfg = load_config(args, command="reference")
        datasets = build_datasets(cfg)
    except (ConfigError, ModelFolderError, OSError) as error:
        raise SystemExit(f"error: {error}") from None
    results = {
        "mean predictor": mean_predictor(datasets),
        "linear regression": linear_regression(datasets),
    }
    if model_dir is not None:
        try:
            results[f"model {model_dir}"] = trained_model(model_dir, datasets)
        except ModelFolderError as error:
            raise SystemExit(f"error: {error}") from None
    data = "the embedded diabetes data" if cfg.data_dir is None else f"'{cfg.data_dir}'"
    rows = f"{len(datasets.val)} rows, {len(datasets.train)} for training"
    print(f"validation rows of {data}: {rows}")
    width = max(map(len, results))
    print(f"{'':<{width}}  {'R^2':>8}  {'RMSE':>10}")
    for name, result in results.items():
        print(f"{name:<{width}}  {result['r2']:>8.4f}  {result['rmse']:>10.4g}")
    return results


if __name__ == "__main__":
    main()
