"""docs/MATRIX.md is written from the whole matrix's shard reports by `python -m generator
report matrix`, never by hand; `report status` says whether it was checked on HEAD's template."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from generator import REPO_ROOT, matrix_doc, matrix_gpu
from generator.answers import load_space
from generator.check import Result, Stage
from generator.cli import get_parser, main
from generator.matrix_text import markdown, readme_figures
from generator.provenance import TEMPLATE_PATHS, committed_trees
from generator.report import ReportError, write_report
from generator.selection import select

HEAD_TREES = committed_trees("HEAD")
OLD_TREES = {path: "0" * 40 for path in HEAD_TREES}
DEFAULTS = load_space().defaults()
COMBINATIONS = len(load_space().combinations())  # what copier.yml's answers allow
MACHINE = {"cpu": "Some CPU", "cores": 2, "memory_gb": 23.5, "system": "Linux", "python": "3.11"}


def result(task: str, index: int, failing: str | None = None, tests: bool = False) -> Result:
    names = ["render", "lint", "train", "resume", *(["tests"] if tests else [])]
    names = names[: names.index(failing) + 1] if failing else names  # a check stops there
    stages = [Stage(n, "fail" if n == failing else "pass", 2.0, 3.0) for n in names]
    answers = DEFAULTS | {"task_type": task, "mixed_precision": "fp16"}
    notes = ["fp16 runs as fp16 autocast on the CPU, without a GradScaler"]
    return Result(f"{task}-{index}", answers, stages, notes, "the log" if failing else "")


def shard(root: Path, index: int, count: int, results: list[Result], **meta) -> Path:
    folder = root / f"shard-{index}-of-{count}"
    meta = {
        "command": f"python -m generator check --all --shard {index}/{count}",
        "device": "cpu",
        "jobs": 2,
        "server": True,
        "steps": 2,
        "wall_s": 600.0,
        "cpu_s": 1000.0,
        "commit": "a" * 40,
        "trees": HEAD_TREES,
        "started": f"2026-12-0{index}T10:00:00Z",
        "finished": f"2026-12-0{index}T10:10:00Z",
        "machine": MACHINE,
    } | meta
    write_report(folder, results, meta)
    return folder


def gpu_shard(root: Path, index: int, count: int, results: list[Result], **meta) -> Path:
    """A shard of `check --gpu-matrix --set distributed=single --device cuda`."""
    command = (
        f"python -m generator check --gpu-matrix --set distributed=single --device cuda "
        f"--shard {index}/{count} --report docs/gpu-matrix/shard-{index}-of-{count}"
    )
    machine = MACHINE | {"gpus": ["NVIDIA H200", "NVIDIA H200"]}
    meta = {"command": command, "device": "cuda", "selected": 120, "machine": machine} | meta
    return shard(root, index, count, results, **meta)


def test_the_document_counts_times_and_lists_what_the_shards_checked(tmp_path: Path) -> None:
    command = "python -m generator check --all --shard 1/3 --workdir /tmp/w/1"
    shard(tmp_path, 1, 3, [result("image", 1, tests=True), result("text", 2)], command=command)
    shard(tmp_path, 2, 3, [result("text", 3, failing="train")], commit="a" * 40 + "+dirty")
    text = markdown(matrix_doc.load(tmp_path))
    assert f"| commits | `{'a' * 12}`, `{'a' * 12}+dirty` |" in text
    checked = f"**3 of {COMBINATIONS} combinations checked, 2 passed, 1 failed**"
    assert f"{checked}; 1 ran their own tests" in text
    assert "Shards not run yet: 3/3." in text
    assert "Shard I ran\n`python -m generator check --all --shard I/3`." in text
    assert re.search(r"Of the \d+ choices and pairs of answers, \d+ have not yet met", text)
    assert f"| tree of `template` | `{HEAD_TREES['template']}` |" in text
    assert "| dates (UTC) | 2026-12-01T10:00:00Z to 2026-12-02T10:10:00Z |" in text
    assert "| machine | Some CPU, 2 cores, 23.5 GB; Linux; Python 3.11, torch None |" in text
    assert "| image | 1 | 1 | 1 | 10 s | 15 s |" in text  # 5 stages of 2 s wall, 3 s CPU
    assert "| text | 2 | 1 | 0 | 14 s | 21 s |" in text  # the failing one stopped at train
    assert "| train | 3 | 1 | 6 s | 9 s |" in text and "| tests | 1 | 0 | 2 s | 3 s |" in text
    assert "In total: 20 min 0 s of wall time over 2 shards" in text
    assert "- fp16 runs as fp16 autocast on the CPU, without a GradScaler (3)" in text
    assert "- `text-3`: train (`python -m generator check --device cpu --set" in text
    assert "| `image-1` | pass | yes | 10 |" in text and "| `text-3` | **FAIL** |  | 6 |" in text


def test_the_command_writes_the_document_and_refuses_shards_of_two_templates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shard(tmp_path, 1, 2, [result("image", 1)])
    out, readme = tmp_path / "MATRIX.md", tmp_path / "README.md"
    start, end = matrix_doc.README_MARKERS
    readme.write_text(f"# A project\n\n{start}\nold figures\n{end}\n\nThe rest.\n")
    written = ["--root", str(tmp_path), "--out", str(out), "--readme", str(readme)]
    gpu = tmp_path / "gpu"
    assert main(["report", "matrix", *written, "--gpu-root", str(gpu)]) == 0
    matrix = matrix_doc.load(tmp_path)
    assert out.read_text(encoding="utf-8") == matrix_doc.document(matrix, gpu)
    figures = readme_figures(matrix)
    assert readme.read_text() == f"# A project\n\n{start}\n{figures}\n{end}\n\nThe rest.\n"
    assert " ".join(figures.split()).startswith(
        f"Measured ([docs/MATRIX.md](docs/MATRIX.md), 1 of {COMBINATIONS}, 0 failed): a "
        "combination takes "
        "12.0 CPU seconds on average without its own tests"
    )
    shard(tmp_path, 2, 2, [result("text", 2)], trees=OLD_TREES)
    assert main(["report", "matrix", *written]) == 2
    assert "of different templates (tree hashes)" in capsys.readouterr().err


def test_the_readme_figures_name_every_machine_the_shards_ran_on(tmp_path: Path) -> None:
    other = MACHINE | {"cpu": "Other CPU"}
    shard(tmp_path, 1, 3, [result("image", 1)])
    shard(tmp_path, 2, 3, [result("text", 2)], machine=other)
    shard(tmp_path, 3, 3, [result("text", 3)])
    figures = " ".join(readme_figures(matrix_doc.load(tmp_path)).split())
    assert (
        "of wall time on Some CPU, 2 cores, 23.5 GB; Linux; Python 3.11, torch None (2 shards)"
        in figures
    )
    assert figures.endswith(
        " and Other CPU, 2 cores, 23.5 GB; Linux; Python 3.11, torch None (1 shard)."
    )


def last_template_commit() -> str:
    """The newest commit that changed the template (any of its paths: copier.yml, includes/)."""
    paths = ["--", *TEMPLATE_PATHS]
    log = ["git", "-C", str(REPO_ROOT), "log", "-n", "1", "--format=%H", *paths]
    return subprocess.run(log, capture_output=True, text=True, check=True).stdout.strip()


def test_the_status_says_whether_the_document_is_of_heads_template(tmp_path: Path) -> None:
    no_gpu = f"; its GPU matrix: not run yet ({tmp_path / 'gpu'}/ holds no shard reports)"
    assert matrix_doc.status(tmp_path, gpu_root=tmp_path / "gpu") == (
        f"docs/MATRIX.md: the whole matrix has not been checked yet{no_gpu}"
    )
    shard(tmp_path / "current", 1, 2, [result("image", 1)])
    assert matrix_doc.status(tmp_path / "current", gpu_root=tmp_path / "gpu") == (
        f"docs/MATRIX.md is current: HEAD's template, 1 combinations checked, 0 failed{no_gpu}"
    )
    changed = last_template_commit()
    before = f"{changed}~1"
    shard(tmp_path / "old", 1, 2, [result("image", 1)], trees=OLD_TREES, commit=before)
    line = matrix_doc.status(tmp_path / "old", gpu_root=tmp_path / "gpu")
    assert line.startswith("docs/MATRIX.md is not current (1 combinations checked, 0 failed): ")
    assert f"template commit(s) came after it: {changed[:7]}" in line


def test_the_status_says_whether_the_gpu_matrix_is_of_heads_template(tmp_path: Path) -> None:
    shard(tmp_path / "cpu", 1, 1, [result("image", 1)])
    gpu_shard(tmp_path / "gpu", 1, 2, [result("image", 1)])
    line = matrix_doc.status(tmp_path / "cpu", gpu_root=tmp_path / "gpu")
    assert line == (
        "docs/MATRIX.md is current: HEAD's template, 1 combinations checked, 0 failed; "
        "its GPU matrix is current: HEAD's template, 1 combinations checked, 0 failed"
    )
    changed = last_template_commit()
    gpu_shard(tmp_path / "old", 1, 1, [result("text", 1)], trees=OLD_TREES, commit=f"{changed}~1")
    line = matrix_doc.status(tmp_path / "cpu", gpu_root=tmp_path / "old")
    assert "; its GPU matrix is not current (1 combinations checked, 0 failed): " in line
    assert f"template commit(s) came after it: {changed[:7]}" in line
    shard(tmp_path / "on-cpu", 1, 1, [result("text", 1)])  # a CPU check in the GPU's folder
    line = matrix_doc.status(tmp_path / "cpu", gpu_root=tmp_path / "on-cpu")
    assert line.endswith(
        "its GPU matrix: its shard reports do not merge "
        f"({tmp_path / 'on-cpu'}: shards checked with --device cpu, not cuda)"
    )


def test_make_test_prints_the_status_line() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    test_target = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "-m generator report status" in test_target


def test_the_committed_document_is_what_the_generator_writes() -> None:
    matrix = matrix_doc.load()
    if matrix is None:
        assert not matrix_doc.MATRIX_MD.exists(), "docs/MATRIX.md without shard reports"
        return
    written = matrix_doc.MATRIX_MD.read_text(encoding="utf-8")
    rewrite = "differs from what `python -m generator report matrix` writes"
    assert written == matrix_doc.document(matrix), f"docs/MATRIX.md {rewrite}"
    start, end = matrix_doc.README_MARKERS
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert f"{start}\n{readme_figures(matrix)}\n{end}" in readme, f"README.md's figures {rewrite}"


def test_the_document_says_when_every_pair_of_answers_met_in_a_passing_suite(
    tmp_path: Path,
) -> None:
    space = load_space()
    _, pairwise_set = select(space, pairwise_only=True)
    tested = [Result(space.slug(c), c, [Stage("tests", "pass", 1.0)], [], "") for c in pairwise_set]
    shard(tmp_path, 1, 1, tested[: len(tested) // 2])
    text = markdown(matrix_doc.load(tmp_path), space)
    assert "have not yet met in a combination whose own tests passed" in text
    shard(tmp_path, 1, 1, tested)
    text = markdown(matrix_doc.load(tmp_path), space)
    assert "Every two answers of any two questions (" in text


def test_without_gpu_reports_the_document_says_how_to_make_them(tmp_path: Path) -> None:
    shard(tmp_path / "cpu", 1, 1, [result("image", 1)])
    text = matrix_doc.document(matrix_doc.load(tmp_path / "cpu"), tmp_path / "gpu")
    section = text.split("\n## The GPU matrix\n\n", 1)[1]
    assert section == (
        f"No GPU report is committed yet: shard I of N is `{matrix_gpu.COMMAND}`, then "
        "`python -m generator report matrix` writes it here; the two-process combinations "
        "(`--set distributed=multi` and `sharded`) need a machine with two GPUs.\n"
    )
    assert "[the last section](#the-gpu-matrix)" in text


def test_the_gpu_command_checks_the_gpu_matrix_into_the_folder_report_matrix_reads() -> None:
    command = matrix_gpu.COMMAND.replace("I/N", "2/4").replace("shard-I-of-N", "shard-2-of-4")
    args = get_parser().parse_args(command.split()[3:])
    assert args.gpu_matrix and args.device == "cuda" and args.sets == ["distributed=single"]
    assert REPO_ROOT / args.report == matrix_doc.GPU_DIR / "shard-2-of-4"


def test_the_gpu_section_counts_failures_machines_and_trees(tmp_path: Path) -> None:
    cpu = shard(tmp_path / "cpu", 1, 1, [result("image", 1)]).parent
    image = result("image", 1, tests=True)
    gpu_shard(tmp_path / "gpu", 1, 3, [image, result("text", 2, failing="train")])
    gpu_shard(tmp_path / "gpu", 3, 3, [result("text", 3)], trees=OLD_TREES)
    with pytest.raises(ReportError, match="of different templates"):
        matrix_doc.document(matrix_doc.load(cpu), tmp_path / "gpu")
    gpu_shard(tmp_path / "gpu", 3, 3, [result("text", 3)])
    section = matrix_doc.document(matrix_doc.load(cpu), tmp_path / "gpu").split(
        "## The GPU matrix", 1
    )[1]
    assert "**3 of 120 combinations checked on the GPU, 2 passed, 1 failed**; 1 ran" in section
    assert "Shard I ran `python -m generator check --gpu-matrix --set distributed=single " in (
        " ".join(section.split())
    )
    assert "Shards not run yet: 2/3." in section
    assert "| device | cuda, 2 combinations at a time |" in section
    assert "Python 3.11, torch None; GPUs: 2 x NVIDIA H200 |" in section
    assert "These trees are the CPU matrix's;" in section
    assert "- `text-2`: train (`python -m generator check --device cuda --set" in section
    assert "| `image-1` | pass | yes | 10 |" in section
    assert "need a machine with two GPUs" in section
    # image and text, each with fp16 and with single: image's two met in a passing suite.
    assert "Own suites passed on the GPU for 2 of the 4 pairs of answers checked here" in section
    old = shard(tmp_path / "old", 1, 1, [result("image", 1)], trees=OLD_TREES).parent
    section = matrix_doc.document(matrix_doc.load(old), tmp_path / "gpu")
    assert "These trees are not the CPU matrix's;" in section
