"""The CI workflows: pull requests run lint, tests and the pairwise check; the GPU matrix's
jobs check every combination of copier.yml exactly once, each on a runner that can run it."""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
from collections import Counter
from typing import Any

import yaml

from generator import REPO_ROOT
from generator.answers import Answers, load_space
from generator.check import processes
from generator.cli import get_parser
from generator.selection import Shard, select

WORKFLOWS = REPO_ROOT / ".github" / "workflows"
SPACE = load_space()
CHECK = re.compile(r"-m generator check (.*)")
MATRIX_VALUE = re.compile(r"\$\{\{\s*matrix\.(\w+)\s*\}\}")


def load(name: str) -> dict[str, Any]:
    workflow = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    workflow["on"] = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads `on:` as true
    return workflow


def runs(job: dict[str, Any]) -> list[str]:
    return [" ".join(step["run"].split()) for step in job["steps"] if "run" in step]


def check_invocations(job: dict[str, Any]) -> list[list[str]]:
    """The arguments of every `generator check` the job runs, once per strategy.matrix entry."""
    matrix = job.get("strategy", {}).get("matrix", {})
    assert not {"include", "exclude"} & set(matrix), "expand include/exclude here first"
    names = list(matrix)
    invocations = []
    for values in itertools.product(*(matrix[name] for name in names)):
        given = dict(zip(names, map(str, values), strict=True))
        for run in runs(job):
            if match := CHECK.search(run):
                invocations.append(shlex.split(expand(match[1], given)))
    return invocations


def expand(text: str, values: dict[str, str]) -> str:
    """Substitute `${{ matrix.NAME }}` as GitHub Actions does."""
    return MATRIX_VALUE.sub(lambda match: values[match[1]], text)


def selected(args: list[str]) -> list[Answers]:
    parsed = get_parser().parse_args(["check", *args])
    assert parsed.all and parsed.device == "cuda", (
        f"the GPU matrix runs --all --device cuda: {args}"
    )
    return select(SPACE, parsed.sets, shard=Shard.parse(parsed.shard))[1]


def test_ci_runs_lint_tests_and_the_pairwise_check_on_pull_requests() -> None:
    workflow = load("ci.yml")
    assert "pull_request" in workflow["on"] and "push" in workflow["on"]
    commands = [run for job in workflow["jobs"].values() for run in runs(job)]
    assert "make lint" in commands and "make test" in commands


def test_make_test_runs_the_tests_and_the_pairwise_check() -> None:
    # -n prints what `make test` runs without running it.
    printed = subprocess.run(
        ["make", "-n", "test"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert re.search(r"-m pytest\b", printed), printed
    assert re.search(r"-m generator check --pairwise\b.*--device cpu", printed), printed


def test_gpu_matrix_checks_every_combination_exactly_once() -> None:
    jobs = load("gpu-matrix.yml")["jobs"].values()
    counts = Counter(
        SPACE.slug(answers)
        for job in jobs
        for args in check_invocations(job)
        for answers in selected(args)
    )
    expected = Counter(SPACE.slug(answers) for answers in SPACE.combinations())
    assert sorted((counts - expected).elements()) == [], "checked more than once"
    assert sorted((expected - counts).elements()) == [], "never checked"


def test_gpu_jobs_run_where_their_combinations_can() -> None:
    for name, job in load("gpu-matrix.yml")["jobs"].items():
        labels = set(job["runs-on"])
        assert {"self-hosted", "gpu"} <= labels, name
        for args in check_invocations(job):
            several = any(processes(answers) > 1 for answers in selected(args))
            assert not several or "multi-gpu" in labels, f"{name}: {args} needs two GPUs"
