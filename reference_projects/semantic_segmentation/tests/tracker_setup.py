"""The tests' setup for the tracker: this project logs to none, so there is nothing to set
up, and a training child's environment is this process's."""

import os
from pathlib import Path

PRELOAD: list[str] = []  # no tracker library for the training server to import (conftest.py)


def child_environment() -> dict[str, str]:
    """The environment of a training run started in a process of its own."""
    return dict(os.environ)


def changes_after_its_run(path: Path) -> bool:
    """Whether a file of a run's folder may still change once its run has ended: none does."""
    return False
