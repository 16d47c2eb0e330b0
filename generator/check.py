"""Check combinations end to end: render, lint, train, resume, export and test each one.

Each combination gets its own folder and goes through these stages, stopping at the first
that fails:

    render   copier renders it into a fresh folder
    lint     generator.checks: ruff format --check, ruff check, byte-compile, leftovers
    train    the project's fast dev run in a new process (a few steps of train, evaluation and
             checkpoint; export and verify when an export_target is chosen), then its run
             folder (output_dir/fast-dev-run, and nothing else in output_dir) is checked
             against the run contract; half the combinations train with a moving average
             of the weights (AVERAGED), so it is trained, resumed and exported with every
             answer
    resume   a second process trains the fast dev run's folder `steps` more: it must pick up
             the newest checkpoint from disk and keep the first run's metrics as they were
    export   (export_target != none) the resumed run's export names its final checkpoint and
             was verified against PyTorch; `python -m <package>.export --checkpoint best`
             exports and verifies the best one
    tests    (a sample of the combinations) the project's own test suite; where
             Options.added_tests_only names it, only the test files its answers add to its
             task's default project (added_tests)

Every combination shares one Python environment (this interpreter) and one compile cache;
nothing else: renders and runs never see each other's files. The stages start the project's
processes through generator.launch; generator.parallel checks many combinations at once.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from generator.answers import Answer, Answers, AnswerSpace
from generator.checks import static_problems
from generator.cpu import thread_cpu_s
from generator.launch import (
    Options,
    ProcessFailure,
    launch_command,
    processes,
    project_env,
    run_checked,
    run_forked,
    tail,
)
from generator.render import package_of, render
from generator.run_folder import FAST_DEV_RUN_DIR, run_folder_problems, summary
from generator.server import Client, ServerDied

BEST = ("--checkpoint", "best")  # the export command's, as the rendered README shows it
AVERAGED = ("--ema_decay", "0.9")  # the train and resume stages' of averaged combinations
# Only one render at a time: copier's API is not documented as thread-safe, and a render
# takes a fraction of a second against the tens of seconds a combination trains.
_RENDER_LOCK = threading.Lock()


class StageFailure(Exception):
    """A stage found a problem; the message is what a reader needs to see (a log tail)."""


@dataclass
class Stage:
    name: str
    status: str  # pass | fail
    seconds: float  # wall time
    cpu_s: float = 0.0  # CPU time: its thread's and its processes' (generator.cpu)


@dataclass
class Result:
    slug: str
    answers: Answers
    stages: list[Stage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    log_tail: str = ""

    @property
    def ok(self) -> bool:
        return all(stage.status == "pass" for stage in self.stages)

    @property
    def failed_stage(self) -> str | None:
        return next((s.name for s in self.stages if s.status != "pass"), None)

    @property
    def seconds(self) -> float:
        return sum(stage.seconds for stage in self.stages)


def averages_weights(slug: str) -> bool:
    """Whether a combination's runs keep a moving average of the weights: half of them, by a
    hash of the slug, the same in every check."""
    return zlib.crc32(slug.encode()) % 2 == 1


def cpu_notes(answers: Mapping[str, Answer], device: str) -> list[str]:
    """What a CPU run does instead of what the combination does on a GPU."""
    if device != "cpu":
        return []
    notes = []
    if answers.get("mixed_precision") == "fp16":
        notes.append("fp16 ran as fp32 on cpu: no GradScaler")
    if processes(answers) > 1:
        notes.append(f"{processes(answers)} processes on cpu talk over gloo, not NCCL")
    return notes


def check_combination(
    space: AnswerSpace,
    answers: Answers,
    folder: Path,
    options: Options,
    *,
    project_tests: bool,
    client: Client | None = None,
) -> Result:
    """Run every stage that applies to `answers` inside `folder`; never raises for a failure.

    With a `client`, the stages that run project code fork their processes from its server;
    without one they start as plain subprocesses.
    """
    run = _Run(answers, folder, options, client)
    stages: list[tuple[str, Callable[[], None]]] = [
        ("render", run.render),
        ("lint", run.lint),
        ("train", run.train),
        ("resume", run.resume),
    ]
    if answers.get("export_target", "none") != "none":
        stages.append(("export", run.export))
    if project_tests:
        stages.append(("tests", run.project_tests))

    result = Result(space.slug(answers), answers, notes=cpu_notes(answers, options.device))
    if averages_weights(result.slug):
        run.fields = AVERAGED
        result.notes.append(f"trained with {' '.join(AVERAGED)}")
    run.sweep_tests = result.slug not in options.without_sweep_tests
    run.added_tests_only = result.slug in options.added_tests_only
    for name, stage in stages:
        start, cpu_start, failure = time.perf_counter(), run.cpu_s(), None
        try:
            stage()
        except (StageFailure, ProcessFailure) as error:
            failure = str(error)
        except ServerDied:
            raise  # twice: the check stops (cli says so in one line)
        except Exception:  # a bug or an unexpected error fails this combination, not the check
            failure = traceback.format_exc()
        status = "pass" if failure is None else "fail"
        seconds, cpu_s = time.perf_counter() - start, run.cpu_s() - cpu_start
        result.stages.append(Stage(name, status, round(seconds, 2), round(cpu_s, 2)))
        if failure is not None:
            result.log_tail = tail(failure) or "(no output)"
            break
    return result


def added_tests(answers: Mapping[str, Answer], project: Path, scratch: Path) -> list[str]:
    """The test files of `project` (rendered from `answers`) that its task's default project
    lacks, rendered into `scratch` to compare: the tests of what its other answers add, such
    as several processes' and fp16's. StageFailure when there are none, so that a suite
    which would run nothing never passes."""
    with _RENDER_LOCK:
        render({"task_type": answers["task_type"]}, scratch)
    default = {path.name for path in (scratch / "tests").glob("test_*.py")}
    added = [
        path for path in sorted((project / "tests").glob("test_*.py")) if path.name not in default
    ]
    if not added:
        raise StageFailure(f"its answers add no test file to the {answers['task_type']} default's")
    return [str(path.relative_to(project)) for path in added]


class _Run:
    """One combination's folder: `project/` (the render) and `out/` (the run directory)."""

    def __init__(self, answers: Answers, folder: Path, options: Options, client: Client | None):
        self.answers, self.options, self.client = answers, options, client
        self.logs = 0  # the stages' logs so far, under folder/
        self.project, self.outputs = folder / "project", folder / "out"
        self.out = self.outputs / FAST_DEV_RUN_DIR  # the fast dev run's, resumed and exported
        self.fields: tuple[str, ...] = ()  # what the train and resume stages add
        self.first_steps = 0  # steps the fast dev run trained
        self.first_metrics = ""  # its metrics.jsonl, which the resume must keep
        self.sweep_tests = True  # whether its own suite runs the whole-sweep tests
        self.added_tests_only = False  # whether it runs only the tests its answers add

    def cpu_s(self) -> float:
        """CPU seconds used so far by this thread and the processes it ran, forked ones too."""
        forked = self.client.children_cpu_s if self.client else 0.0
        return thread_cpu_s() + forked

    def render(self) -> None:
        with _RENDER_LOCK:
            render(self.answers, self.project)

    def lint(self) -> None:
        problems = static_problems(self.project, self.answers)
        if problems:
            raise StageFailure("\n".join(problems))

    def train(self) -> None:
        fields = ("--fast_dev_run", "true", *self.fields)
        output = self._run_module("train", *fields, output_dir=self.outputs)
        problems = run_folder_problems(self.out, self.answers, self.options.device)
        others = sorted(p.name for p in self.outputs.glob("*") if p != self.out)
        if others:
            problems.append(f"the fast dev run wrote {others} outside {FAST_DEV_RUN_DIR}/")
        if problems:
            raise StageFailure("\n".join([output, *problems]))
        self.first_steps = summary(self.out)["steps"]
        self.first_metrics = (self.out / "metrics.jsonl").read_text(encoding="utf-8")

    def resume(self) -> None:
        target = self.first_steps + self.options.steps
        output = self._run_module("train", "--max_steps", str(target), *self.fields)
        problems = []
        steps = summary(self.out)["steps"]
        if steps != target:
            problems.append(f"summary.json: {steps} steps, expected {target}")
        metrics = (self.out / "metrics.jsonl").read_text(encoding="utf-8")
        if not metrics.startswith(self.first_metrics):
            # A run that started over would have rewritten the first run's lines.
            problems.append("metrics.jsonl: the first run's lines changed; it did not resume")
        if problems:
            raise StageFailure("\n".join([output, *problems]))

    def export(self) -> None:
        meta_path = self.out / "export" / "model.json"
        if not meta_path.is_file():
            raise StageFailure(f"{meta_path}: missing, the runs exported nothing")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        latest = (self.out / "checkpoints" / "latest").read_text(encoding="utf-8").strip()
        problems = []
        if meta.get("format") != self.answers["export_target"]:
            problems.append(f"format is {meta.get('format')!r}")
        if not (self.out / "export" / str(meta.get("file"))).is_file():
            problems.append(f"the artifact {meta.get('file')!r} is missing")
        if not meta.get("verified"):
            problems.append("it was not verified against PyTorch")
        if Path(str(meta.get("checkpoint"))).name != latest:
            problems.append(f"it exported {meta.get('checkpoint')}, not the final {latest}")
        if problems:
            raise StageFailure(f"{meta_path}: " + "; ".join(problems))
        # The command a user runs later, from another checkpoint than the run's last.
        output = self._run_module("export", *BEST, count=1)
        best = (self.out / "checkpoints" / "best").read_text(encoding="utf-8").strip()
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if "agrees with PyTorch" not in output or Path(str(meta.get("checkpoint"))).name != best:
            raise StageFailure(f"{output}\n{meta_path}: not the verified export of {best}")

    def project_tests(self) -> None:
        # Only the failure and the summary: captured logs and the warnings summary would push
        # it out of the log tail (the folder is kept, to rerun the failing test in full).
        quiet = ["--tb=short", "--show-capture=no", "--disable-warnings"]
        pytest = ["pytest", "-q", "-x", "-p", "no:cacheprovider", *quiet]
        if not self.sweep_tests:
            pytest += ["-m", "not sweep"]
        elif not self.options.every_sweep_test:
            pytest += ["-m", "not sweep or shared_study"]
        if self.added_tests_only:
            pytest += added_tests(self.answers, self.project, self.project.parent / "task-default")
        run_checked([sys.executable, "-m", *pytest], self.project, self._env())

    def _run_module(
        self, module: str, *args: str, count: int | None = None, output_dir: Path | None = None
    ) -> str:
        """`python -m <package>.<module> --output_dir OUT ...` (the run folder, unless given)
        with the launcher (the answers' processes, unless given), or forked by the process
        server; `--cpu true` for training on a CPU."""
        launch = launch_command(self.answers) if count is None else [sys.executable, "-m"]
        count = count or processes(self.answers)
        if module == "train" and self.options.device == "cpu":
            args = (*args, "--cpu", "true")
        module = f"{package_of(self.project)}.{module}"
        args = ("--output_dir", str(output_dir or self.out), *args)
        if self.client is None:
            return run_checked([*launch, module, *args], self.project, self._env())
        self.logs += 1
        log = self.project.parent / f"stage-{self.logs}.log"
        env = self._env()
        return run_forked(
            self.client, launch, module, args, cwd=self.project, env=env, log=log, count=count
        )

    def _env(self) -> dict[str, str]:
        return project_env(self.answers, self.options)
