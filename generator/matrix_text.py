"""The text of docs/MATRIX.md and of the README's figures, from the whole matrix's merged
shard reports (generator.matrix_doc loads them and writes the files)."""

from __future__ import annotations

import re
import textwrap
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from generator.answers import AnswerSpace, load_space
from generator.check import Result
from generator.pairwise import pairs_of
from generator.provenance import TEMPLATE_PATHS
from generator.report import reproduce

STAGES = ("render", "lint", "train", "resume", "export", "tests")


@dataclass
class Matrix:
    """The shards' reports, merged: the results and what they were run on."""

    results: list[Result]
    meta: dict[str, Any]
    shards: list[dict[str, Any]]  # each shard's report, without its results
    count: int  # shards the matrix was split into
    done: list[int]  # the shards run (I of shard I/count)


def markdown(matrix: Matrix, space: AnswerSpace | None = None, gpu: Sequence[str] = ()) -> str:
    """The text of docs/MATRIX.md; `gpu` is its GPU section's lines (generator.matrix_gpu),
    which come last."""
    space = space or load_space()
    results, meta = matrix.results, matrix.meta
    total = len(space.combinations())
    failed = [r for r in results if not r.ok]
    tested = [r for r in results if any(s.name == "tests" for s in r.stages)]
    missing = [i for i in range(1, matrix.count + 1) if i not in matrix.done]
    names = [axis.name for axis in space.axes]
    every_pair = set().union(*(pairs_of(c, names) for c in space.combinations()))
    passed_suites = [r for r in tested if r.ok]
    unmet = every_pair - set().union(set(), *(pairs_of(r.answers, names) for r in passed_suites))
    lines = [
        "# The whole matrix",
        "",
        "Written by `python -m generator report matrix` from the shards' reports in",
        "[`docs/matrix/`](matrix/); not edited by hand. Shard I ran",
        f"`{shard_command(matrix.shards[0]['command'])}`.",
        "The GPU matrix, checked with `--device cuda`, is [the last section](#the-gpu-matrix).",
        "",
        f"**{len(results)} of {total} combinations checked, {len(results) - len(failed)} passed, "
        f"{len(failed)} failed**; {len(tested)} ran their own tests as well.",
        "",
        _pairs_line(len(every_pair), len(unmet)),
    ]
    if missing:
        shown = ", ".join(f"{i}/{matrix.count}" for i in missing)
        lines += ["", f"Shards not run yet: {shown}."]
    lines += [
        "",
        "## What was checked, where",
        "",
        *where_rows(matrix),
        "",
        "`python -m generator report status` says whether these trees are still HEAD's.",
        "",
        "## Time",
        "",
        "Wall time is the stage's own (combinations ran side by side); CPU time is the",
        "stage's processes' and its thread's.",
        "",
        *_time_table("task", _by(results, lambda r: r.answers["task_type"])),
        "",
        *_stage_table(results),
        "",
        f"In total: {duration(sum(s['wall_s'] for s in matrix.shards))} of wall time over "
        f"{len(matrix.shards)} shard{'s' * (len(matrix.shards) != 1)} run one after another, "
        f"{duration(sum(s.get('cpu_s', 0) for s in matrix.shards))} of CPU time.",
        "",
        "## Notes",
        "",
        "What ran as its CPU equivalent, and how runs differed, with the combinations each",
        "applies to:",
        "",
        *(
            f"- {note} ({count})"
            for note, count in sorted(Counter(n for r in results for n in r.notes).items())
        ),
    ]
    if failed:
        lines += ["", "## Failures", "", *failure_lines(failed, meta["device"])]
    lines += ["", "## Every combination", ""]
    for task, rows in _by(results, lambda r: r.answers["task_type"]).items():
        lines += [
            f"<details><summary>{task}: {sum(r.ok for r in rows)} of {len(rows)} passed</summary>",
            "",
            "| combination | result | own tests | seconds |",
            "|---|---|---|---:|",
            *(
                f"| `{r.slug}` | {'pass' if r.ok else '**FAIL**'} | "
                f"{'yes' if r in tested else ''} | {r.seconds:.0f} |"
                for r in sorted(rows, key=lambda r: r.slug)
            ),
            "",
            "</details>",
            "",
        ]
    return "\n".join([*lines, *gpu]).rstrip("\n") + "\n"


def readme_figures(matrix: Matrix, space: AnswerSpace | None = None) -> str:
    """The README's paragraph of the matrix's figures (between README_MARKERS)."""
    total = len((space or load_space()).combinations())
    results = matrix.results
    failed = sum(not r.ok for r in results)
    untested = [r for r in results if all(s.name != "tests" for s in r.stages)]
    suites = [s for r in results for s in r.stages if s.name == "tests"]
    per_combination = sum(s.cpu_s for r in untested for s in r.stages) / max(len(untested), 1)
    per_suite = sum(s.cpu_s for s in suites) / max(len(suites), 1)
    cpu_s = sum(s.get("cpu_s", 0) for s in matrix.shards)
    scope = "the whole matrix" if len(results) == total else f"{len(results)} of {total}"
    text = (
        f"Measured ([docs/MATRIX.md](docs/MATRIX.md), {scope}, {failed} failed): a combination "
        f"takes {per_combination:.1f} CPU seconds on average without its own tests, and a "
        f"project's own suite {per_suite:.0f}; {len(matrix.shards)} of {matrix.count} shards "
        f"took {duration(cpu_s)} of CPU time and "
        f"{duration(sum(s['wall_s'] for s in matrix.shards))} of wall time on "
        f"{_machines(matrix.shards)}."
    )
    return textwrap.fill(text, width=92, break_on_hyphens=False)


def where_rows(matrix: Matrix) -> list[str]:
    """The table of what the shards checked: the template's trees, the commits, the dates,
    the device and each machine."""
    meta = matrix.meta
    started = min(s.get("started", "?") for s in matrix.shards)
    finished = max(s.get("finished", "?") for s in matrix.shards)
    machines = _distinct(s.get("machine") for s in matrix.shards)
    return [
        "| | |",
        "|---|---|",
        *(f"| tree of `{path}` | `{meta['trees'][path]}` |" for path in TEMPLATE_PATHS),
        f"| commits | {', '.join(f'`{_short(c)}`' for c in meta['commits'])} |",
        f"| dates (UTC) | {started} to {finished} |",
        f"| device | {meta['device']}, {meta['jobs']} combinations at a time |",
        *(f"| machine | {_machine(m)} |" for m in machines),
    ]


def failure_lines(failed: Sequence[Result], device: str) -> list[str]:
    """Each failed combination, its failing stage and the command that checks it again."""
    return [f"- `{r.slug}`: {r.failed_stage} (`{reproduce(r.answers, device)}`)" for r in failed]


def _short(commit: str) -> str:
    """A commit's first 12 digits, with its `+dirty` when it has one."""
    hash_, plus, dirty = commit.partition("+")
    return hash_[:12] + plus + dirty


def shard_command(command: str) -> str:
    """A shard's command with its number as I, so that it stands for every shard's, less
    its --workdir (a scratch folder on the machine it ran on)."""
    command = re.sub(r" --workdir[ =]\S+", "", command)
    return re.sub(r"(--shard[ =]|shard-)\d+", r"\1I", command)


def _pairs_line(total: int, unmet: int) -> str:
    if not unmet:
        return (
            f"Every two answers of any two questions ({total} choices and pairs) met in a "
            "combination whose own tests passed."
        )
    return (
        f"Of the {total} choices and pairs of answers, {unmet} have not yet met in a "
        "combination whose own tests passed."
    )


def _by(results: Sequence[Result], key) -> dict[str, list[Result]]:
    groups: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        groups[key(r)].append(r)
    return dict(sorted(groups.items()))


def _time_table(name: str, groups: dict[str, list[Result]]) -> list[str]:
    rows = [
        f"| {name} | combinations | passed | own tests | wall | CPU |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, members in groups.items():
        stages = [s for r in members for s in r.stages]
        own = sum(any(s.name == "tests" for s in r.stages) for r in members)
        rows.append(
            f"| {key} | {len(members)} | {sum(r.ok for r in members)} | {own} | "
            f"{duration(sum(s.seconds for s in stages))} | "
            f"{duration(sum(s.cpu_s for s in stages))} |"
        )
    return rows


def _stage_table(results: Sequence[Result]) -> list[str]:
    rows = ["| stage | runs | failed | wall | CPU |", "|---|---:|---:|---:|---:|"]
    for name in STAGES:
        stages = [s for r in results for s in r.stages if s.name == name]
        if stages:
            rows.append(
                f"| {name} | {len(stages)} | {sum(s.status != 'pass' for s in stages)} | "
                f"{duration(sum(s.seconds for s in stages))} | "
                f"{duration(sum(s.cpu_s for s in stages))} |"
            )
    return rows


def _distinct(items) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    for item in items:
        if item and item not in seen:
            seen.append(item)
    return seen


def _machine(m: dict[str, Any]) -> str:
    gpus = ", ".join(f"{n} x {name}" for name, n in Counter(m.get("gpus") or []).items())
    return (
        f"{m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gb')} GB; {m.get('system')}; "
        f"Python {m.get('python')}, torch {m.get('torch')}" + (f"; GPUs: {gpus}" if gpus else "")
    )


def _machines(shards: list[dict[str, Any]]) -> str:
    """The machines the shards ran on, each with its number of shards when there are several."""
    counts = Counter(_machine(s["machine"]) for s in shards if s.get("machine"))
    if len(counts) <= 1:
        return next(iter(counts), _machine({}))
    return " and ".join(f"{m} ({n} shard{'s' * (n > 1)})" for m, n in counts.items())


def duration(seconds: float) -> str:
    minutes = round(seconds) // 60
    if minutes >= 60:
        return f"{minutes // 60} h {minutes % 60:02d} min"
    return f"{minutes} min {round(seconds) % 60} s" if minutes else f"{round(seconds)} s"
