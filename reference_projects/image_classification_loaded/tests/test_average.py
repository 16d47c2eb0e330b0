"""The weights' moving average (ema_decay): the formula, step by step; what a run evaluates,
saves and exports with it; and nothing at all without it."""

import json

import torch
from run_logs import checkpoint_state, weights
from torch import nn

from image_classification_loaded import train as train_module
from image_classification_loaded.average import (
    NoAverage,
    weight_average,
)
from image_classification_loaded.checkpoint import inference_weights
from image_classification_loaded.resume import find_resume_checkpoint
from image_classification_loaded.train import main


def next_average(average, weights, decay):
    """The weights at the first step, then decay * average + (1 - decay) * weights, for
    BatchNorm's running statistics too; its integer step count keeps the first copy."""
    if average is None:
        return weights
    result = dict(average)
    for name, value in weights.items():
        if value.is_floating_point():
            result[name] = decay * average[name] + (1 - decay) * value
    return result


def test_the_average_follows_each_step_by_the_formula():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    average = weight_average(model, 0.9)
    expected = None
    for _ in range(5):
        model(torch.randn(8, 3)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        average.update()
        now = {name: value.detach().clone() for name, value in model.state_dict().items()}
        expected = next_average(expected, now, decay=0.9)
    for name, value in average.module.state_dict().items():
        torch.testing.assert_close(value, expected[name], rtol=1e-6, atol=1e-7, msg=name)


def test_without_a_decay_nothing_is_averaged():
    model = nn.Linear(2, 2)
    average = weight_average(model, 0.0)
    assert isinstance(average, NoAverage) and average.module is model
    assert average.state_dict() == {}


def test_a_run_saves_and_exports_the_average(short_run, tmp_path):
    main(short_run("--ema_decay", "0.5"))
    run = tmp_path / "run"
    path, _ = find_resume_checkpoint(run / "checkpoints")
    checkpoint = checkpoint_state(path)
    averaged, trained = inference_weights(checkpoint), checkpoint["model"]
    assert averaged.keys() == trained.keys() == weights(run).keys()
    assert all(torch.equal(weights(run)[name], value) for name, value in averaged.items())
    assert any(not torch.equal(trained[name], value) for name, value in averaged.items())


def test_a_run_without_a_decay_saves_the_trained_weights(checkpointed_run):
    path, _ = find_resume_checkpoint(checkpointed_run / "checkpoints")
    checkpoint = checkpoint_state(path)
    assert checkpoint["average"] == {}
    assert inference_weights(checkpoint) is checkpoint["model"]


def test_a_run_evaluates_the_average_so_best_and_early_stopping_follow_it(
    short_run, tmp_path, monkeypatch
):
    """Validation metrics, and so the best checkpoint and early stopping, are of the weights
    the run saves: the average, not the weights being trained."""
    evaluated = []
    evaluate = train_module.evaluate

    def spy(model, *args):
        evaluated.append({name: value.clone() for name, value in model.state_dict().items()})
        return evaluate(model, *args)

    monkeypatch.setattr(train_module, "evaluate", spy)
    main(short_run("--ema_decay", "0.5"))  # evaluated and checkpointed at steps 3 and 6
    run = tmp_path / "run"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [record["step"] for record in records if "split" in record] == [3, 6]
    for step, weights_evaluated in zip((3, 6), evaluated, strict=True):
        checkpoint = checkpoint_state(run / "checkpoints" / f"step-{step:06d}.pt")
        averaged, trained = inference_weights(checkpoint), checkpoint["model"]
        assert all(torch.equal(weights_evaluated[k], v) for k, v in averaged.items()), step
        assert any(not torch.equal(weights_evaluated[k], v) for k, v in trained.items()), step
