"""docs/MATRIX.md: the whole matrix, as the committed reports of its shards say it went.

`python -m generator check --all --shard I/N --report docs/matrix/shard-I-of-N` checks one
shard; its report.json is committed. `python -m generator report matrix` merges every
shard's report there (refusing shards of different templates) and writes docs/MATRIX.md
from them: never edited by hand, and tests/test_matrix_doc.py checks it is exactly what this
module writes. `python -m generator report status` says in one line whether the template it
was checked on is still HEAD's, or which commits changed the template since.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator import REPO_ROOT
from generator.answers import AnswerSpace, load_space
from generator.check import Result
from generator.provenance import TEMPLATE_PATHS, ProvenanceError, commits_since, committed_trees
from generator.report import ReportError, merge, read_report, reproduce

MATRIX_DIR = REPO_ROOT / "docs" / "matrix"
MATRIX_MD = REPO_ROOT / "docs" / "MATRIX.md"
_SHARD_FOLDER = re.compile(r"^shard-(\d+)-of-(\d+)$")
STAGES = ("render", "lint", "train", "resume", "export", "tests")


@dataclass
class Matrix:
    """The shards' reports, merged: the results and what they were run on."""

    results: list[Result]
    meta: dict[str, Any]
    shards: list[dict[str, Any]]  # each shard's report, without its results
    count: int  # shards the matrix was split into


def shard_folders(root: Path = MATRIX_DIR) -> list[Path]:
    """The shard folders under `root` (`shard-I-of-N`), by I."""
    folders = [p for p in root.glob("shard-*-of-*") if _SHARD_FOLDER.match(p.name)]
    return sorted(folders, key=lambda p: int(_SHARD_FOLDER.match(p.name)[1]))


def load(root: Path = MATRIX_DIR) -> Matrix | None:
    """The merged shards under `root`, or None when there are none yet. ReportError (one
    line) for shards that do not belong together, or of different splits."""
    folders = shard_folders(root)
    if not folders:
        return None
    counts = {int(_SHARD_FOLDER.match(p.name)[2]) for p in folders}
    if len(counts) > 1:
        raise ReportError(f"{root}: shards of different splits ({sorted(counts)} shards)")
    results, meta = merge(folders, "python -m generator report matrix")
    shards = []
    for folder in folders:
        report = read_report(folder)
        shards.append({k: v for k, v in report.items() if k != "results"} | {"folder": folder})
    return Matrix(results, meta, shards, counts.pop())


def markdown(matrix: Matrix, space: AnswerSpace | None = None) -> str:
    """The text of docs/MATRIX.md."""
    space = space or load_space()
    results, meta = matrix.results, matrix.meta
    total = len(space.combinations())
    failed = [r for r in results if not r.ok]
    tested = [r for r in results if any(s.name == "tests" for s in r.stages)]
    done = {int(_SHARD_FOLDER.match(s["folder"].name)[1]) for s in matrix.shards}
    missing = [i for i in range(1, matrix.count + 1) if i not in done]
    started = min(s.get("started", "?") for s in matrix.shards)
    finished = max(s.get("finished", "?") for s in matrix.shards)
    lines = [
        "# The whole matrix",
        "",
        "Written by `python -m generator report matrix` from the shards' reports in",
        "[`docs/matrix/`](matrix/); not edited by hand. Each shard ran",
        f"`python -m generator check --all --shard I/{matrix.count} --project-tests pairwise`.",
        "",
        f"**{len(results)} of {total} combinations checked, {len(results) - len(failed)} passed, "
        f"{len(failed)} failed**; {len(tested)} ran their own tests as well.",
    ]
    if missing:
        shown = ", ".join(f"{i}/{matrix.count}" for i in missing)
        lines += ["", f"Shards not run yet: {shown}."]
    lines += [
        "",
        "## What was checked, where",
        "",
        "| | |",
        "|---|---|",
        *(f"| tree of `{path}` | `{meta['trees'][path]}` |" for path in TEMPLATE_PATHS),
        f"| commits | {', '.join(f'`{c[:12]}`' for c in meta['commits'])} |",
        f"| dates (UTC) | {started} to {finished} |",
        f"| device | {meta['device']}, {meta['jobs']} combinations at a time |",
        *(
            f"| machine | {_machine(m)} |"
            for m in _distinct(s.get("machine") for s in matrix.shards)
        ),
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
        f"In total: {_duration(sum(s['wall_s'] for s in matrix.shards))} of wall time over "
        f"{len(matrix.shards)} shards run one after another, "
        f"{_duration(sum(s.get('cpu_s', 0) for s in matrix.shards))} of CPU time.",
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
        lines += ["", "## Failures", ""]
        for r in failed:
            lines.append(
                f"- `{r.slug}`: {r.failed_stage} (`{reproduce(r.answers, meta['device'])}`)"
            )
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
    return "\n".join(lines).rstrip("\n") + "\n"


def write(root: Path = MATRIX_DIR, out: Path = MATRIX_MD) -> Path:
    """Write docs/MATRIX.md from the shards under `root`; ReportError when there are none."""
    matrix = load(root)
    if matrix is None:
        raise ReportError(f"{root}: no shard reports (shard-I-of-N/report.json) to write from")
    out.write_text(markdown(matrix), encoding="utf-8")
    return out


def status(root: Path = MATRIX_DIR, repo: Path = REPO_ROOT) -> str:
    """One line: whether the matrix in `root` was checked on HEAD's template, and how much
    of it; or the template commits since the one it was checked on."""
    try:
        matrix = load(root)
    except ReportError as error:
        return f"docs/MATRIX.md: its shard reports do not merge ({error})"
    if matrix is None:
        return "docs/MATRIX.md: the whole matrix has not been checked yet"
    checked = len(matrix.results)
    failed = sum(not r.ok for r in matrix.results)
    summary = f"{checked} combinations checked, {failed} failed"
    try:
        if committed_trees("HEAD", repo) == matrix.meta["trees"]:
            return f"docs/MATRIX.md is current: HEAD's template, {summary}"
        since = _template_commits_since(matrix.meta["commits"], repo)
    except ProvenanceError as error:
        return f"docs/MATRIX.md: cannot compare with HEAD ({error})"
    if not since:
        return (
            f"docs/MATRIX.md is not current: checked on a template HEAD does not hold ({summary})"
        )
    return (
        f"docs/MATRIX.md is not current ({summary}): {len(since)} template commit(s) came "
        f"after it: {'; '.join(since[:3])}{'; ...' if len(since) > 3 else ''}"
    )


def _template_commits_since(commits: Sequence[str], repo: Path) -> list[str]:
    """The template commits after the newest of `commits` that this history holds."""
    known = []
    for commit in commits:
        try:
            known.append(commits_since(commit.removesuffix("+dirty"), repo))
        except ProvenanceError:
            continue  # a commit of another clone's history: the others may be here
    if not known:
        raise ProvenanceError(
            f"none of the commits checked ({', '.join(commits)}) is in HEAD's history"
        )
    return min(known, key=len)


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
            f"{_duration(sum(s.seconds for s in stages))} | "
            f"{_duration(sum(s.cpu_s for s in stages))} |"
        )
    return rows


def _stage_table(results: Sequence[Result]) -> list[str]:
    rows = ["| stage | runs | failed | wall | CPU |", "|---|---:|---:|---:|---:|"]
    for name in STAGES:
        stages = [s for r in results for s in r.stages if s.name == name]
        if stages:
            rows.append(
                f"| {name} | {len(stages)} | {sum(s.status != 'pass' for s in stages)} | "
                f"{_duration(sum(s.seconds for s in stages))} | "
                f"{_duration(sum(s.cpu_s for s in stages))} |"
            )
    return rows


def _distinct(items) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    for item in items:
        if item and item not in seen:
            seen.append(item)
    return seen


def _machine(m: dict[str, Any]) -> str:
    return (
        f"{m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gb')} GB; {m.get('system')}; "
        f"Python {m.get('python')}, torch {m.get('torch')}"
    )


def _duration(seconds: float) -> str:
    minutes = round(seconds) // 60
    if minutes >= 60:
        return f"{minutes // 60} h {minutes % 60:02d} min"
    return f"{minutes} min {round(seconds) % 60} s" if minutes else f"{round(seconds)} s"
