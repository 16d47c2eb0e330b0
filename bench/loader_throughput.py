"""Data loading: `python bench/loader_throughput.py [--samples N] [--images N] [--out FILE]`.

Two measurements, in one process, on the rendered default project's own loaders:

  in_memory    batches per second over tensors held in memory: the project's InMemoryLoader
               (whole batches by index) against a default torch DataLoader (per-sample
               __getitem__ and collate), one thread, median of 3 epochs each;
  auto_workers training samples per second on a decode-heavy image folder (PNG files
               decoded and resized in loader workers), with num_workers swept by the
               project's own `tune` command; reports how close `auto` comes to the best.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch
from common import environment, write_result
from PIL import Image

from generator.render import package_of, render

BATCH = 64


def epoch_seconds(batches: Iterable) -> float:
    start = time.perf_counter()
    for _ in batches:
        pass
    return time.perf_counter() - start


def in_memory(project_modules, samples: int, repeats: int) -> dict:
    loaders = project_modules["loaders"]
    inputs = torch.randn(samples, 1, 8, 8)
    targets = torch.randint(0, 10, (samples,))
    sampler = loaders.EpochBatchSampler(samples, BATCH, shuffle=True, drop_last=True, seed=0)
    ours = loaders.InMemoryLoader(loaders.TensorData(inputs, targets), sampler, torch.device("cpu"))
    default = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(inputs, targets),
        batch_size=BATCH,
        shuffle=True,
        drop_last=True,
    )
    times = {"in_memory_loader": [], "default_dataloader": []}
    for _ in range(repeats):
        times["in_memory_loader"].append(epoch_seconds(ours))
        times["default_dataloader"].append(epoch_seconds(default))
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "samples": samples,
        "batch": BATCH,
        "seconds": times,
        "median_s": medians,
        "speedup": medians["default_dataloader"] / medians["in_memory_loader"],
    }


def decode_heavy_folder(root: Path, images: int, size: int = 160) -> Path:
    """PNG photographs stand-ins: noisy gradients with shapes, costly to decode and resize."""
    rng = np.random.default_rng(0)
    for index in range(images):
        label = index % 4
        folder = root / f"class{label}"
        folder.mkdir(parents=True, exist_ok=True)
        y, x = np.mgrid[:size, :size]
        base = (x * (label + 1) + y * 2) % 256
        pixels = np.stack([base, np.roll(base, 7 * label, axis=1), base.T], axis=-1)
        pixels = (pixels + rng.integers(0, 60, pixels.shape)).clip(0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"{index}.png")
    return root


def auto_workers(project_modules, images: int, workers: list[int], batch: int, steps: int) -> dict:
    tune = project_modules["tune"]
    auto = project_modules["loaders"].resolve_num_workers("auto")
    with tempfile.TemporaryDirectory() as tmp:
        root = decode_heavy_folder(Path(tmp, "images"), images)
        fields = ["--data_dir", str(root), "--image_size", "32", "--image_channels", "3"]
        cfg = project_modules["config"].load_config([*fields, "--batch_size", str(batch)])
        rows = tune.sweep(cfg, sorted({*workers, auto}), [batch], steps)
    speeds = {row["num_workers"]: row["samples_per_s"] for row in rows}
    best = max(speeds, key=speeds.get)
    return {
        "images": images,
        "samples_per_s": speeds,
        "auto": auto,
        "best": best,
        "auto_vs_best": speeds[auto] / speeds[best],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000, help="in-memory samples")
    parser.add_argument("--images", type=int, default=1200, help="decode-heavy images")
    parser.add_argument("--workers", default="0,1,2,3,4", help="num_workers to sweep")
    parser.add_argument("--steps", type=int, default=15, help="training steps per setting")
    parser.add_argument("--batch", type=int, default=BATCH, help="decode-heavy batch size")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="JSON file (default: bench/results/)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        project = render({}, Path(tmp, "project"))
        sys.path.insert(0, str(project / "src"))
        package = package_of(project)
        modules = {
            name: __import__(f"{package}.{name}", fromlist=[name])
            for name in ("config", "loaders", "tune")
        }
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        memory = in_memory(modules, args.samples, args.repeats)
        torch.set_num_threads(threads)
        workers = [int(v) for v in args.workers.split(",")]
        decode = auto_workers(modules, args.images, workers, args.batch, args.steps)

    result = {
        "benchmark": "loader_throughput",
        "in_memory": memory,
        "auto_workers": decode,
        "environment": environment(),
    }
    path = write_result("loader_throughput", result, args.out)
    print(f"in-memory loader: {memory['speedup']:.1f}x a default DataLoader over tensors")
    speeds = ", ".join(f"{k}: {v:.0f}" for k, v in sorted(decode["samples_per_s"].items()))
    print(f"decode-heavy samples/s by num_workers: {speeds}")
    print(
        f"auto ({decode['auto']} workers) reaches {decode['auto_vs_best']:.0%} "
        f"of the best ({decode['best']} workers)"
    )
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
