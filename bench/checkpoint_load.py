"""Checkpoint checksums: `python bench/checkpoint_load.py [--megabytes 256] [--out FILE]`.

A rendered project writes every checkpoint with the CRC-32 of its bytes and verifies it
before loading. This measures what that costs, in one process, on one checkpoint of
`--megabytes` of float32 tensors (64 of them, as a model's state_dict and its optimizer's):

  load   the project's load_checkpoint (checksum, then torch.load) against torch.load alone
         on the same file, with weights_only and map_location="cpu" as the project loads,
         and the checksum's verification alone;
  save   the project's save_checkpoint (the checksum computed while torch.save writes)
         against torch.save through the same atomic write (temporary file, fsync, rename).

Median of `--repeats` each, the file in the page cache (a first load is not timed): the
extra work is one pass over bytes already in memory, so this is its largest share; a
load from disk adds the same reading time to both.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from common import environment, write_result

from generator.render import package_of, render

TENSORS = 64


def median_seconds(work: Callable[[], object], repeats: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def measure(checkpoint, directory: Path, megabytes: float, repeats: int) -> dict:
    numel = max(1, int(megabytes * 2**20 / 4 / TENSORS))
    states = {"model": {f"w{i}": torch.randn(numel) for i in range(TENSORS)}, "rng": []}
    progress = checkpoint.Progress(step=1)
    path = checkpoint.save_checkpoint(directory, progress, states, keep=1, is_best=False)
    plain = directory / "plain.pt"

    def save_plain() -> None:
        checkpoint.atomic_write(plain, lambda file: torch.save(states, file))

    def load_plain() -> None:
        torch.load(path, map_location="cpu", weights_only=True)

    work = {
        "torch_save": save_plain,
        "save_checkpoint": lambda: checkpoint.save_checkpoint(
            directory, progress, states, 1, False
        ),
        "torch_load": load_plain,
        "load_checkpoint": lambda: checkpoint.load_checkpoint(path),
        "verify_only": lambda: checkpoint.archive_damage(path),  # the check load_checkpoint adds
    }
    load_plain()  # the file into the page cache
    seconds, medians = {}, {}
    for name, run in work.items():
        medians[name], seconds[name] = median_seconds(run, repeats)
    return {
        "megabytes": path.stat().st_size / 2**20,
        "tensors": TENSORS,
        "repeats": repeats,
        "seconds": seconds,
        "median_s": medians,
        "load_vs_torch_load": medians["load_checkpoint"] / medians["torch_load"],
        "save_vs_torch_save": medians["save_checkpoint"] / medians["torch_save"],
        "verify_vs_torch_load": medians["verify_only"] / medians["torch_load"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=256, help="checkpoint size")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, help="JSON file (default: bench/results/)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        project = render({}, Path(tmp, "project"))
        sys.path.insert(0, str(project / "src"))
        checkpoint = __import__(f"{package_of(project)}.checkpoint", fromlist=["checkpoint"])
        measured = measure(checkpoint, Path(tmp, "checkpoints"), args.megabytes, args.repeats)

    result = {"benchmark": "checkpoint_load", **measured, "environment": environment()}
    path = write_result("checkpoint_load", result, args.out)
    medians = measured["median_s"]
    print(
        f"{measured['megabytes']:.0f} MB: load_checkpoint {medians['load_checkpoint']:.3f} s, "
        f"torch.load {medians['torch_load']:.3f} s ({measured['load_vs_torch_load']:.2f}x); "
        f"save_checkpoint {medians['save_checkpoint']:.3f} s, torch.save "
        f"{medians['torch_save']:.3f} s ({measured['save_vs_torch_save']:.2f}x); the "
        f"checksum's verification alone {medians['verify_only']:.3f} s"
    )
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
