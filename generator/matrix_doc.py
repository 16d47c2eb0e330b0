"""docs/MATRIX.md: the whole matrix, as the committed reports of its shards say it went, and
the GPU matrix, as those of its own shards do.

`python -m generator check --all --shard I/N --report docs/matrix/shard-I-of-N` checks one
shard; its report.json is committed; the GPU matrix's go under docs/gpu-matrix/ the same
way (matrix_gpu.COMMAND). `python -m generator report matrix` merges every shard's report
of each (refusing shards of different templates) and writes docs/MATRIX.md from them:
never edited by hand, and tests/test_matrix_doc.py checks it is exactly what this module
writes. `python -m generator report status` says in one line whether the template each was
checked on is still HEAD's, or which commits changed the template since.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from generator import REPO_ROOT
from generator.matrix_gpu import gpu_section
from generator.matrix_text import Matrix, markdown, readme_figures
from generator.provenance import ProvenanceError, commits_since, committed_trees
from generator.report import ReportError, merge_read, read_report

MATRIX_DIR = REPO_ROOT / "docs" / "matrix"
MATRIX_MD = REPO_ROOT / "docs" / "MATRIX.md"
GPU_DIR = REPO_ROOT / "docs" / "gpu-matrix"  # the GPU matrix's shard reports
_SHARD_FOLDER = re.compile(r"^shard-(\d+)-of-(\d+)$")
# Where README.md shows the matrix's figures, which `report matrix` writes.
README_MARKERS = ("<!-- matrix figures: python -m generator report matrix -->", "<!-- /matrix -->")


def shard_folders(root: Path = MATRIX_DIR) -> list[Path]:
    """The shard folders under `root` (`shard-I-of-N`), by I."""
    folders = [p for p in root.glob("shard-*-of-*") if _SHARD_FOLDER.match(p.name)]
    return sorted(folders, key=lambda p: int(_SHARD_FOLDER.match(p.name)[1]))


def load(root: Path = MATRIX_DIR, device: str | None = None) -> Matrix | None:
    """The merged shards under `root`, or None when there are none yet. ReportError (one
    line) for shards that do not belong together, of different splits, or (when `device`
    is given) checked on another device."""
    folders = shard_folders(root)
    if not folders:
        return None
    counts = {int(_SHARD_FOLDER.match(p.name)[2]) for p in folders}
    if len(counts) > 1:
        raise ReportError(f"{root}: shards of different splits ({sorted(counts)} shards)")
    reports = [(folder, read_report(folder)) for folder in folders]
    results, meta = merge_read(reports, "python -m generator report matrix")
    if device and meta["device"] != device:
        raise ReportError(f"{root}: shards checked with --device {meta['device']}, not {device}")
    shards = [{k: v for k, v in report.items() if k != "results"} for _, report in reports]
    done = [int(_SHARD_FOLDER.match(folder.name)[1]) for folder in folders]
    return Matrix(results, meta, shards, counts.pop(), done)


def document(matrix: Matrix, gpu_root: Path = GPU_DIR) -> str:
    """The text of docs/MATRIX.md: the whole matrix `matrix`, then the GPU matrix of the
    shards under `gpu_root` (or how to run it, when there are none)."""
    return markdown(matrix, gpu=gpu_section(load(gpu_root, device="cuda"), matrix))


def write(
    root: Path = MATRIX_DIR,
    out: Path = MATRIX_MD,
    readme: Path = REPO_ROOT / "README.md",
    gpu_root: Path = GPU_DIR,
) -> Path:
    """Write docs/MATRIX.md from the shards under `root` and `gpu_root`, and the README's
    figures of the first; ReportError when `root` has none."""
    matrix = load(root)
    if matrix is None:
        raise ReportError(f"{root}: no shard reports (shard-I-of-N/report.json) to write from")
    out.write_text(document(matrix, gpu_root), encoding="utf-8")
    text = readme.read_text(encoding="utf-8")
    start, end = README_MARKERS
    if start not in text or end not in text:
        raise ReportError(f"{readme}: no {start} ... {end} block for the matrix's figures")
    before, rest = text.split(start, 1)
    after = rest.split(end, 1)[1]
    readme.write_text(f"{before}{start}\n{readme_figures(matrix)}\n{end}{after}", "utf-8")
    return out


def status(root: Path = MATRIX_DIR, repo: Path = REPO_ROOT, gpu_root: Path = GPU_DIR) -> str:
    """One line: whether the whole matrix in `root`, and the GPU matrix in `gpu_root`, were
    checked on HEAD's template, and how much of each; or the template commits since."""
    whole = _status("docs/MATRIX.md", load, root, repo, "the whole matrix has not been checked yet")
    gpu = _status(
        "its GPU matrix",
        lambda folder: load(folder, device="cuda"),
        gpu_root,
        repo,
        f"not run yet ({_shown(gpu_root)}/ holds no shard reports)",
    )
    return f"{whole}; {gpu}"


def _status(name: str, loader, root: Path, repo: Path, absent: str) -> str:
    """`name`'s part of the status line, of the shards `loader` reads from `root`."""
    try:
        matrix = loader(root)
    except ReportError as error:
        return f"{name}: its shard reports do not merge ({error})"
    if matrix is None:
        return f"{name}: {absent}"
    checked = len(matrix.results)
    failed = sum(not r.ok for r in matrix.results)
    summary = f"{checked} combinations checked, {failed} failed"
    try:
        if committed_trees("HEAD", repo) == matrix.meta["trees"]:
            return f"{name} is current: HEAD's template, {summary}"
        since = _template_commits_since(matrix.meta["commits"], repo)
    except ProvenanceError as error:
        return f"{name}: cannot compare with HEAD ({error})"
    if not since:
        return f"{name} is not current: checked on a template HEAD does not hold ({summary})"
    return (
        f"{name} is not current ({summary}): {len(since)} template commit(s) came "
        f"after it: {'; '.join(since[:3])}{'; ...' if len(since) > 3 else ''}"
    )


def _shown(path: Path) -> str:
    """`path` relative to the repository when it is inside it."""
    return path.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT) else str(path)


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


def _duration(seconds: float) -> str:
    minutes = round(seconds) // 60
    if minutes >= 60:
        return f"{minutes // 60} h {minutes % 60:02d} min"
    return f"{minutes} min {round(seconds) % 60} s" if minutes else f"{round(seconds)} s"
