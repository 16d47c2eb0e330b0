"""Reference projects: the rendered fleet as worked examples, with results, kept in sync.

`reference_projects/` holds one project per task type with default answers, named after its
task, and one with every option on (several processes, bf16, torch.compile, ONNX export and a
tracker). Each is generated output, never edited by hand:

    sync    render each reference project, train it with its default run on the CPU and write
            its results (RESULTS.md, results/results.json, results/curves.png) and the index
            reference_projects/README.md
    check   render each again into a temporary folder and compare every file with the
            committed one (missing, extra and differing files); the results are exempt, as
            they change from machine to machine, but must be there
    test    run each committed reference project's own tests

Two lines of a rendered `.copier-answers.yml` depend on where and when it was rendered; both
get a fixed value, in `sync` and in `check` alike, so the comparison covers the whole file:
`_src_path` becomes `../..`, this repository seen from reference_projects/<name> (so `copier
update` run inside a reference project reaches it), and `_commit` becomes `HEAD`: the commit
that holds the file, which `check` in CI proves was rendered from the template at that commit.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from generator import REPO_ROOT
from generator.answers import Answer, Answers, AnswerSpace, load_space
from generator.check import TIMEOUT_S, Options, launch_command, processes, project_env, tail
from generator.render import ANSWERS_FILE, package_of, render

REFERENCES_DIR = REPO_ROOT / "reference_projects"
INDEX = "README.md"
SRC_PATH = "../.."  # this repository, seen from reference_projects/<name>
COMMIT = "HEAD"
RESULTS_MD = "RESULTS.md"
RESULTS_DIR = "results"  # results.json and curves.png: the run's record, exempt from `check`
RESULTS_JSON = f"{RESULTS_DIR}/results.json"
CURVES_PNG = f"{RESULTS_DIR}/curves.png"
# The fully loaded project: the task's defaults with every option on. Read against copier.yml,
# so a renamed or removed choice fails here, loudly, instead of silently dropping out.
LOADED_TASK = "image_classification"
LOADED = {
    "distributed": "multi",
    "mixed_precision": "bf16",
    "compile": "true",
    "export_target": "onnx",
    "tracker": "tensorboard",
}
RUN_OUTPUT = "outputs/reference"  # the output_dir the shown command names
LIBRARIES = ("python", "torch", "accelerate", "numpy")


@dataclass(frozen=True)
class Reference:
    """One reference project: its folder under reference_projects/ and its answers."""

    name: str  # the folder, and the project's package name
    answers: Answers  # what it answers besides the defaults, project_name included

    @property
    def project_name(self) -> str:
        return str(self.answers["project_name"])


def references(space: AnswerSpace | None = None) -> list[Reference]:
    """Every reference project: one per task type of copier.yml, then the loaded one."""
    space = space or load_space()
    tasks = next(axis for axis in space.axes if axis.name == "task_type").choices
    names = [(str(task), {"task_type": task}) for task in tasks]
    loaded = space.parse_sets(f"{name}={value}" for name, value in LOADED.items())
    names.append((f"{LOADED_TASK}_loaded", {"task_type": LOADED_TASK} | loaded))
    return [
        Reference(name, {"project_name": name.replace("_", "-")} | answers)
        for name, answers in names
    ]


def reference_combinations(space: AnswerSpace | None = None) -> list[Answers]:
    """The combination of choices each reference project renders, defaults included: what
    the reference projects' own tests exercise."""
    space = space or load_space()
    questions = {axis.name for axis in space.axes}
    return [
        {
            name: value
            for name, value in (space.defaults() | ref.answers).items()
            if name in questions
        }
        for ref in references(space)
    ]


def select(names: Sequence[str] | None, space: AnswerSpace | None = None) -> list[Reference]:
    """The references `names` picks (all when empty); ValueError naming the valid names."""
    every = references(space)
    if not names:
        return every
    by_name = {ref.name: ref for ref in every}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise ValueError(
            f"no reference project named {', '.join(map(repr, unknown))}; "
            f"choose from: {', '.join(by_name)}"
        )
    return [ref for ref in every if ref.name in names]


# --- rendering


def render_reference(ref: Reference, dest: Path) -> Path:
    """Render `ref` into `dest` and fix the answers-file lines that depend on the render."""
    render(ref.answers, dest)
    path = dest / ANSWERS_FILE
    text = path.read_text(encoding="utf-8")
    for key, value in (("_commit", COMMIT), ("_src_path", SRC_PATH)):
        text, count = re.subn(rf"^{key}: .*$", f"{key}: {value}", text, flags=re.MULTILINE)
        if count != 1:
            raise ValueError(f"{path}: expected one {key} line, found {count}")
    path.write_text(text, encoding="utf-8")
    return dest


def ignore_patterns(project: Path) -> list[str]:
    """The rendered project's .gitignore patterns (caches, outputs/): never compared or copied.

    Only the forms the template writes are understood: names and globs without a slash
    inside, matched against every component of a path.
    """
    path = project / ".gitignore"
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return [line.strip().rstrip("/") for line in lines if line.strip() and line[0] != "#"]


def project_files(project: Path, patterns: Sequence[str]) -> set[str]:
    """Paths of the files in `project`, relative and with '/', less those `patterns` ignore."""
    files = set()
    for path in project.rglob("*"):
        relative = path.relative_to(project)
        if any(fnmatch.fnmatch(part, p) for part in relative.parts for p in patterns):
            continue
        if path.is_file() or path.is_symlink():
            files.add(relative.as_posix())
    return files


def is_result(relative: str) -> bool:
    return relative == RESULTS_MD or relative.startswith(f"{RESULTS_DIR}/")


# --- check


def check(root: Path = REFERENCES_DIR, names: Sequence[str] | None = None) -> list[str]:
    """What differs between `root` and a fresh render of every reference; [] when in sync.

    Each problem is one line naming the file: missing (rendered, not in `root`), extra (in
    `root`, not rendered) or differs. The results files are exempt from the comparison but
    must exist, and the index must be what `sync` would write from them.
    """
    space = load_space()
    chosen = select(names, space)
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="references-check-") as scratch:
        for ref in chosen:
            fresh = render_reference(ref, Path(scratch) / ref.name)
            problems += compare(fresh, root / ref.name, ref.name)
    if not names:
        known = {ref.name for ref in chosen} | {INDEX}
        extra = (
            sorted(p.name for p in root.iterdir() if p.name not in known) if root.is_dir() else []
        )
        problems += [f"{name}: extra (not a reference project)" for name in extra]
        index = root / INDEX
        if not index.is_file():
            problems.append(f"{INDEX}: missing")
        elif index.read_text(encoding="utf-8") != index_text(chosen, root):
            problems.append(f"{INDEX}: differs from the index of the results")
    return problems


def compare(fresh: Path, committed: Path, name: str) -> list[str]:
    """Problems of `committed` against the render `fresh`, one line per file, sorted."""
    if not committed.is_dir():
        return [f"{name}/: missing"]
    patterns = ignore_patterns(fresh)
    rendered, present = project_files(fresh, patterns), project_files(committed, patterns)
    problems = [f"{name}/{path}: missing" for path in rendered - present]
    problems += [f"{name}/{path}: extra" for path in present - rendered if not is_result(path)]
    for path in rendered & present:
        if (fresh / path).read_bytes() != (committed / path).read_bytes():
            problems.append(f"{name}/{path}: differs")
    for path in (RESULTS_MD, RESULTS_JSON, CURVES_PNG):
        if path not in present:
            problems.append(f"{name}/{path}: missing (run `python -m generator references sync`)")
    return sorted(problems)


# --- sync


@dataclass
class Trained:
    ref: Reference
    ok: bool
    message: str  # one line when ok, the command and its output tail otherwise


def sync(
    root: Path = REFERENCES_DIR,
    names: Sequence[str] | None = None,
    jobs: int = 1,
    on_done: Callable[[Trained], None] = lambda trained: None,
) -> list[Trained]:
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

        def train_one(ref: Reference) -> Trained:
            trained = train_reference(ref, work / ref.name, options)
            if trained.ok:
                install(work / ref.name / "project", root / ref.name)
            on_done(trained)
            return trained

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            done = list(pool.map(train_one, chosen))
    (root / INDEX).write_text(index_text(references(space), root), encoding="utf-8")
    return done


def train_reference(ref: Reference, folder: Path, options: Options) -> Trained:
    """Train `folder/project` with its default run into `folder/out`; write its results there.

    Never raises: a failure (the command and its output tail) is the Trained's message.
    """
    project, out = folder / "project", folder / "out"
    command = [*launch_command(ref.answers), f"{package_of(project)}.train", "--cpu", "true"]
    env = project_env(ref.answers, options) | {"PYTHONDONTWRITEBYTECODE": "1"}
    shown = shlex.join(["python", *command[1:], "--output_dir", str(out)])
    try:
        start = time.perf_counter()
        result = _run([*command, "--output_dir", str(out)], project, env)
        process_s = time.perf_counter() - start
        if result.returncode != 0:
            message = f"$ {shown}\nexited {result.returncode}\n{tail(result.stdout)}"
            return Trained(ref, False, message)
        # The command as a reader reruns it inside the project.
        rerun = shlex.join(["python", *command[1:], "--output_dir", RUN_OUTPUT])
        rerun = f"OMP_NUM_THREADS={env['OMP_NUM_THREADS']} PYTHONPATH=src {rerun}"
        s = write_results(ref, project, out, process_s, rerun)
    except Exception:  # a timeout or a missing file fails this reference, not the others
        return Trained(ref, False, f"$ {shown}\n{traceback.format_exc()}")
    line = (
        f"{s['metric']} {s['value']:.4f} (baseline {s['baseline_value']:.4f}), "
        f"{s['steps']} steps in {s['wall_s']:.1f} s"
    )
    return Trained(ref, True, line)


def write_results(
    ref: Reference, project: Path, out: Path, process_s: float, command: str
) -> dict[str, Any]:
    """RESULTS.md, results/results.json and results/curves.png from the run in `out`."""
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))
    record = {
        "name": ref.name,
        "project_name": ref.project_name,
        "answers": ref.answers,
        "summary": summary,
        "baseline": baseline_description(project / "src" / package_of(project) / "task.py"),
        "process_s": round(process_s, 1),
        "command": command,
        "processes": processes(ref.answers),
        "device": run.get("device"),
        "seed": run.get("seed"),
        "data_fingerprint": run.get("data_fingerprint"),
        "machine": machine(),
        "versions": {
            **{k: v for k, v in run.get("libraries", {}).items() if k in LIBRARIES},
            "copier": metadata.version("copier"),
        },
        "template": template_version(),
        "date": run.get("start_time"),
    }
    (project / RESULTS_DIR).mkdir()
    shutil.copyfile(out / "curves.png", project / CURVES_PNG)
    (project / RESULTS_JSON).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    (project / RESULTS_MD).write_text(results_text(record), encoding="utf-8")
    return summary


def install(project: Path, dest: Path) -> None:
    """Replace `dest` with the rendered and trained `project`, without its ignored files."""
    patterns = ignore_patterns(project)
    staging = dest.with_name(f".{dest.name}.new")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(project, staging, ignore=shutil.ignore_patterns(*patterns))
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)


def baseline_description(task_py: Path) -> str:
    """What the baseline predicts, from the opening of the `baseline` docstring in task.py."""
    tree = ast.parse(task_py.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "baseline":
            doc = " ".join((ast.get_docstring(node) or "").split())
            # Up to the first full stop or colon: the details after them belong in task.py.
            return re.split(r"\. |: ", doc)[0].rstrip(".") if doc else "the trivial baseline"
    return "the trivial baseline"


def machine() -> dict[str, Any]:
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return {
        "platform": platform.platform(),
        "cpu": _cpu_model() or platform.machine(),
        "cpus": len(cpus) if cpus else os.cpu_count(),
    }


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def template_version() -> str:
    """The template commit the references were rendered from, `-dirty` with uncommitted changes."""
    command = ["git", "describe", "--tags", "--always", "--dirty"]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    return result.stdout.strip() or "unknown"


# --- the text of RESULTS.md and of the index


def results_text(record: dict[str, Any]) -> str:
    s = record["summary"]
    throughput = f"{s['samples_per_s']:,.0f} samples/s" if s.get("samples_per_s") else "n/a"
    versions = ", ".join(f"{name} {version}" for name, version in record["versions"].items())
    m = record["machine"]
    count = record["processes"]
    processes_on = f"{count} process{'es' if count > 1 else ''} on {record['device']}"
    best = ""
    if s.get("best_value") is not None:
        best = f"; best {s['best_value']:.4f} at step {s['best_step']}"
    return f"""# Results: {record["project_name"]}

What this project's default run achieves: trained once on a CPU, exactly as rendered, by
`python -m generator references sync` in the template repository. The numbers change from
machine to machine; every other file of the project is checked to be what the template
renders today (`python -m generator references check`).

| | |
|---|---|
| validation {s["metric"]} | **{s["value"]:.4f}**{best} |
| trivial baseline | {s["baseline_value"]:.4f}: {record["baseline"]} |
| steps, epochs | {s["steps"]}, {s["epochs"]:g} |
| training time | {s["wall_s"]:.1f} s (the whole process {record["process_s"]:.1f} s) |
| throughput | {throughput} |
| peak memory | {s["peak_mem_mb"]:.0f} MB per process |

![Loss and validation {s["metric"]} by step, with the trivial baseline]({CURVES_PNG})

## How it ran

```
{record["command"]}
```

- Machine: {m["platform"]}, {m["cpu"]}, {m["cpus"]} CPUs; {processes_on}.
- Versions: {versions}; template {record["template"]}.
- Seed {record["seed"]}, data fingerprint `{record["data_fingerprint"]}`, started \
{record["date"]}.

`{RESULTS_JSON}` holds these figures as JSON; the run's own outputs (checkpoints, metrics,
config) are not kept here: the command above writes them again.
"""


def index_text(refs: Sequence[Reference], root: Path) -> str:
    """reference_projects/README.md: a table of the references and their results."""
    space = load_space()
    defaults = space.defaults()
    rows = []
    for ref in refs:
        answers = {k: v for k, v in ref.answers.items() if k in defaults and k != "task_type"}
        differ = ", ".join(f"{k}={_show(v)}" for k, v in answers.items() if v != defaults[k])
        results = root / ref.name / RESULTS_JSON
        cells = ["not synced"] + [""] * 3
        if results.is_file():
            s = json.loads(results.read_text(encoding="utf-8"))["summary"]
            better = "higher" if s["higher_is_better"] else "lower"
            cells = [
                f"{s['metric']} ({better} is better)",
                f"{s['value']:.4f}",
                f"{s['baseline_value']:.4f}",
                f"{s['wall_s']:.1f} s",
            ]
        link = f"[{ref.name}]({ref.name}/) ([results]({ref.name}/{RESULTS_MD}))"
        task = ref.answers["task_type"]
        rows.append(f"| {link} | {task} | {differ or 'defaults'} | {' | '.join(cells)} |")
    table = "\n".join(rows)
    return f"""# Reference projects

Worked examples: each folder is a project rendered from this template exactly as `copier
copy` produces it today, one per task type with the default answers, and one with every
option on. Each project's README explains its design choices (why this model, this loss,
these defaults); its RESULTS.md shows what its default run achieves, trained once on a CPU
(the training time is the run's own, without start-up, on the machine RESULTS.md names).

| project | task | answers besides the defaults | metric | value | baseline | training time |
|---|---|---|---|---|---|---|
{table}

These folders are generated, never edited by hand. `python -m generator references sync`
renders each project, trains it with its default run on the CPU and writes its RESULTS.md,
`results/` and this index; `python -m generator references check` renders them again into a
temporary folder and fails, listing the files, when any differs from what is committed here
(the results excepted). The repository's tests run the check, so a change to the template
lands together with its re-synced reference projects. In `.copier-answers.yml`, `_src_path`
is `../..` (this repository, so `copier update` run inside a reference project reaches it)
and `_commit` is `HEAD`, the commit that holds the file.
"""


def _show(value: Answer) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# --- the projects' own tests


Tested = tuple[Reference, bool, float, str]  # the project, passed, seconds, output tail


def run_project_tests(
    root: Path = REFERENCES_DIR,
    names: Sequence[str] | None = None,
    workers: int = 1,
    on_done: Callable[[Tested], None] = lambda tested: None,
) -> list[Tested]:
    """Run each committed reference project's own tests in place, one project at a time.

    Nothing is written into the projects: no bytecode, no pytest cache; the tests' runs go
    to their temporary folders.
    """
    results: list[Tested] = []
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    if workers > 1:
        pytest += ["-n", str(workers)]
    for ref in select(names):
        with tempfile.TemporaryDirectory(prefix="references-test-") as scratch:
            env = project_env(ref.answers, Options(Path(scratch), "cpu"))
            env |= {"PYTHONDONTWRITEBYTECODE": "1"}
            start = time.perf_counter()
            result = _run(pytest, root / ref.name, env)
        seconds = time.perf_counter() - start
        results.append((ref, result.returncode == 0, seconds, tail(result.stdout, 30)))
        on_done(results[-1])
    return results


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run `command` in `cwd`, its output and errors together in one text, within TIMEOUT_S."""
    return subprocess.run(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
    )
