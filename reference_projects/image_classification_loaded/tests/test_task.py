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


def test_one_batch_can_be_overfit(short_run, tmp_path, cfg):
    fields = ["--overfit_batches", "1", "--batch_size", "32", "--dropout", "0"]
    fields += ["--width", str(cfg.width)]  # the default model, not the tests' narrow one
    fields += ["--epochs", "150", "--max_steps", "150", "--warmup_steps", "10"]
    # Evaluated and saved once, at the end: not after each epoch of one step.
    fields += ["--eval_every", "150", "--checkpoint_every", "150", "--log_every", "10"]
    summary = main(short_run(*fields))
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    losses = [record["loss"] for record in map(json.loads, lines) if "split" not in record]
    assert losses[-1] < 0.01
    assert summary["value"] == 1.0  # evaluated on that same batch
