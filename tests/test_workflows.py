"""The CI workflows: pull requests run lint, tests and the pairwise check; the nightly CPU
matrix checks every combination of copier.yml exactly once; the GPU matrix's jobs check
every combination of the device questions exactly once, each on a runner that can run it."""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from generator import REPO_ROOT
from generator.answers import Answers, load_space
from generator.cli import get_parser
from generator.launch import processes
from generator.matrix_doc import GPU_DIR, shard_folders
from generator.render import render
from generator.selection import DEVICE_FREE, Shard, check_selection, select

WORKFLOWS = REPO_ROOT / ".github" / "workflows"
BIN = Path(sys.executable).parent  # check-jsonschema and zizmor: `.[dev]` installs them
SPACE = load_space()
TASKS, PRECISIONS = (
    next(axis.choices for axis in SPACE.axes if axis.name == name)
    for name in ("task_type", "mixed_precision")
)
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
    """Substitute `${{ matrix.NAME }}` as GitHub Actions does, and `$SHARD`, the jobs'
    variable for it."""
    text = MATRIX_VALUE.sub(lambda match: values[match[1]], text)
    return text.replace("$SHARD", values.get("shard", "$SHARD"))


def selected(args: list[str], device: str = "cuda") -> list[Answers]:
    """The combinations `check ARGS` checks, on `device`."""
    parsed = get_parser().parse_args(["check", *args])
    assert parsed.device == device, f"a matrix runs --device {device}: {args}"
    shard = Shard.parse(parsed.shard)
    return select(
        SPACE, parsed.sets, pairwise_only=parsed.pairwise, gpu_matrix=parsed.gpu_matrix, shard=shard
    )[1]


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


def test_gpu_matrix_checks_the_device_combinations_once_with_the_check_sample() -> None:
    """Each job checks `--gpu-matrix` of one distributed choice: its shards select each of
    that selection's combinations once and run the own suites an unsharded check samples
    (each task with each precision). Together the jobs take each distributed choice once,
    so every combination of the questions that change what runs on a GPU is checked once."""
    device = [axis for axis in SPACE.axes if axis.name not in DEVICE_FREE]
    device_parts: Counter[tuple] = Counter()
    for name, job in load("gpu-matrix.yml")["jobs"].items():
        parsed = [get_parser().parse_args(["check", *args]) for args in check_invocations(job)]
        assert parsed and all(p.gpu_matrix and p.device == "cuda" for p in parsed), name
        ((sets, tests),) = {(tuple(p.sets), p.project_tests) for p in parsed}  # one selection
        whole, sample = check_selection(SPACE, sets, "1/1", gpu_matrix=True, project_tests=tests)
        checked, tested = Counter(), Counter()
        for p in parsed:
            combinations, shard_sample = check_selection(
                SPACE, p.sets, p.shard, gpu_matrix=True, project_tests=p.project_tests
            )
            assert shard_sample == sample, f"{name}: shard {p.shard} samples other suites"
            checked.update(SPACE.slug(c) for c in combinations)
            tested.update(SPACE.slug(c) for c in combinations if c in shard_sample)
        assert checked == Counter(SPACE.slug(c) for c in whole), name
        assert tested == Counter(SPACE.slug(c) for c in sample), name
        pairs = Counter((c["task_type"], c["mixed_precision"]) for c in sample)
        offered = {(c["task_type"], c["mixed_precision"]) for c in whole}
        assert set(pairs) == offered and len(pairs) == len(sample), name  # one suite each
        device_parts.update(tuple(c[axis.name] for axis in device) for c in whole)
    # Every device combination that copier.yml's validators accept (not fp16 with sharding).
    valid = {tuple(c[axis.name] for axis in device) for c in SPACE.combinations()}
    assert device_parts == Counter(valid), "a device combination checked twice or never"


def test_gpu_matrix_shards_write_their_reports_where_report_matrix_reads_them(
    tmp_path: Path,
) -> None:
    single = load("gpu-matrix.yml")["jobs"]["single"]
    count = len(single["strategy"]["matrix"]["shard"])
    reports = [get_parser().parse_args(["check", *a]).report for a in check_invocations(single)]
    folders = [
        GPU_DIR.relative_to(REPO_ROOT) / f"shard-{i}-of-{count}" for i in range(1, count + 1)
    ]
    assert reports == folders
    for folder in folders:  # as `gh run download --dir docs/gpu-matrix` unpacks them
        (tmp_path / folder.name).mkdir()
    assert shard_folders(tmp_path) == [tmp_path / folder.name for folder in folders]
    (upload,) = [s["with"] for s in single["steps"] if "upload-artifact" in s.get("uses", "")]
    assert expand(upload["name"], {"shard": "2"}) == folders[1].name
    assert expand(upload["path"], {"shard": "2"}) == f"{folders[1].as_posix()}/"


def test_the_nightly_cpu_matrix_checks_every_combination_exactly_once() -> None:
    workflow = load("matrix-cpu.yml")
    assert "schedule" in workflow["on"] and "workflow_dispatch" in workflow["on"]
    shards = workflow["jobs"]["shard"]
    assert shards["env"]["SHARD"] == "${{ matrix.shard }}"
    counts = Counter(
        SPACE.slug(answers)
        for args in check_invocations(shards)
        for answers in selected(args, device="cpu")
    )
    assert counts == Counter(SPACE.slug(answers) for answers in SPACE.combinations())


def test_the_nightly_report_merges_every_shard_and_fails_on_any_failure() -> None:
    jobs = load("matrix-cpu.yml")["jobs"]
    report = jobs["report"]
    assert report["needs"] == "shard" and report["if"] == "always()"
    uploads = [s["with"]["name"] for s in jobs["shard"]["steps"] if "upload" in s.get("uses", "")]
    downloads = [s["with"]["pattern"] for s in report["steps"] if "download" in s.get("uses", "")]
    assert [pattern.removesuffix("*") for pattern in downloads] == [
        name.removesuffix("${{ matrix.shard }}") for name in uploads
    ]
    (merge,) = [run for run in runs(report) if "report merge" in run]
    parsed = get_parser().parse_args(shlex.split(merge.split("-m generator ", 1)[1]))
    assert parsed.command == "report" and parsed.shards == [Path("build/shards/*")]
    assert any("needs.shard.result" in step.get("if", "") for step in report["steps"])


def workflow_files(tmp_path: Path) -> list[Path]:
    """The repository's workflows and every workflow of a render of each distributed answer."""
    files = sorted(WORKFLOWS.glob("*.yml"))
    for distributed in ("single", "multi", "sharded"):
        project = render(SPACE.defaults() | {"distributed": distributed}, tmp_path / distributed)
        rendered = sorted((project / ".github" / "workflows").glob("*.yml"))
        assert {path.name for path in rendered} == {"ci.yml", "template-update.yml"}
        files += rendered
    return files


def test_workflows_follow_githubs_schema(tmp_path: Path) -> None:
    command = [BIN / "check-jsonschema", "--builtin-schema", "vendor.github-workflows"]
    result = subprocess.run(
        [*command, *workflow_files(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_zizmor_finds_nothing_in_the_workflows(tmp_path: Path) -> None:
    """Actions pinned to commits, read-only permissions, no persisted credentials."""
    command = [BIN / "zizmor", "--offline", "--no-progress", *workflow_files(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_gpu_jobs_run_where_their_combinations_can() -> None:
    for name, job in load("gpu-matrix.yml")["jobs"].items():
        labels = set(job["runs-on"])
        assert {"self-hosted", "gpu"} <= labels, name
        for args in check_invocations(job):
            several = any(processes(answers) > 1 for answers in selected(args))
            assert not several or "multi-gpu" in labels, f"{name}: {args} needs two GPUs"
