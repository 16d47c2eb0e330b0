"""The task: loss, metrics and baseline on known values, and a model that can fit a batch."""

import json

import torch

from image_classification_loaded import task
from image_classification_loaded.data import Preprocess
from image_classification_loaded.train import main


def test_metrics_count_every_sample_once():
    metrics = task.Metrics(torch.device("cpu"), Preprocess(8, 1, class_names=("0", "1")))
    logits = torch.tensor([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0]])
    metrics.update(logits[:2], torch.tensor([0, 0]))
    metrics.update(logits[2:], torch.tensor([0]))
    result = metrics.compute()
    assert result["accuracy"] == 2 / 3
    expected_loss = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 0, 0]))
    assert abs(result["loss"] - expected_loss.item()) < 1e-6


def test_baseline_predicts_the_majority_class_of_the_training_split():
    train_targets = torch.tensor([2, 2, 2, 1, 0])
    assert task.baseline(train_targets, torch.tensor([2, 1, 2, 0])) == 0.5


def test_one_batch_can_be_overfit(tmp_path):
    summary = main(
        [
            "--output_dir",
            str(tmp_path),
            "--overfit_batches",
            "1",
            "--batch_size",
            "32",
            "--epochs",
            "150",
            "--warmup_steps",
            "10",
            "--dropout",
            "0",
            "--log_every",
            "10",
            "--compile",
            "false",  # the model's capacity is under test here, not the compiler
        ]
    )
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    losses = [record["loss"] for record in map(json.loads, lines) if "split" not in record]
    assert losses[-1] < 0.01
    assert summary["value"] == 1.0  # evaluated on that same batch
