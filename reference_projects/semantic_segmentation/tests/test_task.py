"""The task: loss, metrics and baseline on known values, and a model that can fit a batch."""

import json

import pytest
import torch
from torch.nn import functional as F

from semantic_segmentation import task
from semantic_segmentation.data import Preprocess
from semantic_segmentation.train import main


def logits_for(predictions: list[list[int]], num_classes: int) -> torch.Tensor:
    """(1, K, H, W) logits whose argmax is `predictions` (H, W)."""
    return F.one_hot(torch.tensor([predictions]), num_classes).permute(0, 3, 1, 2).float() * 4


def metrics_for(num_classes: int) -> task.Metrics:
    names = tuple(str(k) for k in range(num_classes))
    return task.Metrics(torch.device("cpu"), Preprocess(2, 1, class_names=names))


def test_mean_iou_from_pixel_counts_over_every_batch():
    # Class 0: TP 1, FP 0, FN 1 -> 1/2. Class 1: TP 2, FP 1, FN 0 -> 2/3. Class 2 appears in
    # neither predictions nor targets: excluded from the mean, not counted as 0 or 1.
    metrics = metrics_for(3)
    metrics.update(logits_for([[0, 1]], 3), torch.tensor([[[0, 0]]]))
    metrics.update(logits_for([[1, 1]], 3), torch.tensor([[[1, 1]]]))
    result = metrics.compute()
    assert result["mean_iou"] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert result["pixel_accuracy"] == 3 / 4
    logits = torch.cat([logits_for([[0, 1]], 3), logits_for([[1, 1]], 3)])
    expected = F.cross_entropy(logits, torch.tensor([[[0, 0]], [[1, 1]]]))
    assert result["loss"] == pytest.approx(expected.item())


def test_the_loss_over_pixel_rows_is_cross_entropy_over_the_image_shaped_logits():
    """compute_loss, with the kernel --deterministic true allows on CUDA, gives the loss
    and the gradient of cross-entropy on (B, K, H, W) logits: float32 sums in another order."""
    torch.manual_seed(0)
    logits = torch.randn(3, 4, 5, 6, requires_grad=True)
    targets = torch.randint(0, 4, (3, 5, 6))
    loss = task.compute_loss(logits, targets)
    (gradient,) = torch.autograd.grad(loss, logits)
    expected = F.cross_entropy(logits, targets)
    (expected_gradient,) = torch.autograd.grad(expected, logits)
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=0)
    torch.testing.assert_close(gradient, expected_gradient, rtol=1e-6, atol=1e-9)
    assert task.pixel_rows(logits)[5 * 6 + 6 + 2].tolist() == logits[1, :, 1, 2].tolist()


def test_a_class_never_predicted_scores_zero():
    metrics = metrics_for(2)
    metrics.update(logits_for([[0, 0, 0, 0]], 2), torch.tensor([[[0, 0, 0, 1]]]))
    assert metrics.compute()["mean_iou"] == pytest.approx((3 / 4 + 0) / 2)


def test_metric_state_is_tensors_of_sums_that_add_across_processes():
    torch.manual_seed(0)
    logits, targets = torch.randn(4, 3, 5, 5), torch.randint(0, 3, (4, 5, 5))
    whole, first, second = (metrics_for(3) for _ in range(3))
    whole.update(logits, targets)
    first.update(logits[:1], targets[:1])
    second.update(logits[1:], targets[1:])
    for name, value in vars(first).items():  # what an all-reduce by sum does
        assert isinstance(value, torch.Tensor), name
        setattr(first, name, value + getattr(second, name))
    assert first.compute() == pytest.approx(whole.compute())


def test_baseline_predicts_the_most_frequent_training_class_everywhere():
    train_targets = torch.tensor([[[0, 0, 0, 2]]])
    val_targets = torch.tensor([[[0, 0, 0, 1], [0, 1, 2, 0]]])  # 5 of 8 pixels background
    # Background: TP 5, FP 3 -> 5/8; classes 1 and 2 are never predicted: IoU 0.
    assert task.baseline(train_targets, val_targets) == pytest.approx(5 / 8 / 3)


def test_one_batch_can_be_overfit(short_run, tmp_path):
    # Native 32x32 images: a 16x16 resize blends edge pixels that no model can fit exactly.
    fields = ["--overfit_batches", "1", "--batch_size", "4", "--num_images", "40"]
    fields += ["--max_steps", "120", "--epochs", "120", "--lr", "1e-2"]
    fields += ["--warmup_steps", "10", "--dropout", "0", "--log_every", "10"]
    summary = main(short_run(*fields, "--eval_every", "120", "--checkpoint_every", "120"))
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    losses = [record["loss"] for record in map(json.loads, lines) if "split" not in record]
    assert losses[-1] < 0.1
    # Evaluated on that same batch with BatchNorm in eval mode; the baseline is about 0.19.
    assert summary["value"] > 0.7
