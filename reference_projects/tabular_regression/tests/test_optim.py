"""The optimizer step: which parameters decay, the learning-rate schedule, and what one
TrainStep does with its micro-batches (accumulation, clipping, the scheduled rate)."""

import math
import time

import pytest
import torch
from accelerate import Accelerator
from torch import nn

from tabular_regression import task
from tabular_regression.config import load_config
from tabular_regression.optim import (
    TrainStep,
    build_optimizer,
    learning_rate,
    warmup_cosine,
)
from tabular_regression.precision import StepPrecision, prepare
from tabular_regression.utils.monitor import LogWindow, TrainingClock


class Layers(nn.Module):
    """A weight (2-D), a bias and a norm's weight and bias (1-D), then a frozen layer."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.norm = nn.LayerNorm(2)
        self.frozen = nn.Linear(2, 1).requires_grad_(False)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.frozen(self.norm(self.linear(inputs)))


def test_weights_decay_biases_and_norms_do_not_and_frozen_parameters_are_left_out():
    model = Layers()
    optimizer = build_optimizer(model, load_config(["--weight_decay", "0.05"]))
    decay = {
        id(p): group["weight_decay"] for group in optimizer.param_groups for p in group["params"]
    }
    assert decay == {
        id(model.linear.weight): 0.05,
        id(model.linear.bias): 0.0,
        id(model.norm.weight): 0.0,
        id(model.norm.bias): 0.0,
    }


def test_adamw_takes_the_configured_learning_rate_and_beta2():
    optimizer = build_optimizer(Layers(), load_config(["--lr", "0.003", "--beta2", "0.95"]))
    assert isinstance(optimizer, torch.optim.AdamW)
    assert {(group["lr"], group["betas"]) for group in optimizer.param_groups} == {
        (0.003, (0.9, 0.95))
    }


@pytest.mark.parametrize(
    ("step", "warmup_steps", "total_steps", "multiplier"),
    [
        (0, 3, 11, 1 / 4),  # warmup starts above zero: step 0 trains too
        (2, 3, 11, 3 / 4),
        (3, 3, 11, 1.0),  # the peak, where the decay starts
        (5, 3, 11, 0.5 * (1 + math.cos(math.pi / 4))),
        (7, 3, 11, 0.5),
        (11, 3, 11, 0.0),
        (20, 3, 11, 0.0),  # past the end (a resumed run with a smaller total): zero, not rising
        (0, 0, 11, 1.0),  # no warmup
        (3, 3, 3, 1.0),  # warmup as long as the run: a one-step decay after it
        (4, 3, 3, 0.0),
    ],
)
def test_warmup_then_cosine_decay(step, warmup_steps, total_steps, multiplier):
    assert warmup_cosine(step, warmup_steps, total_steps) == pytest.approx(multiplier, abs=1e-12)


def test_warmup_lasts_at_most_a_fifth_of_the_run():
    cfg = load_config(["--lr", "0.01", "--warmup_steps", "100"])
    assert learning_rate(0, cfg, 50) == pytest.approx(0.01 / 11)  # 10 warmup steps
    assert learning_rate(0, cfg, 1000) == pytest.approx(0.01 / 101)  # the 100 asked for


def squared_error(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return ((outputs - targets) ** 2).mean()


def micro_batches(count: int, wait_s: float = 0.0):
    """`count` micro-batches of 4 samples for a Linear(3, 2), each `wait_s` in coming."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(count):
        time.sleep(wait_s)
        yield torch.randn(4, 3, generator=generator), torch.randn(4, 2, generator=generator)


class CountingAverage:
    def __init__(self):
        self.updates = 0

    def update(self) -> None:
        self.updates += 1


@pytest.fixture
def train_step(monkeypatch):
    """train_step(*fields, total_steps=10): a TrainStep over a seeded Linear(3, 2), the task's
    loss replaced by the squared error, and an empty log window."""
    monkeypatch.setattr(task, "compute_loss", squared_error)

    def build(*fields: str, total_steps: int = 10) -> tuple[TrainStep, LogWindow]:
        cfg = load_config(["--warmup_steps", "2", "--weight_decay", "0", *fields])
        accelerator = Accelerator()
        torch.manual_seed(0)
        model = nn.Linear(3, 2)
        model, optimizer = prepare(accelerator, model, build_optimizer(model, cfg))
        step = TrainStep(model, optimizer, accelerator, cfg, total_steps, CountingAverage())
        clock = TrainingClock(accelerator.device)
        return step, LogWindow(accelerator.device, 0, [], clock)

    return build


def test_a_step_averages_the_gradients_of_its_micro_batches(train_step):
    step, window = train_step()
    model = step.model
    expected = nn.Linear(3, 2)
    expected.load_state_dict({name: t.detach().cpu() for name, t in model.state_dict().items()})
    batches = list(micro_batches(3))
    losses = [squared_error(expected(inputs), targets) for inputs, targets in batches]
    (sum(losses) / 3).backward()
    expected_norm = torch.cat([p.grad.flatten() for p in expected.parameters()]).norm()

    grad_norm, _ = step(iter(batches), 3, 0, window)

    # float32 sums in another order (and on another device, where there is one): not bitwise
    assert grad_norm.item() == pytest.approx(expected_norm.item(), rel=1e-5)
    assert window.losses[0].item() == pytest.approx(sum(losses).item() / 3, rel=1e-5)
    assert window.samples == 12
    assert step.average.updates == 1
    # Freed, not zeroed: a step holds no gradient memory between steps.
    assert all(p.grad is None for p in model.parameters())


def test_a_step_trains_at_the_scheduled_learning_rate(train_step):
    step, window = train_step("--lr", "0.01")
    before = [p.detach().clone() for p in step.model.parameters()]
    _, lr = step(micro_batches(1), 1, 5, window)
    assert lr == learning_rate(5, step.cfg, 10) < 0.01
    assert {group["lr"] for group in step.optimizer.param_groups} == {lr}
    # AdamW's first update moves each weight by the learning rate (no weight decay here).
    for old, new in zip(before, step.model.parameters(), strict=True):
        torch.testing.assert_close(
            (old - new.detach()).abs(), torch.full_like(old, lr), rtol=1e-3, atol=0
        )


def test_a_step_clips_to_max_grad_norm(train_step, monkeypatch):
    step, window = train_step("--max_grad_norm", "0.25")
    clipped_to, clip = [], step.precision.clip

    def recording(model: nn.Module, max_norm: float) -> torch.Tensor:
        clipped_to.append(max_norm)
        return clip(model, max_norm)

    monkeypatch.setattr(step.precision, "clip", recording)
    step(micro_batches(1), 1, 0, window)
    assert clipped_to == [0.25]


def test_clipping_scales_the_gradients_to_the_norm_and_returns_the_norm_before():
    model = nn.Linear(3, 2)
    for parameter in model.parameters():
        parameter.grad = torch.ones_like(parameter)  # norm sqrt(8)
    norm = StepPrecision(Accelerator()).clip(model, 0.5)
    assert norm.item() == pytest.approx(math.sqrt(8))
    clipped = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
    assert clipped.item() == pytest.approx(0.5, rel=1e-5)


def test_the_wait_for_micro_batches_adds_to_the_window(train_step):
    step, window = train_step()
    window.data_s = 1.0  # the window's earlier steps
    started = time.perf_counter()
    step(micro_batches(2, wait_s=0.01), 2, 0, window)
    assert 1.02 <= window.data_s <= 1.0 + time.perf_counter() - started
