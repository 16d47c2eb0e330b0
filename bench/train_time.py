"""Training time: `python bench/train_time.py [--task TASK ...] [--out FILE] [-- TRAIN_ARGS ...]`.

Renders the default project of each task (every task_type in copier.yml unless --task names
some), runs its default training (or the run TRAIN_ARGS describe) one task at a time, and
reports each training's own wall time and metric against the trivial baseline from its
summary.json. A default run is meant to finish training within TRAIN_BUDGET_S on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import environment, write_result

from generator.answers import load_space
from generator.render import package_of, render

SUMMARY_KEYS = ["task", "metric", "value", "baseline_value", "higher_is_better", "steps"]
SUMMARY_KEYS += ["epochs", "samples_per_s", "wall_s", "peak_mem_mb"]
TRAIN_BUDGET_S = 120


def main(argv: Sequence[str] | None = None) -> int:
    (task_axis,) = [axis for axis in load_space().axes if axis.name == "task_type"]
    tasks = list(task_axis.choices)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", action="append", choices=tasks, help="default: every task")
    parser.add_argument("--out", type=Path, help="JSON file (default: bench/results/)")
    parser.add_argument("train_args", nargs="*", help="extra `--field value` for the runs")
    args = parser.parse_args(argv)

    runs = [train_default(task, args.train_args) for task in args.task or tasks]
    result = {
        "benchmark": "train_time",
        "train_args": args.train_args,
        "budget_s": TRAIN_BUDGET_S,
        "runs": runs,
        "environment": environment(),
    }
    path = write_result("train_time", result, args.out)
    for run in runs:
        within = "within" if run["wall_s"] <= TRAIN_BUDGET_S else "OVER"
        print(
            f"{run['task']:<22} {run['metric']} {run['value']:.4f} "
            f"(baseline {run['baseline_value']:.4f}); training {run['wall_s']:.1f} s "
            f"({within} {TRAIN_BUDGET_S} s), process {run['process_s']:.1f} s"
        )
    print(path)
    return 0


def train_default(task: str, train_args: list[str]) -> dict[str, Any]:
    """Render the task's default project, train it, and return its summary and timings."""
    with tempfile.TemporaryDirectory() as tmp:
        project = render({"task_type": task}, Path(tmp, "project"))
        out = Path(tmp, "out")
        command = [sys.executable, "-m", f"{package_of(project)}.train", "--output_dir", str(out)]
        env = {**os.environ, "PYTHONPATH": "src"}
        start = time.perf_counter()
        subprocess.run([*command, *train_args], cwd=project, env=env, check=True)
        process_s = time.perf_counter() - start
        summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    # process_s includes imports and data set-up, unlike the summary's wall_s
    return {key: summary[key] for key in SUMMARY_KEYS} | {"process_s": process_s}


if __name__ == "__main__":
    raise SystemExit(main())
