"""Rendered projects work: their own tests pass, a fast dev run writes a complete run folder,
and the default project beats its trivial baseline by a wide margin.

Running projects is slow on a CPU, so the tests and the fast dev run cover a subset that uses
every choice of every question at least once (generator.cover.covering).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import reproduce, run_in

from generator.answers import Answers, load_space
from generator.cover import covering
from generator.render import package_of, render

SPACE = load_space()
SUBSET = covering(SPACE)
SUBSET_IDS = [SPACE.slug(c) for c in SUBSET]
RUN_FOLDER = [
    "config.yaml",
    "run.json",
    "metrics.jsonl",
    "summary.json",
    "curves.png",
    "checkpoints",
    "model",
]
SUMMARY_FIELDS = {
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
}

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("answers", SUBSET, ids=SUBSET_IDS)
def test_project_tests_pass(tmp_path: Path, answers: Answers) -> None:
    project = render(answers, tmp_path / "project")
    run_in(project, ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"], reproduce(answers))


@pytest.mark.parametrize("answers", SUBSET, ids=SUBSET_IDS)
def test_fast_dev_run_writes_the_run_folder(tmp_path: Path, answers: Answers) -> None:
    project = render(answers, tmp_path / "project")
    out = tmp_path / "out"
    command = ["-m", f"{package_of(project)}.train", "--fast_dev_run", "true"]
    run_in(project, [*command, "--output_dir", str(out)], reproduce(answers))
    missing = [name for name in RUN_FOLDER if not (out / name).exists()]
    assert not missing, f"{reproduce(answers)}\nmissing from the run folder: {missing}"
    assert (out / "checkpoints").is_dir() and (out / "model").is_dir()
    assert any((out / "model").iterdir()), "model/ holds no weights"
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    lacking = SUMMARY_FIELDS - set(summary)
    assert not lacking, f"{reproduce(answers)}\nsummary.json lacks {sorted(lacking)}"
    for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        assert isinstance(json.loads(line), dict)


def test_default_project_reaches_its_target(tmp_path: Path) -> None:
    answers = SPACE.defaults()
    project = render(answers, tmp_path / "project")
    out = tmp_path / "out"
    run_in(project, ["-m", f"{package_of(project)}.train", "--output_dir", str(out)], "")
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert answers["task_type"] == "image_classification", "the target below is for digits"
    assert summary["task"] == answers["task_type"]
    assert summary["higher_is_better"] is True
    assert summary["value"] > summary["baseline_value"]
    assert summary["value"] >= 0.985, summary
