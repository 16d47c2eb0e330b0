"""Helpers for the tests: reproducing a combination and running rendered projects."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from generator.answers import Answer

# Generous bounds so a hang fails the run instead of stalling CI; never a timing assertion.
TIMEOUT_S = 1800


def reproduce(answers: Mapping[str, Answer]) -> str:
    """The one command that renders this combination again, for failure messages."""
    sets = " ".join(f"--set {shlex.quote(f'{name}={value}')}" for name, value in answers.items())
    return f"reproduce: python -m generator render /tmp/project {sets}"


def project_env() -> dict[str, str]:
    """Environment for a rendered project's processes.

    Drops this pytest's variables (a nested pytest must not think it is an xdist worker) and
    splits the cores between xdist workers: torch uses every core by default, and two workers'
    training runs each using both cores only slow each other down.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))
    env["PYTHONPATH"] = "src"
    return env


def run_in(project: Path, args: Sequence[str], context: str) -> subprocess.CompletedProcess[str]:
    """Run `python ARGS` in the project with this interpreter; fail with the output tail."""
    result = subprocess.run(
        [sys.executable, *args],
        cwd=project,
        env=project_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-6000:]
        raise AssertionError(
            f"`python {shlex.join(args)}` exited {result.returncode}\n{context}\n{tail}"
        )
    return result


def decision_tags(text: str) -> int:
    """The `{% if %}` and `{% elif %}` tags of a template: each an answer decided inline."""
    return len(re.findall(r"{%-?\s*(?:if|elif)\b", text))


def decision_tags_by_file(root: Path) -> dict[str, int]:
    """decision_tags of each file under `root`, by its path relative to `root`."""
    return {
        path.relative_to(root).as_posix(): decision_tags(path.read_text(encoding="utf-8"))
        for path in root.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
