"""Data: the embedded diabetes table, your own CSV files, one preprocessing for both."""

import json

import numpy as np
import pytest
import torch
from calls import refusal
from sklearn.datasets import load_diabetes

from tabular_regression.config import (
    ConfigError,
    load_config,
)
from tabular_regression.data import (
    Preprocess,
    build_datasets,
    split,
)
from tabular_regression.describe import main as data_command
from tabular_regression.train import main
from tabular_regression.tune import main as tune


def test_diabetes_split_is_fixed(cfg):
    first, again = build_datasets(cfg), build_datasets(load_config(["--seed", "7"]))
    assert first.fingerprint == again.fingerprint  # the split does not move with --seed
    assert (len(first.train), len(first.val)) == (353, 89)
    assert first.preprocess.feature_names == tuple(load_diabetes().feature_names)
    assert first.preprocess.target_column == "target"


def test_standardisation_uses_the_training_split_only(cfg):
    data = build_datasets(cfg)
    diabetes = load_diabetes(scaled=False)
    train_idx, _ = split(len(diabetes.target), cfg.val_fraction)
    expected_mean = diabetes.data[train_idx].mean(axis=0)
    np.testing.assert_allclose(data.preprocess.feature_mean, expected_mean, rtol=1e-12)
    assert data.preprocess.target_mean == pytest.approx(diabetes.target[train_idx].mean())
    for tensor in (data.train.inputs, data.train.targets):
        assert torch.allclose(tensor.mean(dim=0), torch.zeros(()), atol=1e-5)
        assert torch.allclose(tensor.std(dim=0, correction=0), torch.ones(()), atol=1e-5)
    assert data.val.inputs.mean(dim=0).abs().max() > 1e-3  # validation rows are not refitted


def test_targets_go_back_to_their_own_units(cfg):
    preprocess = build_datasets(cfg).preprocess
    target = load_diabetes().target[:5]
    restored = preprocess.to_target_units(preprocess.to_model_units(target))
    np.testing.assert_allclose(restored, target, rtol=1e-6)


def test_an_empty_data_dir_argument_means_the_embedded_table():
    assert load_config(["--data_dir", "none"]).data_dir is None


def test_preprocess_round_trips_through_json(tmp_path, cfg):
    preprocess = build_datasets(cfg).preprocess
    preprocess.save(tmp_path / "preprocess.json")
    assert Preprocess.load(tmp_path / "preprocess.json") == preprocess


def test_csv_file_uses_the_same_preprocessing(tmp_path, make_table):
    path = make_table(tmp_path / "train.csv")
    cfg = load_config(["--data_dir", str(tmp_path), "--target_column", "a"])  # any column
    data = build_datasets(cfg)
    assert data.preprocess.feature_names == ("b", "c", "y")
    rows = np.loadtxt(path, delimiter=",", skiprows=1)
    train_idx, val_idx = split(len(rows), cfg.val_fraction)
    assert torch.equal(data.val.inputs, data.preprocess(rows[val_idx][:, 1:]))
    assert torch.equal(data.train.targets, data.preprocess.to_model_units(rows[train_idx, 0]))


def test_val_csv_holds_the_validation_rows_in_any_column_order(tmp_path, make_table):
    train = np.loadtxt(make_table(tmp_path / "train.csv", rows=40), delimiter=",", skiprows=1)
    val = np.loadtxt(make_table(tmp_path / "other.csv", rows=12, seed=1), delimiter=",", skiprows=1)
    columns = [3, 0, 2, 1]  # y, a, c, b
    np.savetxt(tmp_path / "val.csv", val[:, columns], delimiter=",", header="y,a,c,b", comments="")
    data = build_datasets(load_config(["--data_dir", str(tmp_path), "--target_column", "y"]))
    assert (len(data.train), len(data.val)) == (40, 12)
    np.testing.assert_allclose(data.preprocess.feature_mean, train[:, :3].mean(axis=0))
    assert torch.equal(data.val.inputs, data.preprocess(val[:, :3]))
    assert torch.equal(data.val.targets, data.preprocess.to_model_units(val[:, 3]))


def test_val_csv_with_other_columns_is_refused(tmp_path, make_table):
    make_table(tmp_path / "train.csv")
    (tmp_path / "val.csv").write_text("a,b,y\n1,2,3\n4,5,6\n")
    with pytest.raises(ConfigError, match=r"val.csv' has columns a, b, y; expected .*a, b, c, y"):
        build_datasets(load_config(["--data_dir", str(tmp_path), "--target_column", "y"]))


def test_training_on_a_csv_file(tmp_path, make_table, fast_dev_run):
    make_table(tmp_path / "train.csv")
    args = ["--data_dir", str(tmp_path), "--target_column", "y", "--batch_size", "16"]
    summary = main(["--output_dir", str(tmp_path / "run"), *args, *fast_dev_run])
    assert summary["steps"] == 4 and summary["metric"] == "r2"


HEADER = "a,b,y\n"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("", "is empty; expected a header row"),
        (HEADER, "has 0 data rows; at least 10"),
        (HEADER + "1,2,3\n" * 5, "has 5 data rows; at least 10"),
        ("a,b,price\n" + "1,2,3\n" * 12, "has no column 'y' (its columns: a, b, price)"),
        ("y\n" + "1\n" * 12, "holds only the target column"),
        ("a,a,y\n" + "1,2,3\n" * 12, "names column 'a' twice"),
        (HEADER + "1,2,3\n" * 6 + "1,male,3\n", "column 'b' holds 'male' on line 8"),
        (HEADER + "1,2,3\n" * 6 + "1,,3\n", "column 'b' holds an empty cell on line 8"),
        (HEADER + "nan,2,3\n" * 12, "column 'a' holds 'nan' on line 2"),
        (HEADER + "1,2,3\n" * 6 + "1,2\n", "line 8 has 2 fields, the header has 3"),
        (HEADER + "1,2,3\n" * 12, "is constant in the training split"),
    ],
    ids=[
        "empty",
        "header-only",
        "too-few-rows",
        "no-target",
        "no-features",
        "duplicate-column",
        "non-numeric",
        "missing-value",
        "not-finite",
        "ragged",
        "constant-target",
    ],
)
def test_unusable_csv_file_is_a_one_line_error_naming_it(tmp_path, content, problem):
    path = tmp_path / "data" / "train.csv"
    path.parent.mkdir()
    path.write_text(content)
    args = ["--data_dir", str(path.parent), "--target_column", "y"]
    message = refusal(main, ["--output_dir", str(tmp_path / "run"), *args])
    assert message.startswith("error: --")
    assert f"'{path}'" in message
    assert problem in message


def test_a_missing_data_dir_or_train_csv_is_refused_before_training(tmp_path):
    with pytest.raises(ConfigError, match="--data_dir: '.*missing' is not a directory"):
        load_config(["--data_dir", str(tmp_path / "missing")])
    (tmp_path / "table.csv").write_text("a,y\n1,2\n")
    with pytest.raises(ConfigError, match=r"holds no train.csv \(it holds: table.csv\)"):
        build_datasets(load_config(["--data_dir", str(tmp_path)]))


@pytest.mark.parametrize("name", ["train.csv", "val.csv"])
@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda path: path.mkdir(), "is a folder, not a file"),
        (lambda path: path.symlink_to(path.name), "is a symbolic link that leads to no file"),
    ],
    ids=["folder", "symlink-loop"],
)
def test_a_csv_file_that_is_not_a_file_is_refused_saying_what_it_is(
    tmp_path, make_table, name, make, problem
):
    """A train.csv that was a folder or a symbolic link to itself was refused with "holds no
    train.csv (it holds: train.csv)"; such a val.csv was passed over for val_fraction."""
    if name == "val.csv":
        make_table(tmp_path / "train.csv")
    make(tmp_path / name)
    args = ["--data_dir", str(tmp_path), "--target_column", "y", "--output_dir", str(tmp_path)]
    for command in (data_command, main):
        message = refusal(command, args)
        assert message.startswith(f"error: --data_dir: '{tmp_path / name}' {problem}")
        assert message.endswith(f"; {name} must be a CSV file")


def test_tune_sweeps_batch_size_only_on_in_memory_tables():
    results = tune(["--workers", "0,2", "--batch_sizes", "16", "--steps", "2"])
    assert [row["num_workers"] for row in results] == [0]


def _rows(count: int, replace: dict[int, str]) -> str:
    """A table a, b, y of `count` varied rows, row i on line i + 2; `replace` swaps rows."""
    rows = [f"{i},{i % 3},{i * i % 7}" for i in range(count)]
    return "a,b,y\n" + "\n".join(replace.get(i, row) for i, row in enumerate(rows)) + "\n"


@pytest.mark.parametrize(
    ("train", "val", "problem"),
    [
        (_rows(30, {4: "1e308,1,2"}), None, "column 'a' holds 1e+308 on line 6,"),
        (_rows(30, {7: "3,1,-1e200"}), None, "column 'y' holds -1e+200 on line 9,"),
        (_rows(30, {}), _rows(4, {2: "1,1e60,1"}), "column 'b' holds 1e+60 on line 4,"),
    ],
    ids=["feature-overflows-float64", "target-overflows-float64", "val-overflows-float32"],
)
def test_values_too_far_apart_to_standardise_are_refused(tmp_path, train, val, problem):
    """A value of 1e308 once passed with a NumPy warning: its column's standard deviation
    overflowed to inf, the column became zeros, and preprocess.json held Infinity."""
    (tmp_path / "train.csv").write_text(train)
    if val is not None:
        (tmp_path / "val.csv").write_text(val)
    source = "val.csv" if val is not None else "train.csv"
    args = ["--data_dir", str(tmp_path), "--target_column", "y"]
    for command in (main, data_command):
        message = refusal(command, ["--output_dir", str(tmp_path / "run"), *args])
        assert message.startswith(f"error: --data_dir: '{tmp_path / source}': {problem}")
        assert "rescale the column" in message
    assert not (tmp_path / "run").exists()  # refused before the run writes anything


def test_preprocess_json_never_holds_infinity_or_nan(tmp_path, cfg):
    preprocess = build_datasets(cfg).preprocess
    saved = tmp_path / "preprocess.json"
    preprocess.save(saved)
    json.loads(saved.read_text(), parse_constant=pytest.fail)  # strict JSON
    broken = Preprocess(**{**preprocess.__dict__, "target_std": float("inf")})
    with pytest.raises(ValueError, match="not JSON compliant"):
        broken.save(tmp_path / "broken.json")
