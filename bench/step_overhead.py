"""Per-step overhead: `python bench/step_overhead.py [--steps 512] [--repeats 3] [--out FILE]`.

Runs one workload through the rendered project's trainer and through the loops people
compare it with, in one process, and prints each one's time relative to the fastest:

  bare        a hand-written loop indexing in-memory tensors (the floor)
  bare_fused  the same with AdamW(fused=True), the optimizer the trainer uses
  dataloader  the same loop over a default torch DataLoader
  accelerate  a standard Accelerate loop: prepare + accumulate + clip
  lightning   Lightning's Trainer (skipped when lightning is not installed)
  trainer     the rendered project's train(), logging every 50 steps, progress bar on
  trainer_ema the same with a moving average of the weights (--ema_decay 0.999)

Workload: an MLP 64-256-256-10 on the digits (64 features), batch 64, AdamW, gradient
clipping at 1.0, one thread. Each loop's first step is a warm-up and is not timed; the
trainer evaluates and checkpoints only after its last step, outside the timed window.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import torch
from common import environment, write_result
from torch import nn
from torch.nn import functional as F

from generator.render import package_of, render

BATCH = 64
LR = 1e-3
CLIP = 1.0


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(64, 256),
        nn.ReLU(),
        nn.Linear(256, 256),
        nn.ReLU(),
        nn.Linear(256, 10),
    )


class StepClock:
    """Seconds from the end of the first (warm-up) step to the end of the last one."""

    def __init__(self) -> None:
        self.start: float | None = None
        self.end = 0.0

    def tick(self) -> None:
        now = time.perf_counter()
        if self.start is None:
            self.start = now
        self.end = now

    @property
    def seconds(self) -> float:
        assert self.start is not None, "no step ran"
        return self.end - self.start


def epochs_of_batches(inputs: torch.Tensor, targets: torch.Tensor, steps: int):
    """Shuffled in-memory batches, epoch after epoch, drop_last: what a bare loop does."""
    generator = torch.Generator().manual_seed(0)
    done = 0
    while True:
        order = torch.randperm(len(targets), generator=generator)
        for start in range(0, len(order) - BATCH + 1, BATCH):
            if done == steps:
                return
            index = order[start : start + BATCH]
            yield inputs[index], targets[index]
            done += 1


def plain_loop(batches, fused: bool = False) -> float:
    """The hand-written loop: forward, loss, backward, clip, step."""
    model, clock = mlp(), StepClock()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, fused=fused)
    for x, y in batches:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        clock.tick()
    return clock.seconds


def bare(inputs: torch.Tensor, targets: torch.Tensor, steps: int, fused: bool = False) -> float:
    return plain_loop(epochs_of_batches(inputs, targets, steps), fused)


def default_loader(inputs: torch.Tensor, targets: torch.Tensor, steps: int):
    dataset = torch.utils.data.TensorDataset(inputs, targets)
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True, drop_last=True)
    done = 0
    while True:
        for batch in loader:
            if done == steps:
                return
            yield batch
            done += 1


def dataloader(inputs: torch.Tensor, targets: torch.Tensor, steps: int) -> float:
    return plain_loop(default_loader(inputs, targets, steps))


def accelerate_loop(inputs: torch.Tensor, targets: torch.Tensor, steps: int) -> float:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=1)
    model, clock = mlp(), StepClock()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    dataset = torch.utils.data.TensorDataset(inputs, targets)
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True, drop_last=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    done = 0
    while done < steps:
        for x, y in loader:
            if done == steps:
                break
            with accelerator.accumulate(model):
                loss = F.cross_entropy(model(x), y)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), CLIP)
                optimizer.step()
                optimizer.zero_grad()
            clock.tick()
            done += 1
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    return clock.seconds


def lightning_loop(inputs: torch.Tensor, targets: torch.Tensor, steps: int) -> float:
    import lightning as L

    clock = StepClock()

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = mlp()

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=LR)

        def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
            clock.tick()

    dataset = torch.utils.data.TensorDataset(inputs, targets)
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True, drop_last=True)
    trainer = L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        gradient_clip_val=CLIP,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Module(), loader)
    return clock.seconds


def trainer_loop(project: Path, steps: int, *fields: str) -> Callable[..., float]:
    """The rendered project's own train(), with the benchmark's MLP as its model."""
    sys.path.insert(0, str(project / "src"))
    package = package_of(project)
    train_module = __import__(f"{package}.train", fromlist=["train"])
    config_module = __import__(f"{package}.config", fromlist=["load_config"])
    from accelerate.state import AcceleratorState, GradientState

    def run(inputs: torch.Tensor, targets: torch.Tensor, steps: int) -> float:
        train_module.build_model = lambda cfg, num_classes: mlp()
        with tempfile.TemporaryDirectory() as out:
            cfg = config_module.load_config(
                [
                    f"--output_dir={out}",
                    f"--max_steps={steps}",
                    "--epochs=1000",
                    f"--batch_size={BATCH}",
                    f"--lr={LR}",
                    "--weight_decay=0.01",  # AdamW's default, as in the baselines
                    "--warmup_steps=0",
                    f"--max_grad_norm={CLIP}",
                    "--log_every=50",
                    f"--eval_every={10 * steps}",
                    f"--checkpoint_every={10 * steps}",
                    "--resume=none",
                    *fields,
                ]
            )
            summary = train_module.train(cfg)
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
        # samples_per_s covers the steps after the first, up to the end of the last step.
        return (steps - 1) * BATCH / summary["samples_per_s"]

    return run


def digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    inputs = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    return inputs, torch.tensor(digits.target)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, help="JSON file (default: bench/results/)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    loops: dict[str, Callable[..., float]] = {
        "bare": bare,
        "bare_fused": partial(bare, fused=True),
        "dataloader": dataloader,
        "accelerate": accelerate_loop,
    }
    try:
        import lightning  # noqa: F401

        loops["lightning"] = lightning_loop
    except ImportError:
        print("lightning is not installed: its baseline is skipped")

    inputs, targets = digits_tensors()
    with tempfile.TemporaryDirectory() as tmp:
        project = render({}, Path(tmp, "project"))
        loops["trainer"] = trainer_loop(project, args.steps)
        loops["trainer_ema"] = trainer_loop(project, args.steps, "--ema_decay=0.999")
        times: dict[str, list[float]] = {name: [] for name in loops}
        for _ in range(args.repeats):  # interleaved, so a slow moment hits every loop alike
            for name, loop in loops.items():
                times[name].append(loop(inputs, targets, args.steps))

    medians = {name: statistics.median(values) for name, values in times.items()}
    fastest = min(medians.values())
    ratios = {name: median / fastest for name, median in medians.items()}
    result = {
        "benchmark": "step_overhead",
        "workload": {"model": "MLP 64-256-256-10", "batch": BATCH, "steps": args.steps},
        "threads": args.threads,
        "repeats": args.repeats,
        "seconds": times,
        "median_s": medians,
        "relative_to_fastest": ratios,
        "trainer_vs_bare": medians["trainer"] / medians["bare"],
        # The trainer's own overhead, with the optimizer's speed-up taken out.
        "trainer_vs_bare_fused": medians["trainer"] / medians["bare_fused"],
        # What the weights' moving average adds to each step.
        "ema_vs_trainer": medians["trainer_ema"] / medians["trainer"],
        "environment": environment(),
    }
    path = write_result("step_overhead", result, args.out)
    for name in sorted(ratios, key=ratios.get):
        print(f"{name:>11}  {ratios[name]:.2f}  ({medians[name] * 1000 / args.steps:.3f} ms/step)")
    keys = ("trainer_vs_bare", "trainer_vs_bare_fused", "ema_vs_trainer")
    print(json.dumps({key: round(result[key], 3) for key in keys}))
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
