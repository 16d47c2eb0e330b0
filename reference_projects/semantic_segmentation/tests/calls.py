"""How the tests call a project's commands: fields as `--name=value` arguments, and the one
line a command exits with when it refuses its input."""

from collections.abc import Callable

import pytest


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
