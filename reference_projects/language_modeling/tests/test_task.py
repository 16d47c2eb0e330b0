"""The task: loss, bits per character and baseline on known values, and a model that can
fit a batch."""

import json
import math

import pytest
import torch

from language_modeling import task
from language_modeling.data import (
    IGNORE,
    Preprocess,
)
from language_modeling.train import main

E_ACUTE = list("é".encode())  # one character, two bytes: 0xc3 0xa9


def test_loss_is_the_mean_over_every_position():
    logits = torch.randn(2, 3, 256, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([[1, 2, 3], [4, 5, 6]])
    by_position = [
        torch.nn.functional.cross_entropy(logits[b, t][None], targets[b, t][None])
        for b in range(2)
        for t in range(3)
    ]
    assert task.compute_loss(logits, targets).item() == pytest.approx(
        torch.stack(by_position).mean().item(), rel=1e-6
    )


def test_metrics_count_bytes_and_characters_once_and_skip_padding():
    metrics = task.Metrics(torch.device("cpu"), Preprocess(context=8))
    uniform = torch.zeros(1, 4, 256)  # every byte 1/256 likely: 8 bits per byte
    metrics.update(uniform, torch.tensor([[104, *E_ACUTE, IGNORE]]))  # "hé" and padding
    metrics.update(uniform[:, :2], torch.tensor([[33, 10]]))  # "!\n"
    result = metrics.compute()
    assert result["bits_per_byte"] == pytest.approx(8.0)
    assert result["bits_per_char"] == pytest.approx(8.0 * 5 / 4)  # 5 bytes, 4 characters
    assert result["loss"] == pytest.approx(math.log(256))


def test_baseline_is_the_unigram_model_of_the_training_bytes_smoothed():
    train = torch.tensor([65, 65, 66])  # counts + 1: A 3, B 2, each of 254 other bytes 1
    evaluated = torch.tensor([65, *E_ACUTE, IGNORE])  # "Aé": 3 bytes, 2 characters
    bits = -math.log2(3 / 259) - 2 * math.log2(1 / 259)
    assert task.baseline(train, evaluated) == pytest.approx(bits / 2)


def test_one_batch_can_be_overfit(short_run, tmp_path):
    fields = ["--overfit_batches", "1", "--batch_size", "8", "--context", "32"]
    fields += ["--epochs", "150", "--max_steps", "150", "--warmup_steps", "10"]
    fields += ["--lr", "3e-3", "--dropout", "0"]
    # Evaluated and saved once, at the end: not after each epoch of one step.
    fields += ["--eval_every", "150", "--checkpoint_every", "150", "--log_every", "10"]
    summary = main(short_run(*fields))
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    losses = [record["loss"] for record in map(json.loads, lines) if "split" not in record]
    assert losses[-1] < 0.05
    assert summary["value"] < 0.1  # bits per character, on that same batch
