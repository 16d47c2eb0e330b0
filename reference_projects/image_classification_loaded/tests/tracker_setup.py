"""The tests' setup for TensorBoard: its writer's module, imported once by the server that
training children fork from (conftest.py)."""

import os
from pathlib import Path

PRELOAD = ["torch.utils.tensorboard"]


def child_environment() -> dict[str, str]:
    """The environment of a training run started in a process of its own."""
    return dict(os.environ)


def changes_after_its_run(path: Path) -> bool:
    """Whether a file of a run's folder may still change once its run has ended: none does."""
    return False
