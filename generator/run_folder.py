"""The run contract (DESIGN.md): what a project's run writes in its output_dir.

`generator.check` holds each combination's fast dev run to it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from generator.answers import Answer
from generator.launch import processes

FAST_DEV_RUN_DIR = "fast-dev-run"  # where a project's fast dev run writes, under output_dir
RUN_FOLDER = ("config.yaml", "run.json", "metrics.jsonl", "summary.json", "curves.png")
SUMMARY_FIELDS = (
    "task",
    "metric",
    "value",
    "baseline_value",
    "higher_is_better",
    "steps",
    "epochs",
    "samples_per_s",
    "wall_s",
    "peak_mem_mb",
)


def run_folder_problems(out: Path, answers: Mapping[str, Answer], device: str) -> list[str]:
    """What the run contract (DESIGN.md) promises in output_dir and this run did not write."""
    problems = [f"{name}: missing" for name in RUN_FOLDER if not (out / name).is_file()]
    for folder in ("checkpoints", "model"):
        if not (out / folder).is_dir() or not any((out / folder).iterdir()):
            problems.append(f"{folder}/: missing or empty")
    if problems:
        return problems
    lacking = sorted(set(SUMMARY_FIELDS) - set(summary(out)))
    if lacking:
        problems.append(f"summary.json: lacks {', '.join(lacking)}")
    info = json.loads((out / "run.json").read_text(encoding="utf-8"))
    if info.get("world_size") != processes(answers):
        problems.append(
            f"run.json: world_size {info.get('world_size')}, expected {processes(answers)}"
        )
    if not str(info.get("device", "")).startswith(device):
        problems.append(f"run.json: ran on {info.get('device')}, expected {device}")
    return problems


def summary(out: Path) -> dict[str, Any]:
    """The run's summary.json."""
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))
