"""Find the loader settings that train fastest on your data.

    python -m image_classification.tune [--workers 0,1,2,4]
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

from .average import weight_average
from .config import ConfigError, TrainConfig, load_config
from .data import build_datasets
from .loaders import DataError, TensorData, build_loaders, resolve_num_workers
from .model import build_model
from .optim import TrainStep, build_optimizer
from .precision import prepare
from .processes import start_accelerator
from .utils.cli import Parser, at_least, listed
from .utils.monitor import LogWindow, TrainingClock

WARMUP_STEPS = 2


def measure(cfg: TrainConfig, steps: int) -> float:
    """Training samples per second with cfg's loader settings, on the device a run of cfg
    would train on, through the training loop's own step (train.py)."""
    accelerator = start_accelerator(cfg)
    device = accelerator.device
    torch.manual_seed(cfg.seed)
    datasets = build_datasets(cfg)
    loader, _ = build_loaders(cfg, datasets, device, torch.Generator().manual_seed(cfg.seed))
    model = build_model(cfg, datasets.preprocess).to(device).train()
    average = weight_average(model, cfg.ema_decay)  # what it costs is measured too
    model, optimizer = prepare(accelerator, model, build_optimizer(model, cfg))
    train_step = TrainStep(model, optimizer, accelerator, cfg, WARMUP_STEPS + steps, average)
    window = LogWindow(device, 0, [], TrainingClock(device))
    epoch, left = 0, 0  # micro-batches left in the epoch
    for step in range(WARMUP_STEPS + steps):
        if step == WARMUP_STEPS:
            _synchronize(device)
            start, samples_before = time.perf_counter(), window.samples
        if left == 0:
            loader.batch_sampler.set_epoch(epoch)
            micro_batches, left, epoch = iter(loader), len(loader), epoch + 1
        group = min(cfg.grad_accum_steps, left)
        train_step(micro_batches, group, step, window)
        left -= group
    _synchronize(device)
    return (window.samples - samples_before) / (time.perf_counter() - start)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":  # the queued steps belong to the time measured
        torch.cuda.synchronize(device)


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
    args, fields = _parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    try:
        results = sweep(load_config(fields), args.workers, args.batch_sizes, args.steps)
    except (ConfigError, DataError) as error:
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


def _parser() -> Parser:
    """This command's own options; every other argument is a config field (load_config)."""
    parser = Parser("tune", "Measure training samples per second by loader workers and batch size.")
    parser.add_argument(
        "--workers",
        type=listed(at_least(0, int)),
        default=[0, 1, 2, 4],
        metavar="N,N,...",
        help="loader worker counts to try (default: 0,1,2,4)",
    )
    parser.add_argument(
        "--batch_sizes",
        type=listed(at_least(1, int)),
        default=[32, 64, 128],
        metavar="N,N,...",
        help="batch sizes to try (default: 32,64,128)",
    )
    parser.add_argument(
        "--steps",
        type=at_least(1, int),
        default=30,
        metavar="N",
        help="optimizer steps measured for each, after two warm-up steps (default: 30)",
    )
    parser.add_config_fields(TrainConfig, "Every other --field value is a field of TrainConfig")
    return parser


if __name__ == "__main__":
    main()
