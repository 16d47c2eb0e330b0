"""The task: loss, metrics and baseline on known values, a model that can fit a batch, and
the default model against linear regression on the same split."""

import json

import pytest
import torch

from tabular_regression import task
from tabular_regression.data import Preprocess
from tabular_regression.reference import linear_regression_r2
from tabular_regression.reference import main as reference
from tabular_regression.train import main


def test_metrics_count_every_sample_once():
    preprocess = Preprocess(("x",), (0.0,), (1.0,), "y", target_mean=0.0, target_std=2.0)
    metrics = task.Metrics(torch.device("cpu"), preprocess)
    predictions = torch.tensor([1.0, 2.0, 3.0, 4.0])
    targets = torch.tensor([1.0, 2.0, 2.0, 5.0])  # mean 2.5: SST = 9; SSE = 0 + 0 + 1 + 1
    metrics.update(predictions[:3], targets[:3])
    metrics.update(predictions[3:], targets[3:])
    result = metrics.compute()
    assert result["r2"] == pytest.approx(1 - 2 / 9)
    assert result["loss"] == pytest.approx(task.compute_loss(predictions, targets).item())
    assert result["loss"] == pytest.approx(0.5)
    assert result["rmse"] == pytest.approx(0.5**0.5 * 2.0)  # in the target's own units


def test_baseline_predicts_the_mean_of_the_training_split():
    train_targets = torch.tensor([1.0, 3.0])  # mean 2
    assert task.baseline(train_targets, torch.tensor([1.0, 2.0, 3.0])) == pytest.approx(0.0)
    assert task.baseline(train_targets, torch.tensor([2.0, 4.0])) == pytest.approx(-1.0)


def test_one_batch_can_be_overfit(short_run, tmp_path):
    fields = ["--overfit_batches", "1", "--dropout", "0", "--weight_decay", "0"]
    fields += ["--epochs", "300", "--max_steps", "300", "--warmup_steps", "10"]
    # Evaluated and saved once, at the end: not after each epoch of one step.
    fields += ["--eval_every", "300", "--checkpoint_every", "300", "--log_every", "10"]
    summary = main(short_run(*fields))
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    losses = [record["loss"] for record in map(json.loads, lines) if "split" not in record]
    assert losses[-1] < 0.01
    assert summary["value"] > 0.99  # evaluated on that same batch


def test_default_model_beats_linear_regression_on_the_same_split(tmp_path, cfg):
    """The default run (its R^2 about 0.35) against scikit-learn's LinearRegression fitted on
    the same training rows (about 0.33), both scored on the same validation rows."""
    summary = main(["--output_dir", str(tmp_path), "--log_every", "50"])
    reference = linear_regression_r2(cfg)
    assert reference > summary["baseline_value"] + 0.3  # the reference has learned something
    assert summary["value"] > reference


def test_reference_scores_the_baseline_linear_regression_and_a_model(
    tmp_path, cfg, capsys, short_run
):
    summary = main(short_run())
    model_dir = tmp_path / "run" / "model"
    results = reference([str(model_dir)])
    assert results["mean predictor"]["r2"] == pytest.approx(summary["baseline_value"])
    assert results[f"model {model_dir}"]["r2"] == pytest.approx(summary["value"])
    assert results["linear regression"]["r2"] == pytest.approx(linear_regression_r2(cfg))
    assert 55 < results["linear regression"]["rmse"] < 65  # in the target's units (std 77)
    assert "linear regression" in capsys.readouterr().out
