"""`make test` runs pytest and the pairwise check side by side: both run, the check's output
is printed after pytest's, and make fails if either fails (pytest's 5, no tests, included)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from generator import REPO_ROOT

MAKE = shutil.which("make")

# Stands in for the environment's python: says what it was asked to run, and exits as the
# test tells it to for pytest and for the check.
FAKE_PYTHON = """#!/bin/sh
case "$*" in
  *"-m pytest"*) echo "pytest ran: $*"; exit "$PYTEST_RC" ;;
  *"-m generator check"*) sleep 1; echo "check ran: $*"; exit "$CHECK_RC" ;;
  *) echo "other: $*" ;;
esac
"""


def make_test(tmp_path: Path, pytest_rc: int, check_rc: int) -> subprocess.CompletedProcess:
    """`make test` in an empty folder, with an environment already set up."""
    (tmp_path / "pyproject.toml").write_text("")
    stamp = tmp_path / "stamp"
    stamp.write_text("")
    os.utime(stamp, (2e9, 2e9))  # newer than pyproject.toml: setup has nothing to do
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    command = [MAKE, "-s", "-f", str(REPO_ROOT / "Makefile"), "test"]
    command += [f"PY={python}", f"STAMP={stamp}"]
    env = {**os.environ, "PYTEST_RC": str(pytest_rc), "CHECK_RC": str(check_rc)}
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)


@pytest.mark.skipif(MAKE is None, reason="make is not installed")
@pytest.mark.parametrize(
    ("pytest_rc", "check_rc", "passes"), [(0, 0, True), (1, 0, False), (5, 0, False), (0, 1, False)]
)
def test_make_test_runs_both_and_fails_if_either_fails(tmp_path, pytest_rc, check_rc, passes):
    result = make_test(tmp_path, pytest_rc, check_rc)
    assert (result.returncode == 0) == passes, result.stdout + result.stderr
    out = result.stdout
    assert "-m generator report status" in out
    # The check started first and took longer, yet its output follows pytest's whole.
    assert out.index("pytest ran: -m pytest -n 2") < out.index("check ran: -m generator check")
    assert "--pairwise --device cpu --jobs 2 --project-tests rest" in out
    assert f"pytest exited {pytest_rc}, the pairwise check {check_rc}" in out
    assert (tmp_path / "build" / "check" / "pairwise.log").is_file()
