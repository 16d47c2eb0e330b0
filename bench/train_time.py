"""Training time: `python bench/train_time.py [--out FILE] [-- TRAIN_ARGS ...]`.

Renders the default project and runs its default training (or the run TRAIN_ARGS describe);
reports the training's own wall time and accuracy from its summary.json.
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

from common import environment, write_result

from generator.render import package_of, render

SUMMARY_KEYS = ["task", "metric", "value", "baseline_value", "steps", "epochs"]
SUMMARY_KEYS += ["samples_per_s", "wall_s", "peak_mem_mb"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="JSON file (default: bench/results/)")
    parser.add_argument("train_args", nargs="*", help="extra `--field value` for the run")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        project = render({}, Path(tmp, "project"))
        out = Path(tmp, "out")
        command = [sys.executable, "-m", f"{package_of(project)}.train", "--output_dir", str(out)]
        env = {**os.environ, "PYTHONPATH": "src"}
        start = time.perf_counter()
        subprocess.run([*command, *args.train_args], cwd=project, env=env, check=True)
        process_s = time.perf_counter() - start
        summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))

    result = {
        "benchmark": "train_time",
        "train_args": args.train_args,
        **{key: summary[key] for key in SUMMARY_KEYS},
        "process_s": process_s,  # includes imports and data set up, unlike wall_s
        "environment": environment(),
    }
    path = write_result("train_time", result, args.out)
    print(f"{summary['metric']} {summary['value']:.4f} (baseline {summary['baseline_value']:.4f})")
    print(f"training {summary['wall_s']:.1f} s, process {process_s:.1f} s")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
