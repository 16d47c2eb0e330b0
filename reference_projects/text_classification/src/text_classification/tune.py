"""Find the loader settings that train fastest on your data.

    python -m text_classification.tune [--workers 0,1,2,4]
        [--batch_sizes 32,64,128] [--steps 30]
                                   [--field value ...]

Trains `steps` optimizer steps for every combination of loader workers and batch size
(after two warm-up steps, on the data and model the same fields would train) and prints
the samples per second of each, then the best. Workers only matter for data read from
files sample by sample; data indexed from memory in whole batches has none.
"""

import sys
import time
from dataclasses import replace

import torch

from . import task
from .config import ConfigError, TrainConfig, load_config
from .data import build_datasets
from .loaders import TensorData, build_loaders, resolve_num_workers
from .model import build_model
from .optim import build_optimizer

WARMUP_STEPS = 2


def measure(cfg: TrainConfig, steps: int) -> float:
    """Training samples per second with cfg's loader settings, on the CPU or the first GPU."""
    device = torch.device("cuda" if torch.cuda.is_available() and not cfg.cpu else "cpu")
    torch.manual_seed(cfg.seed)
    datasets = build_datasets(cfg)
    loader, _ = build_loaders(cfg, datasets, device, torch.Generator().manual_seed(cfg.seed))
    model = build_model(cfg, datasets.preprocess).to(device).train()
    optimizer = build_optimizer(model, cfg)
    samples, start, done = 0, 0.0, 0
    epoch = 0
    while done < WARMUP_STEPS + steps:
        loader.batch_sampler.set_epoch(epoch)
        for inputs, targets in loader:
            if done == WARMUP_STEPS:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start, samples = time.perf_counter(), 0
            inputs = inputs.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            loss = task.compute_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            samples += len(targets)
            done += 1
            if done == WARMUP_STEPS + steps:
                break
        epoch += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
    return samples / (time.perf_counter() - start)


def sweep(
    cfg: TrainConfig, workers: list[int], batch_sizes: list[int], steps: int
) -> list[dict[str, float]]:
    """samples/s for every (num_workers, batch_size); workers are ignored for in-memory data."""
    if isinstance(build_datasets(cfg).train, TensorData):
        workers = [0]
    return [
        {
            "num_workers": count,
            "batch_size": size,
            "samples_per_s": measure(replace(cfg, num_workers=count, batch_size=size), steps),
        }
        for size in batch_sizes
        for count in workers
    ]


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    options, fields = _split_options(list(sys.argv[1:] if argv is None else argv))
    try:
        workers = [int(v) for v in options["workers"].split(",")]
        batch_sizes = [int(v) for v in options["batch_sizes"].split(",")]
        steps = int(options["steps"])
        if min(workers) < 0 or min(batch_sizes) < 1 or steps < 1:
            raise ValueError
    except ValueError:
        raise SystemExit(
            "error: --workers and --batch_sizes take comma-separated integers "
            "(workers >= 0, batch sizes >= 1) and --steps an integer >= 1"
        ) from None
    try:
        results = sweep(load_config(fields), workers, batch_sizes, steps)
    except ConfigError as error:
        raise SystemExit(f"error: {error}") from None

    auto = resolve_num_workers("auto")
    print(f"{'num_workers':>11}  {'batch_size':>10}  {'samples/s':>10}")
    for row in results:
        workers, size, speed = row["num_workers"], row["batch_size"], row["samples_per_s"]
        print(
            f"{workers:>11}  {size:>10}  {speed:>10.0f}" + ("  (auto)" if workers == auto else "")
        )
    best = max(results, key=lambda row: row["samples_per_s"])
    print(
        f"best: --num_workers {best['num_workers']} --batch_size {best['batch_size']} "
        f"({best['samples_per_s']:.0f} samples/s); a larger batch may need a larger --lr"
    )
    return results


def _split_options(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """This command's own options, and the config fields to pass on to load_config."""
    options = {"workers": "0,1,2,4", "batch_sizes": "32,64,128", "steps": "30"}
    fields, tokens = [], iter(args)
    for token in tokens:
        name, has_value, value = token.removeprefix("--").partition("=")
        if token.startswith("--") and name in options:
            options[name] = value if has_value else next(tokens, "")
        else:
            fields.append(token)
    return options, fields


if __name__ == "__main__":
    main()
