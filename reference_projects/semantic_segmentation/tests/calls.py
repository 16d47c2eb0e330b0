"""How the tests call a project's commands: fields as `--name=value` arguments, the fields
of runs compared bit for bit and of runs that skip what their test is not about, and the one
line a command exits with when it refuses its input."""

from collections.abc import Callable

import pytest
import torch

# Fields of every run that a test compares bit for bit with another. On CUDA, cuDNN's
# autotuning and its non-deterministic kernels make two runs of one command differ in the
# last bits from the first step, so there such runs ask for deterministic kernels; on the
# CPU a run is repeatable as it is, and the tests run the default.
EXACT = {"deterministic": True} if torch.cuda.is_available() else {}
LEAN: dict[str, bool] = {}  # fields that spare a test's run what it is not about: none here


def as_arguments(fields: dict, *extra: str) -> list[str]:
    """`--name=value` for each field, then `extra`, whose fields override (the last wins)."""
    return [f"--{name}={value}" for name, value in fields.items()] + list(extra)


def refusal(command: Callable[[list[str]], object], argv: list[str]) -> str:
    """The message `command(argv)` exits with, which must be one line: never a traceback."""
    with pytest.raises(SystemExit) as refused:
        command(argv)
    message = str(refused.value.code)
    assert "\n" not in message, message
    return message
