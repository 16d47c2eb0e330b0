"""Check combinations end to end: render, lint, train, resume, export and test each one.

Each combination gets its own folder and goes through these stages, stopping at the first
that fails:

    render   copier renders it into a fresh folder
    lint     generator.checks: ruff format --check, ruff check, byte-compile, leftovers
    train    the project's fast dev run in a new process (a few steps of train, evaluation and
             checkpoint; export and verify when an export_target is chosen), then its run
             folder (output_dir/fast-dev-run, and nothing else in output_dir) is checked
             against the run contract
    resume   a second process trains the fast dev run's folder `steps` more: it must pick up
             the newest checkpoint from disk and keep the first run's metrics as they were
    export   (export_target != none) the resumed run's export names its final checkpoint and
             was verified against PyTorch; `python -m <package>.export --checkpoint best`
             exports and verifies the best one
    tests    (a sample of the combinations) the project's own test suite

Every combination shares one Python environment (this interpreter) and one compile cache;
nothing else: renders and runs never see each other's files.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator.answers import Answer, Answers, AnswerSpace
from generator.checks import static_problems
from generator.render import package_of, render
from generator.server import Client, ServerDied, describe

# Generous, so a hang fails its stage instead of stalling the matrix; never a speed check.
TIMEOUT_S = 1800
TAIL_LINES = 60
FAST_DEV_RUN_DIR = "fast-dev-run"  # where a project's fast dev run writes, under output_dir
BEST = ("--checkpoint", "best")  # the export command's, as the rendered README shows it
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
# Only one render at a time: copier's API is not documented as thread-safe, and a render
# takes a fraction of a second against the tens of seconds a combination trains.
_RENDER_LOCK = threading.Lock()


class StageFailure(Exception):
    """A stage found a problem; the message is what a reader needs to see (a log tail)."""


@dataclass(frozen=True)
class Options:
    cache_dir: Path  # torch.compile's caches, shared by every run of the check
    device: str = "cpu"  # cpu | cuda
    steps: int = 2  # optimizer steps the resume stage adds to the fast dev run's
    jobs: int = 1  # combinations checked at once
    server: bool = True  # fork the stages' processes from a process server (generator.server)


@dataclass
class Stage:
    name: str
    status: str  # pass | fail
    seconds: float


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


def processes(answers: Mapping[str, Answer]) -> int:
    """How many processes a combination's runs launch."""
    return 2 if answers.get("distributed") == "multi" else 1


def launch_command(answers: Mapping[str, Answer]) -> list[str]:
    """The command that runs `-m MODULE ...` of a rendered project: the one place to adjust.

    `distributed=multi` starts two processes with torchrun, as the project's `make
    dev-run-2cpu` does (its accelerate config names torchrun as the equivalent on GPUs); on a
    CPU the processes, given `--cpu true`, talk over gloo. `--standalone` finds a free port,
    so combinations checked at the same time never share a rendezvous. (`accelerate launch
    --cpu --num_processes 2` would start a single process.)
    """
    if processes(answers) == 1:
        return [sys.executable, "-m"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    return [*torchrun, "--nproc_per_node", str(processes(answers)), "-m"]


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
    for name, stage in stages:
        start, failure = time.perf_counter(), None
        try:
            stage()
        except StageFailure as error:
            failure = str(error)
        except ServerDied:
            raise  # twice: the check stops (cli says so in one line)
        except Exception:  # a bug or an unexpected error fails this combination, not the check
            failure = traceback.format_exc()
        status = "pass" if failure is None else "fail"
        result.stages.append(Stage(name, status, round(time.perf_counter() - start, 2)))
        if failure is not None:
            result.log_tail = tail(failure) or "(no output)"
            break
    return result


def check_all(
    space: AnswerSpace,
    combinations: Sequence[Answers],
    sample: Sequence[Answers],
    workdir: Path,
    options: Options,
    on_result: Callable[[int, Result], None] = lambda done, result: None,
) -> list[Result]:
    """Check `combinations`, `options.jobs` at a time; results in the order given.

    The sample (those that also run their own tests, the slowest) start first, so no long
    one is left running alone at the end. A combination's folder is removed when it passes
    and kept for inspection when it fails; the compile cache in `workdir` stays.
    """
    results: dict[int, Result] = {}
    clients: queue.SimpleQueue[Client | None] = queue.SimpleQueue()
    servers = [Client() for _ in range(options.jobs)] if options.server else []
    for client in servers or [None] * options.jobs:
        clients.put(client)

    def check(index: int) -> tuple[int, Result]:
        answers = combinations[index]
        folder = workdir / f"{index + 1:04d}-{space.slug(answers)}"
        shutil.rmtree(folder, ignore_errors=True)  # a failure kept from an earlier check
        client = clients.get()  # a server of its own while it runs
        try:
            tested = answers in sample
            result = check_combination(
                space, answers, folder, options, project_tests=tested, client=client
            )
        finally:
            clients.put(client)
        if result.ok:
            shutil.rmtree(folder, ignore_errors=True)
        return index, result

    order = sorted(range(len(combinations)), key=lambda i: combinations[i] not in sample)
    pool = ThreadPoolExecutor(max_workers=options.jobs)
    try:
        futures = [pool.submit(check, index) for index in order]
        for done, future in enumerate(as_completed(futures), start=1):
            index, result = future.result()
            results[index] = result
            on_result(done, result)
    finally:
        # On Ctrl-C, start nothing more; the running processes got the signal too.
        pool.shutdown(cancel_futures=True)
        for client in servers:
            client.close()
    return [results[index] for index in range(len(combinations))]


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def visible_gpus() -> int:
    """CUDA devices torch sees in a fresh process of this environment."""
    command = [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    return int(result.stdout.strip() or 0) if result.returncode == 0 else 0


class _Run:
    """One combination's folder: `project/` (the render) and `out/` (the run directory)."""

    def __init__(self, answers: Answers, folder: Path, options: Options, client: Client | None):
        self.answers, self.options, self.client = answers, options, client
        self.logs = 0  # the stages' logs so far, under folder/
        self.project, self.outputs = folder / "project", folder / "out"
        self.out = self.outputs / FAST_DEV_RUN_DIR  # the fast dev run's, resumed and exported
        self.first_steps = 0  # steps the fast dev run trained
        self.first_metrics = ""  # its metrics.jsonl, which the resume must keep

    def render(self) -> None:
        with _RENDER_LOCK:
            render(self.answers, self.project)

    def lint(self) -> None:
        problems = static_problems(self.project, self.answers)
        if problems:
            raise StageFailure("\n".join(problems))

    def train(self) -> None:
        output = self._run_module("train", "--fast_dev_run", "true", output_dir=self.outputs)
        problems = run_folder_problems(self.out, self.answers, self.options.device)
        others = sorted(p.name for p in self.outputs.glob("*") if p != self.out)
        if others:
            problems.append(f"the fast dev run wrote {others} outside {FAST_DEV_RUN_DIR}/")
        if problems:
            raise StageFailure("\n".join([output, *problems]))
        self.first_steps = _summary(self.out)["steps"]
        self.first_metrics = (self.out / "metrics.jsonl").read_text(encoding="utf-8")

    def resume(self) -> None:
        target = self.first_steps + self.options.steps
        output = self._run_module("train", "--max_steps", str(target))
        problems = []
        steps = _summary(self.out)["steps"]
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
        self._run([sys.executable, "-m", *pytest])

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
            return self._run([*launch, module, *args])
        return self._forked(shlex.join(["python", *launch[1:], module, *args]), module, args, count)

    def _forked(self, shown: str, module: str, args: Sequence[str], count: int) -> str:
        """The server's run of a stage: the output and failures read as _run's do."""
        self.logs += 1
        log = self.project.parent / f"stage-{self.logs}.log"
        env = project_env(self.answers, self.options)
        try:
            codes = self.client.run(
                module,
                args,
                cwd=self.project,
                env=env,
                log=log,
                processes=count,
                timeout_s=TIMEOUT_S,
            )
        except TimeoutError:
            codes = None
        output = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        if codes is None:
            raise StageFailure(f"$ {shown}\ntimed out after {TIMEOUT_S} s\n{output}")
        failed = [(rank, code) for rank, code in enumerate(codes) if code != 0]
        if failed:
            said = ", ".join(f"rank {rank} {describe(code)}" for rank, code in failed)
            said = said.removeprefix("rank 0 ") if count == 1 else said
            raise StageFailure(f"$ {shown}\n{said}\n{output}")
        return f"$ {shown}\n{output}"

    def _run(self, command: list[str]) -> str:
        """Run in the project folder; StageFailure with the command and output tail on error."""
        shown = shlex.join(["python", *command[1:]])
        try:
            result = subprocess.run(
                command,
                cwd=self.project,
                env=project_env(self.answers, self.options),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as expired:
            output = expired.output or ""
            output = output.decode(errors="replace") if isinstance(output, bytes) else output
            raise StageFailure(f"$ {shown}\ntimed out after {TIMEOUT_S} s\n{output}") from None
        if result.returncode != 0:
            raise StageFailure(f"$ {shown}\nexited {result.returncode}\n{result.stdout}")
        return f"$ {shown}\n{result.stdout}"


def project_env(answers: Mapping[str, Answer], options: Options) -> dict[str, str]:
    """The environment of a rendered project's processes.

    The cores are split between the combinations running at once (torch uses every core by
    default, and two runs each using both only slow each other down). One compile cache for
    every run, so a graph another combination compiled is loaded instead of rebuilt.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = (cores or 1) // (options.jobs * processes(answers))
    env["OMP_NUM_THREADS"] = str(max(1, threads))
    env["PYTHONPATH"] = "src"
    env["TORCHINDUCTOR_CACHE_DIR"] = str(options.cache_dir.resolve() / "inductor")
    env["TRITON_CACHE_DIR"] = str(options.cache_dir.resolve() / "triton")
    if options.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # the project's own tests, too, stay on the CPU
    return env


def run_folder_problems(out: Path, answers: Mapping[str, Answer], device: str) -> list[str]:
    """What the run contract (DESIGN.md) promises in output_dir and this run did not write."""
    problems = [f"{name}: missing" for name in RUN_FOLDER if not (out / name).is_file()]
    for folder in ("checkpoints", "model"):
        if not (out / folder).is_dir() or not any((out / folder).iterdir()):
            problems.append(f"{folder}/: missing or empty")
    if problems:
        return problems
    lacking = sorted(set(SUMMARY_FIELDS) - set(_summary(out)))
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


def _summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))
