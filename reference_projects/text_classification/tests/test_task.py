"""The task: loss, metrics and baseline on known values, a model that ignores padding and
can fit a batch."""

import json

import torch
from sklearn.metrics import f1_score

from text_classification import task
from text_classification.data import (
    PAD_ID,
    UNKNOWN_ID,
    Preprocess,
    build_datasets,
)
from text_classification.model import build_model
from text_classification.train import main


def test_metrics_count_every_sample_once():
    classes = ("a", "b", "c")
    metrics = task.Metrics(torch.device("cpu"), Preprocess(max_length=8, class_names=classes))
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    targets = torch.tensor([0, 0, 1, 2])
    metrics.update(logits[:2], targets[:2])
    metrics.update(logits[2:], targets[2:])
    result = metrics.compute()
    assert result["accuracy"] == 2 / 4
    # class 0: P 1/2, R 1/2 -> 0.5; class 1: 0; class 2: 1.0
    assert abs(result["macro_f1"] - 0.5) < 1e-9
    predicted = logits.argmax(dim=1)
    assert abs(result["macro_f1"] - f1_score(targets, predicted, average="macro")) < 1e-9
    assert metrics.confusion.tolist() == [[1, 1, 0], [1, 0, 0], [0, 0, 1]]
    expected_loss = torch.nn.functional.cross_entropy(logits, targets)
    assert abs(result["loss"] - expected_loss.item()) < 1e-6


def test_baseline_predicts_the_majority_class_of_the_training_split():
    train_targets = torch.tensor([1, 1, 1, 0, 0])
    assert task.baseline(train_targets, torch.tensor([1, 0, 1, 0])) == 0.5


def test_padding_does_not_change_the_logits(cfg):
    model = build_model(cfg, build_datasets(cfg).preprocess).eval()
    text = torch.tensor([[5, 9, 14, 3]])
    padded = torch.cat([text, torch.full((1, 7), PAD_ID)], dim=1)
    longer = torch.full((1, 11), 4)  # a text that fills the batch
    with torch.inference_mode():
        alone, in_batch = model(text), model(torch.cat([padded, longer]))
    torch.testing.assert_close(in_batch[:1], alone, atol=1e-5, rtol=1e-4)


def test_word_dropout_reads_training_words_as_unknown_and_leaves_evaluation_alone(cfg):
    model = build_model(cfg, build_datasets(cfg).preprocess)
    read = []
    model.embedding.register_forward_hook(lambda _, inputs, __: read.append(inputs[0]))
    tokens = torch.randint(2, 50, (64, 32))
    tokens[:, 24:] = PAD_ID
    torch.manual_seed(0)
    model.train()(tokens)
    unknown = read[-1] == UNKNOWN_ID
    assert not unknown[:, 24:].any()  # padding stays padding
    assert abs(unknown[:, :24].float().mean().item() - cfg.word_dropout) < 0.02
    assert torch.equal(read[-1][~unknown], tokens[~unknown])
    model.eval()(tokens)
    assert torch.equal(read[-1], tokens)


def test_one_batch_can_be_overfit(short_run, tmp_path):
    fields = ["--overfit_batches", "1", "--batch_size", "32", "--dropout", "0"]
    fields += ["--word_dropout", "0"]
    fields += ["--epochs", "100", "--max_steps", "100", "--warmup_steps", "10"]
    # Evaluated and saved once, at the end: not after each epoch of one step.
    fields += ["--eval_every", "100", "--checkpoint_every", "100", "--log_every", "10"]
    summary = main(short_run(*fields))
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    losses = [record["loss"] for record in map(json.loads, lines) if "split" not in record]
    assert losses[-1] < 0.01
    assert summary["value"] == 1.0  # evaluated on that same batch
