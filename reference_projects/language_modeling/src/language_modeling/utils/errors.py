"""The one line of an exception that a one-line error quotes: the commands report what went
wrong in a line that names the input, never a library's traceback."""

import re


class UserError(Exception):
    """An error whose message names the input to change (a field, a file, free disk space):
    the commands exit with its message in one line, never a traceback. Each error type of
    the project that a user's input can cause derives from it."""


# Some libraries colour their messages for a terminal; a line quoted in a log or a file
# should not carry the escape codes.
_TERMINAL_COLOURS = re.compile(r"\x1b\[[0-9;]*m")


def first_line(error: BaseException, limit: int = 200) -> str:
    """The first non-empty line of `error`'s message, at most `limit` characters, or the
    name of its type when the message is empty."""
    lines = _TERMINAL_COLOURS.sub("", str(error)).strip().splitlines()
    return lines[0].strip()[:limit] if lines else type(error).__name__


def root_cause(error: BaseException) -> BaseException:
    """The exception at the start of `error`'s chain (raise ... from): where a wrapper's
    message is generic ("failed to export"), the cause says why."""
    while error.__cause__ is not None:
        error = error.__cause__
    return error
