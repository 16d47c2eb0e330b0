"""Inference from model/: predictions on a CSV file agree with evaluation."""

import numpy as np
import pytest
from calls import refusal
from sklearn.datasets import load_diabetes

from tabular_regression.config import FAST_DEV_RUN_DIR
from tabular_regression.data import split
from tabular_regression.predict import (
    load_trained,
    main,
    predict,
    read_features,
)
from tabular_regression.train import main as train

FEATURES = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]  # diabetes, in order


def validation_rows(path, columns=None):
    """The embedded validation rows, raw, as a CSV file with the given columns (all by
    default: the features, then the target)."""
    diabetes = load_diabetes(scaled=False)
    _, val_idx = split(len(diabetes.target), val_fraction=0.2)
    names = [*diabetes.feature_names, "target"]
    table = np.column_stack([diabetes.data, diabetes.target])[val_idx]
    keep = [names.index(name) for name in (columns or names)]
    header = ",".join(names[i] for i in keep)
    np.savetxt(path, table[:, keep], fmt="%.17g", delimiter=",", header=header, comments="")
    return diabetes.target[val_idx]


def test_predictions_from_a_csv_file_reproduce_the_evaluation(tmp_path, capsys, short_run):
    summary = train(short_run())
    model_dir = tmp_path / "run" / "model"
    targets = validation_rows(tmp_path / "rows.csv")

    model, preprocess = load_trained(model_dir)
    predictions = predict(model, preprocess, read_features(tmp_path / "rows.csv", preprocess))
    r2 = 1 - ((predictions - targets) ** 2).sum() / ((targets - targets.mean()) ** 2).sum()
    assert r2 == pytest.approx(summary["value"], abs=1e-6)

    main([str(model_dir), str(tmp_path / "rows.csv")])
    assert capsys.readouterr().out.split() == [f"{value:.6g}" for value in predictions]


def test_the_target_column_is_optional_and_columns_may_come_in_any_order(
    tmp_path, capsys, fast_dev_run
):
    train(["--output_dir", str(tmp_path), *fast_dev_run])
    model_dir = tmp_path / FAST_DEV_RUN_DIR / "model"
    validation_rows(tmp_path / "all.csv")
    validation_rows(tmp_path / "shuffled.csv", FEATURES[::-1])  # and no target column
    main([str(model_dir), str(tmp_path / "all.csv")])
    expected = capsys.readouterr().out
    main([str(model_dir), str(tmp_path / "shuffled.csv")])
    assert capsys.readouterr().out == expected


@pytest.mark.parametrize(
    ("columns", "problem"),
    [
        (["age", "sex", "bmi"], "lacks the feature column(s) bp, s1"),
        ([*FEATURES, "id"], "has column(s) the model was not trained on: id"),
    ],
    ids=["missing-feature", "unknown-column"],
)
def test_a_file_that_does_not_fit_the_model_is_a_one_line_error(
    tmp_path, columns, problem, fast_dev_run
):
    train(["--output_dir", str(tmp_path), *fast_dev_run])
    model_dir = tmp_path / FAST_DEV_RUN_DIR / "model"
    path = tmp_path / "rows.csv"
    values = np.ones((3, len(columns)))
    np.savetxt(path, values, fmt="%g", delimiter=",", header=",".join(columns), comments="")
    message = refusal(main, [str(model_dir), str(path)])
    assert f"'{path}'" in message and problem in message
