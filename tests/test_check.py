"""`generator.check`: the stages find what is broken, and the report says where and why."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from generator import check, commands, launch, parallel
from generator.answers import Answers, load_space
from generator.check import Result, Stage, check_combination
from generator.cli import main
from generator.launch import Options
from generator.parallel import check_all
from generator.provenance import template_commit, template_trees
from generator.references import REFERENCES_DIR, reference_combinations
from generator.report import as_markdown, reproduce, write_report
from generator.run_folder import run_folder_problems
from generator.selection import select
from generator.server import Client

SPACE = load_space()
DEFAULTS = SPACE.defaults()
FAST_STAGES = ["render", "lint", "train", "resume"]
META = {"command": "python -m generator check --pairwise", "device": "cpu", "jobs": 2}


def options(tmp_path: Path, **changes) -> Options:
    return Options(tmp_path / "cache", **changes)


def all_fixed(answers: Answers) -> list[str]:
    """`--set` arguments that select exactly this combination."""
    return [arg for name, value in answers.items() for arg in ("--set", f"{name}={value}")]


# --- launching and notes


def test_one_process_runs_the_module_directly() -> None:
    assert launch.launch_command(DEFAULTS) == [sys.executable, "-m"]


def test_multi_launches_two_processes() -> None:
    multi = DEFAULTS | {"distributed": "multi"}
    command = launch.launch_command(multi)
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert command[-1] == "-m"
    assert command[command.index("--nproc_per_node") + 1] == "2"
    assert "--standalone" in command  # a free port each, so parallel launches never collide


def test_cpu_runs_say_what_they_stand_in_for() -> None:
    fp16_multi = DEFAULTS | {"mixed_precision": "fp16", "distributed": "multi"}
    notes = check.cpu_notes(fp16_multi, "cpu")
    assert "fp16 ran as fp32 on cpu: no GradScaler" in notes
    assert any("gloo" in note for note in notes)
    assert check.cpu_notes(fp16_multi, "cuda") == []
    assert check.cpu_notes(DEFAULTS | {"mixed_precision": "bf16"}, "cpu") == []


def test_cpu_runs_hide_the_gpus_and_share_one_compile_cache(tmp_path: Path) -> None:
    env = launch.project_env(DEFAULTS, options(tmp_path, jobs=2))
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["TORCHINDUCTOR_CACHE_DIR"].startswith(str((tmp_path / "cache").resolve()))
    cuda_env = launch.project_env(DEFAULTS, options(tmp_path, device="cuda"))
    assert cuda_env.get("CUDA_VISIBLE_DEVICES") == os.environ.get("CUDA_VISIBLE_DEVICES")


def test_an_empty_run_folder_lists_everything_missing(tmp_path: Path) -> None:
    problems = run_folder_problems(tmp_path, DEFAULTS, "cpu")
    for name in ("summary.json", "metrics.jsonl", "run.json", "checkpoints/", "model/"):
        assert any(problem.startswith(name) for problem in problems), name


# --- running many: order, folders, report


def test_check_all_keeps_order_starts_the_sample_first_and_keeps_failures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    combos = SPACE.combinations()[:5]
    started: list[str] = []
    lock = threading.Lock()

    def fake(space, answers, folder, opts, *, project_tests, client):
        assert isinstance(client, Client)  # a server per job, started on first use
        folder.mkdir(parents=True)
        with lock:
            started.append(space.slug(answers))
        failing = answers == combos[3]
        stage = Stage("train", "fail" if failing else "pass", 0.1)
        return Result(space.slug(answers), answers, [stage], log_tail="boom" if failing else "")

    monkeypatch.setattr(parallel, "check_combination", fake)
    results = check_all(SPACE, combos, [combos[4]], tmp_path, options(tmp_path, jobs=1))
    assert [r.slug for r in results] == [SPACE.slug(c) for c in combos]
    assert started[0] == SPACE.slug(combos[4])
    assert [p.name for p in tmp_path.iterdir() if p.name != "cache"] == [
        f"0004-{SPACE.slug(combos[3])}"
    ]


def higher_is_better(task: str) -> bool:
    """The direction of the task's metric, as its reference project's task.py says."""
    source = (REFERENCES_DIR / task / "src" / task / "task.py").read_text(encoding="utf-8")
    return re.search(r"^HIGHER_IS_BETTER = (True|False)", source, re.MULTILINE)[1] == "True"


def test_the_rest_sample_runs_the_whole_sweep_tests_where_they_meet_unused_choices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple] = []
    monkeypatch.setattr(commands, "check_all", lambda *args: seen.append(args) or [])
    monkeypatch.setattr(commands, "write_report", lambda *args, **kwargs: None)
    for samples in ("rest", "all"):
        main(["check", "--pairwise", "--project-tests", samples, "--workdir", str(tmp_path)])
    (_, _, rest, _, rest_options, _), (_, _, every, _, every_options, _) = seen
    assert every_options.without_sweep_tests == frozenset()  # --project-tests all: everything
    sweeping = [c for c in rest if SPACE.slug(c) not in rest_options.without_sweep_tests]
    assert 0 < len(sweeping) < len(rest) < len(every)
    # With the reference suites that run them (one process and a metric that goes down,
    # several and one that goes up), the whole-sweep tests meet every choice but the other
    # tasks'.
    sweeping_references = reference_combinations(sweeping_only=True)
    directions = {(c["distributed"], higher_is_better(c["task_type"])) for c in sweeping_references}
    assert directions == {("single", False), ("sharded", True)}  # the loaded project's
    used = {(q, c[q]) for c in [*sweeping, *sweeping_references] for q in c}
    for axis in SPACE.axes:
        if axis.name != "task_type":
            assert {(axis.name, choice) for choice in axis.choices} <= used, axis.name
    # Each suite is run as its combination says: the other stages do nothing here.
    for stage in ("render", "lint", "train", "resume", "export"):
        monkeypatch.setattr(check._Run, stage, lambda self: None)
    commands_run: list[list[str]] = []
    monkeypatch.setattr(check, "run_checked", lambda command, *args: commands_run.append(command))
    monkeypatch.setattr(check, "added_tests", lambda *args: ["tests/test_added.py"])
    without = [c for c in rest if SPACE.slug(c) in rest_options.without_sweep_tests]
    for answers, options in ((sweeping[0], rest_options), (without[0], rest_options)):
        check_combination(SPACE, answers, tmp_path, options, project_tests=True)
    check_combination(SPACE, sweeping[0], tmp_path, every_options, project_tests=True)
    # The reference suites run every sweep test; the rest's sweeping suites the shared one.
    assert commands_run[0][-2:] == ["-m", "not sweep or shared_study"]
    assert commands_run[1][-3:] == ["-m", "not sweep", "tests/test_added.py"]
    assert "sweep" not in " ".join(commands_run[2])  # --project-tests all: every test


def test_the_rest_samples_pairs_run_only_the_tests_their_answers_add(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of the rest sample, the suites beyond the whole ones run the test files their answers
    add to their task's default project: sharding's, or fp16's."""
    seen: list[tuple] = []
    monkeypatch.setattr(commands, "check_all", lambda *args: seen.append(args) or [])
    monkeypatch.setattr(commands, "write_report", lambda *args, **kwargs: None)
    main(["check", "--pairwise", "--project-tests", "rest", "--workdir", str(tmp_path)])
    ((_, _, rest, _, rest_options, _),) = seen
    pairs = [c for c in rest if SPACE.slug(c) in rest_options.added_tests_only]
    assert 0 < len(pairs) < len(rest)
    # The pytest command of one: the project renders; the other stages do nothing here.
    for stage in ("lint", "train", "resume", "export"):
        monkeypatch.setattr(check._Run, stage, lambda self: None)
    commands_run: list[list[str]] = []
    monkeypatch.setattr(check, "run_checked", lambda command, *args: commands_run.append(command))
    for distributed, precision, added in [
        ("sharded", "no", ["test_distributed.py", "test_sharding.py", "test_slurm.py"]),
        ("single", "fp16", ["test_fp16.py"]),
    ]:
        pair = next(
            c for c in pairs if (c["distributed"], c["mixed_precision"]) == (distributed, precision)
        )
        folder = tmp_path / distributed
        result = check_combination(SPACE, pair, folder, rest_options, project_tests=True)
        assert result.ok, result.log_tail
        added = [f"tests/{name}" for name in added]
        assert commands_run[-1] == [*commands_run[-1][: -len(added)], *added]
        assert commands_run[-1][-len(added) - 2 : -len(added)] == ["-m", "not sweep"]
    # A combination that adds no test file to its task's default fails: it would run nothing.
    default = SPACE.defaults()
    options = Options(tmp_path / "cache", added_tests_only=frozenset([SPACE.slug(default)]))
    result = check_combination(SPACE, default, tmp_path / "default", options, project_tests=True)
    assert not result.ok and result.stages[-1].name == "tests"
    assert "add no test file" in result.log_tail and len(commands_run) == 2


def test_the_rest_sweep_suites_marker_selects_the_shared_study_test_alone() -> None:
    """The expression check passes (see the test above) meets the markers the template
    declares: of a rendered suite's sweep tests, only the shared-study one is collected."""
    project = REFERENCES_DIR / "image_classification_loaded"
    source = (project / "tests" / "test_sweep.py").read_text(encoding="utf-8")
    sweeping = re.findall(r"@pytest\.mark\.sweep\n(?:@pytest\.mark\.\w+\n)*def (\w+)", source)
    assert len(sweeping) >= 3, sweeping
    command = [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider"]
    command += ["-m", "not sweep or shared_study", "tests/test_sweep.py"]
    env = {**os.environ, "PYTHONPATH": str(project / "src")}
    output = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    collected = {
        line.split("::")[1].split("[")[0] for line in output.stdout.splitlines() if "::" in line
    }
    assert collected, output.stdout + output.stderr
    assert [name for name in sweeping if name in collected] == [
        "test_two_workers_share_a_study_and_every_trial_is_a_run"
    ]


def test_reproduce_selects_exactly_that_combination() -> None:
    answers = SPACE.combinations()[-1]
    command = shlex.split(reproduce(answers, "cpu"))
    sets = [command[i + 1] for i, arg in enumerate(command) if arg == "--set"]
    assert SPACE.parse_sets(sets) == answers
    assert command[:5] == ["python", "-m", "generator", "check", "--device"]


def test_report_has_a_row_per_combination_and_each_failure_in_full(tmp_path: Path) -> None:
    passed = Result("a-pass", DEFAULTS, [Stage("render", "pass", 1.0)], ["a note"])
    failed = Result(
        "b-fail", DEFAULTS, [Stage("render", "pass", 1), Stage("lint", "fail", 2)], [], "ruff!"
    )
    markdown = write_report(tmp_path / "report", [passed, failed], META | {"wall_s": 75})
    text = markdown.read_text(encoding="utf-8")
    assert "| `a-pass` | pass |  | 1.0 | render | a note |" in text
    assert "| `b-fail` | **FAIL** | lint | 3.0 | render lint |  |" in text
    assert "1 min 15 s" in text
    assert "## `b-fail`: lint failed" in text and "ruff!" in text
    report = json.loads((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))
    assert (report["passed"], report["failed"]) == (1, 1)
    row = report["results"][1]
    assert row["failed_stage"] == "lint" and row["log_tail"] == "ruff!"
    assert row["stages"] == [
        {"name": "render", "status": "pass", "seconds": 1, "cpu_s": 0.0},
        {"name": "lint", "status": "fail", "seconds": 2, "cpu_s": 0.0},
    ]
    assert as_markdown([passed], META | {"wall_s": 5}).count("\n## ") == 0


# --- real renders: the stages fail where the project is broken


def test_lint_fails_on_a_render_with_trailing_whitespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_render = check.render

    def sloppy_render(answers, dest):
        project = real_render(answers, dest)
        with (project / "README.md").open("a", encoding="utf-8") as readme:
            readme.write("trailing  \n")
        return project

    monkeypatch.setattr(check, "render", sloppy_render)
    result = check_combination(
        SPACE, DEFAULTS, tmp_path / "c", options(tmp_path), project_tests=False
    )
    assert [s.name for s in result.stages] == ["render", "lint"]
    assert result.failed_stage == "lint" and "trailing whitespace" in result.log_tail


def test_a_launch_that_fails_fails_the_train_stage_with_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = [sys.executable, "-c", "import sys; print('no rendezvous'); sys.exit(3)"]
    monkeypatch.setattr(check, "launch_command", lambda answers: failing)
    report = tmp_path / "report"
    plain = ["--no-server", "--project-tests", "none"]  # the server does not use the launcher
    code = main(["check", *all_fixed(DEFAULTS), *plain, "--report", str(report)])
    assert code == 1
    written = json.loads((report / "report.json").read_text(encoding="utf-8"))
    assert written["commit"] == template_commit()
    assert written["trees"] == template_trees()  # so that shards of one template merge
    assert {"cpu", "cores", "memory_gb", "python", "torch"} <= written["machine"].keys()
    assert written["started"] <= written["finished"]
    row = written["results"][0]
    assert row["failed_stage"] == "train"
    assert "exited 3" in row["log_tail"] and "no rendezvous" in row["log_tail"]
    assert "**FAIL**" in (report / "report.md").read_text(encoding="utf-8")


EXPORTING = DEFAULTS | {"task_type": "tabular_regression", "export_target": "torchscript"}


@pytest.fixture(scope="module")
def server() -> Iterator[Client]:
    """One process server for the checks below that run the project's own commands."""
    with Client() as client:
        yield client


@pytest.fixture(scope="module")
def exporting_check(tmp_path_factory: pytest.TempPathFactory, server: Client) -> tuple:
    """A combination with an export target, checked through every stage, as one of the
    combinations that train with a moving average of the weights."""
    folder = tmp_path_factory.mktemp("exporting") / "c"
    options = Options(folder.parent / "cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(check, "averages_weights", lambda slug: True)
        result = check_combination(
            SPACE, EXPORTING, folder, options, project_tests=False, client=server
        )
    return result, folder / "out" / "fast-dev-run"


@pytest.mark.slow
def test_a_combination_passes_every_stage(exporting_check: tuple) -> None:
    result, run = exporting_check
    assert result.ok, result.log_tail
    assert [s.name for s in result.stages] == [*FAST_STAGES, "export"]
    # Each stage's CPU: the forked runs' (train: a process that trains, where the thread
    # only waits) and the thread's own.
    cpu_s = {stage.name: stage.cpu_s for stage in result.stages}
    assert cpu_s["train"] > 0.2 and all(seconds > 0 for seconds in cpu_s.values()), cpu_s
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert summary["steps"] == 4 + 2  # the fast dev run's, then the resume's
    # Both runs averaged the weights (the resume refuses another ema_decay than its checkpoint's).
    assert "ema_decay: 0.9" in (run / "config.yaml").read_text(encoding="utf-8")
    assert "trained with --ema_decay 0.9" in result.notes


def test_half_the_combinations_average_the_weights_and_every_choice_both_ways() -> None:
    _, every = select(SPACE)
    averaged = [check.averages_weights(SPACE.slug(answers)) for answers in every]
    assert 0.4 < sum(averaged) / len(every) < 0.6
    _, pairwise = select(SPACE, pairwise_only=True)
    for axis in SPACE.axes:
        for choice in axis.choices:
            with_choice = [SPACE.slug(a) for a in pairwise if a[axis.name] == choice]
            ways = {check.averages_weights(slug) for slug in with_choice}
            assert ways == {True, False}, f"{axis.name}={choice} of the pairwise set: {ways}"


# Runs `python -m MODULE ARGS` adding `--resume none` to the resume stage's run (the one that
# passes --max_steps), as a trainer that ignored its checkpoints would behave.
RESTARTING = """\
import runpy, sys
module, args = sys.argv[1], sys.argv[2:]
sys.argv = [module, *args, *(["--resume", "none"] if "--max_steps" in args else [])]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_a_run_that_starts_over_fails_the_resume_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrapper = tmp_path / "restarting.py"
    wrapper.write_text(RESTARTING, encoding="utf-8")
    monkeypatch.setattr(check, "launch_command", lambda answers: [sys.executable, str(wrapper)])
    result = check_combination(
        SPACE, DEFAULTS, tmp_path / "c", options(tmp_path), project_tests=False
    )
    assert result.failed_stage == "resume", result.log_tail
    assert "did not resume" in result.log_tail


# Runs `python -m MODULE ARGS`, then leaves a file in the fast dev run's --output_dir, as a
# fast dev run that wrote beside its own folder would.
STRAY = """\
import pathlib, runpy, sys
module, args = sys.argv[1], sys.argv[2:]
sys.argv = [module, *args]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
finally:
    if "--fast_dev_run" in args:
        pathlib.Path(args[args.index("--output_dir") + 1], "config.yaml").write_text("")
"""


@pytest.mark.slow
def test_a_fast_dev_run_that_writes_beside_its_folder_fails_the_train_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrapper = tmp_path / "stray.py"
    wrapper.write_text(STRAY, encoding="utf-8")
    monkeypatch.setattr(check, "launch_command", lambda answers: [sys.executable, str(wrapper)])
    result = check_combination(
        SPACE, DEFAULTS, tmp_path / "c", options(tmp_path), project_tests=False
    )
    assert result.failed_stage == "train", result.log_tail
    assert "wrote ['config.yaml'] outside fast-dev-run/" in result.log_tail


@pytest.mark.slow
def test_an_export_is_checked_after_the_run_and_from_the_best_checkpoint(
    exporting_check: tuple,
) -> None:
    result, run = exporting_check
    assert result.ok, result.log_tail
    meta = json.loads((run / "export" / "model.json").read_text("utf-8"))
    best = (run / "checkpoints" / "best").read_text("utf-8").strip()
    assert Path(meta["checkpoint"]).name == best and meta["verified"]


@pytest.mark.slow
def test_an_export_command_that_fails_fails_the_export_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: Client
) -> None:
    monkeypatch.setattr(check, "BEST", ("--checkpoint", str(tmp_path / "missing.pt")))
    result = check_combination(
        SPACE, EXPORTING, tmp_path / "c", options(tmp_path), project_tests=False, client=server
    )
    assert result.failed_stage == "export", result.log_tail
    assert "missing.pt" in result.log_tail
