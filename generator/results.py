"""The results of a reference project's default run: RESULTS.md, results/ and the index.

generator.reference_runs writes them after training a reference project; generator.references
checks that the index, reference_projects/README.md, is what they make.
"""

from __future__ import annotations

import ast
import json
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from generator import REPO_ROOT
from generator.answers import answer_text, load_space
from generator.launch import processes
from generator.provenance import cpu_model
from generator.render import package_of
from generator.small_data import SMALL_DATA_JSON, small_data_text

if TYPE_CHECKING:
    from generator.references import Reference

RESULTS_MD = "RESULTS.md"
RESULTS_DIR = "results"  # results.json and curves.png: the run's record, exempt from `check`
RESULTS_JSON = f"{RESULTS_DIR}/results.json"
CURVES_PNG = f"{RESULTS_DIR}/curves.png"
# A reference's fine-tuning run (references.FINE_TUNING), recorded beside the default one.
FINE_TUNED_JSON = f"{RESULTS_DIR}/fine-tuned.json"
FINE_TUNED_PNG = f"{RESULTS_DIR}/fine-tuned-curves.png"
LIBRARIES = ("python", "torch", "accelerate", "numpy")
# The key under which a results JSON records references.sources_digest of its project.
SOURCES = "sources_sha256"


@dataclass(frozen=True)
class Trained:
    """A finished run of a reference project, as its results record it."""

    out: Path  # its output folder here
    process_s: float  # the training process's wall time
    command: str  # as a reader reruns it inside the project
    model: str | None = None  # the pretrained model it fine-tuned, if any


def write_results(
    ref: Reference,
    project: Path,
    default: Trained,
    fine_tuned: Trained | None = None,
    small: Sequence[dict[str, Any]] = (),
    *,
    sources: str,
) -> dict[str, Any]:
    """RESULTS.md, results/results.json and results/curves.png from the default run; with
    `fine_tuned`, its fine-tuned.json and fine-tuned-curves.png, and a section of RESULTS.md;
    with `small` (the runs on small datasets), small-data.json and a section.

    `sources` is the digest of the files the runs trained from (references.sources_digest),
    which each JSON records so that `references check` refuses results of other sources."""
    record = run_record(ref, project, default) | {SOURCES: sources}
    (project / RESULTS_DIR).mkdir()
    shutil.copyfile(default.out / "curves.png", project / CURVES_PNG)
    (project / RESULTS_JSON).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    tuned = None
    if fine_tuned:
        tuned = run_record(ref, project, fine_tuned) | {"model": fine_tuned.model, SOURCES: sources}
        shutil.copyfile(fine_tuned.out / "curves.png", project / FINE_TUNED_PNG)
        content = json.dumps(tuned, indent=2) + "\n"
        (project / FINE_TUNED_JSON).write_text(content, encoding="utf-8")
    text = results_text(record, tuned)
    if small:
        small_record = {SOURCES: sources, "python": platform.python_version(), "runs": small}
        content = json.dumps(small_record, indent=2) + "\n"
        (project / SMALL_DATA_JSON).write_text(content, encoding="utf-8")
        text += small_data_text(small_record)
    (project / RESULTS_MD).write_text(text, encoding="utf-8")
    return record["summary"]


def run_record(ref: Reference, project: Path, trained: Trained) -> dict[str, Any]:
    """What results.json holds of a run."""
    summary = json.loads((trained.out / "summary.json").read_text(encoding="utf-8"))
    run = json.loads((trained.out / "run.json").read_text(encoding="utf-8"))
    return {
        "name": ref.name,
        "project_name": ref.project_name,
        "answers": ref.answers,
        "summary": summary,
        "baseline": baseline_description(project / "src" / package_of(project) / "task.py"),
        "process_s": round(trained.process_s, 1),
        "command": trained.command,
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
    """The machine a run was on, as RESULTS.md names it."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpus": len(cpus) if cpus else os.cpu_count(),
    }


def template_version() -> str:
    """The template commit the references were rendered from, `-dirty` with uncommitted changes."""
    command = ["git", "describe", "--tags", "--always", "--dirty"]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    return result.stdout.strip() or "unknown"


# --- the text of RESULTS.md and of the index


def results_text(record: dict[str, Any], tuned: dict[str, Any] | None = None) -> str:
    s = record["summary"]
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
{run_rows(record)}

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
""" + (fine_tuned_text(tuned) if tuned else "")


def run_rows(record: dict[str, Any]) -> str:
    """RESULTS.md's table rows on how a recorded run ran: steps, time, speed and memory."""
    s = record["summary"]
    throughput = f"{s['samples_per_s']:,.0f} samples/s" if s.get("samples_per_s") else "n/a"
    return f"""| steps, epochs | {s["steps"]}, {s["epochs"]:g} |
| training time | {s["wall_s"]:.1f} s (the whole process {record["process_s"]:.1f} s) |
| throughput | {throughput} |
| peak memory | {s["peak_mem_mb"]:.0f} MB per process |"""


def fine_tuned_text(tuned: dict[str, Any]) -> str:
    """RESULTS.md's section on a reference's fine-tuning run."""
    s = tuned["summary"]
    return f"""
## Fine-tuning a pretrained model

The same project fine-tuning `{tuned["model"]}`
(README: Fine-tuning a pretrained model), on the same data and split, on the same machine:

| | |
|---|---|
| validation {s["metric"]} | **{s["value"]:.4f}** |
{run_rows(tuned)}

![Loss and validation {s["metric"]} by step, fine-tuning]({FINE_TUNED_PNG})

```
{tuned["command"]}
```

The model's files were read offline, from the copy that a package on the Python registry
ships (the repository's development dependencies); with network, the command above
downloads the same files from the Hugging Face Hub once. `{FINE_TUNED_JSON}` holds
these figures as JSON.
"""


def _cells(results: Path) -> str:
    """The index's metric, value, baseline and training time of a recorded run."""
    if not results.is_file():
        return " | ".join(["not synced", "", "", ""])
    s = json.loads(results.read_text(encoding="utf-8"))["summary"]
    better = "higher" if s["higher_is_better"] else "lower"
    return (
        f"{s['metric']} ({better} is better) | {s['value']:.4f} | {s['baseline_value']:.4f} | "
        f"{s['wall_s']:.1f} s"
    )


def index_text(refs: Sequence[Reference], root: Path) -> str:
    """reference_projects/README.md: a table of the references and their results."""
    space = load_space()
    defaults = space.defaults()
    rows = []
    for ref in refs:
        answers = {k: v for k, v in ref.answers.items() if k in defaults and k != "task_type"}
        differ = ", ".join(f"{k}={answer_text(v)}" for k, v in answers.items() if v != defaults[k])
        link = f"[{ref.name}]({ref.name}/) ([results]({ref.name}/{RESULTS_MD}))"
        task = ref.answers["task_type"]
        cells = _cells(root / ref.name / RESULTS_JSON)
        rows.append(f"| {link} | {task} | {differ or 'defaults'} | {cells} |")
        tuned = root / ref.name / FINE_TUNED_JSON
        if ref.fine_tuning and tuned.is_file():
            model = json.loads(tuned.read_text(encoding="utf-8"))["model"]
            section = f"{ref.name}/{RESULTS_MD}#fine-tuning-a-pretrained-model"
            link = f"[{ref.name}]({ref.name}/), fine-tuned ([results]({section}))"
            rows.append(f"| {link} | {task} | `{ref.fine_tuning}`: {model} | {_cells(tuned)} |")
    table = "\n".join(rows)
    return f"""# Reference projects

Worked examples: each folder is a project rendered from this template exactly as `copier
copy` produces it today, one per task type with the default answers, and one with every
option on. Each project's README explains its design choices (why this model, this loss,
these defaults); its RESULTS.md shows what its default run achieves, trained once on a CPU
(the training time is the run's own, without start-up, on the machine RESULTS.md names),
for text classification what fine-tuning a pretrained model does on the same data, and, for
image and text classification, what the default fields reach on small real datasets.

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
