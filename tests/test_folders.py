"""The folders `python -m generator` writes into: a --report folder that can't take a report
is refused in one line before any work starts, and a report is written whole or not at all.

A full disk is stood in for by a file size limit (RLIMIT_FSIZE, with SIGXFSZ ignored) in a
subprocess: the kernel then fails the report's real write(2) partway through a real file,
with EFBIG, as it fails it with ENOSPC on a full disk, and nothing needs root or a mount.
Patching a Python write function instead would only prove that an exception raised where
the patch sits is caught, not that every byte of the report goes through the atomic path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from generator import REPO_ROOT, commands, folders
from generator.answers import load_space
from generator.cli import main

SPACE = load_space()
# One combination: every question answered with its default.
ONE = [arg for axis in SPACE.axes for arg in ("--set", f"{axis.name}={axis.default}")]
ALLOWED = "it takes a folder, new or existing, that this user can write on a disk with room"


def deny_writes(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Make `folder` read-only; as root, whom permissions do not stop, answer access(2) as
    the kernel answers any other user."""
    folder.chmod(0o555)
    if os.geteuid() == 0:
        real = os.access

        def access(path, mode, **kwargs) -> bool:
            denied = Path(path) == folder and mode & os.W_OK
            return real(path, mode, **kwargs) and not denied

        monkeypatch.setattr(os, "access", access)


def fill_disk(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """The disk holding `folder` reports 100 KB free."""
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 10**5, 10**5))


def contents(root: Path) -> dict[str, bytes | None]:
    """Every path under `root`, with a file's bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in root.rglob("*")
    }


@pytest.mark.parametrize(
    ("report", "break_it", "words"),
    [
        ("a-file", None, "is a file"),
        ("a-file/report", None, "is under"),
        ("read-only", deny_writes, "is not writable by this user"),
        ("read-only/report", deny_writes, "would be made in"),
        ("full", fill_disk, "is on a full disk (0.1 MB free)"),
    ],
)
@pytest.mark.parametrize("command", ["check", "report merge"])
def test_a_report_folder_that_cannot_take_a_report_is_refused_before_any_work(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    report: str,
    break_it,
    words: str,
) -> None:
    def must_not_run(*args, **kwargs):
        raise AssertionError("the work started")

    monkeypatch.setattr(commands, "check_all", must_not_run)
    monkeypatch.setattr(commands, "merge", must_not_run)
    (tmp_path / "a-file").write_text("mine\n", encoding="utf-8")
    for folder in ("read-only", "full"):
        (tmp_path / folder).mkdir()
    if break_it:
        break_it(monkeypatch, tmp_path / report.split("/")[0])
    before = contents(tmp_path)
    try:
        args = ["check", *ONE] if command == "check" else ["report", "merge", str(tmp_path)]
        assert main([*args, "--report", str(tmp_path / report)]) == 2
    finally:
        (tmp_path / "read-only").chmod(0o755)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    prefix = f"python -m generator {command}: error: --report {tmp_path / report} "
    assert captured.err.startswith(prefix), captured.err
    assert words in captured.err and ALLOWED in captured.err, captured.err
    assert contents(tmp_path) == before


# A check whose combinations all fail with a long log, then a file size limit: the report
# (about 25 KB) can't be written whole.
FULL_DISK_CHECK = """
import resource, signal, sys
from generator import commands
from generator.check import Result, Stage
from generator.cli import main

def check_all(space, combinations, *args):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # or the kernel kills the process instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    stages = [Stage("render", "fail", 1.0)]
    return [Result(space.slug(c), c, stages, log_tail="x" * 12_000) for c in combinations]

commands.check_all = check_all
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("existing", [False, True], ids=["new folder", "older report"])
def test_a_full_disk_while_writing_the_report_is_one_line_and_leaves_no_partial_report(
    tmp_path: Path, existing: bool
) -> None:
    report = tmp_path / "report"
    if existing:
        report.mkdir()
        (report / "report.json").write_text('{"older": true}\n', encoding="utf-8")
    before = contents(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", FULL_DISK_CHECK, "check", *ONE, "--report", str(report)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(
        f"python -m generator check: error: could not write {report / 'report.json'}: "
        "File too large"
    ), result.stderr
    assert "0 passed, 1 failed" in result.stdout  # the results were shown all the same
    assert contents(tmp_path) == before  # no partial file, no temporary file, no new folder


def test_a_report_is_written_whole_and_readable_like_any_file(tmp_path: Path) -> None:
    folders.write_whole(tmp_path / "new" / "report", {"a.json": "{}\n", "b.md": "# b\n"})
    written = tmp_path / "new" / "report"
    assert sorted(p.name for p in written.iterdir()) == ["a.json", "b.md"]
    umask = os.umask(0)
    os.umask(umask)
    assert (written / "a.json").stat().st_mode & 0o777 == 0o666 & ~umask
