"""Render time: `python bench/render_time.py [--repeats N] [--max-combinations K] [--out FILE]`.

Times renders through the generator's API (copier clones the working tree each time): the
median of N renders of the defaults, then every combination of the matrix once.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from common import environment, write_result

from generator.answers import Answers, load_space
from generator.render import render


def time_render(answers: Answers, dest: Path) -> float:
    start = time.perf_counter()
    render(answers, dest)
    return time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9, help="renders of the defaults")
    parser.add_argument("--max-combinations", type=int, help="time only the first K of the matrix")
    parser.add_argument("--out", type=Path, help="JSON file (default: bench/results/)")
    args = parser.parse_args(argv)

    space = load_space()
    combinations = space.combinations()[: args.max_combinations]
    with tempfile.TemporaryDirectory() as tmp:
        defaults = [time_render({}, Path(tmp, f"default-{i}")) for i in range(args.repeats)]
        start = time.perf_counter()
        for i, answers in enumerate(combinations):
            render(answers, Path(tmp, f"combination-{i}"))
        matrix_s = time.perf_counter() - start

    result = {
        "benchmark": "render_time",
        "default_render_s": {
            "median": statistics.median(defaults),
            "min": min(defaults),
            "max": max(defaults),
            "repeats": len(defaults),
        },
        "matrix": {
            "combinations": len(combinations),
            "of": len(space.combinations()),
            "total_s": matrix_s,
            "per_render_s": matrix_s / max(1, len(combinations)),
        },
        "environment": environment(),
    }
    path = write_result("render_time", result, args.out)
    print(f"default render: median {result['default_render_s']['median']:.3f} s")
    print(f"matrix: {len(combinations)} combinations in {matrix_s:.1f} s")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
