"""The commands' argument parser (export, tune, sample): argparse, with a wrong argument
reported in one line with the usage, never a traceback, and the value checks they share.
Training's own `--field value` arguments are parsed and checked by config.load_config."""

import argparse
from collections.abc import Callable
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line; options are never abbreviated, so that
    an option a command passes on to load_config is not taken for one of its own."""

    def __init__(self, command: str, description: str):
        package = __name__.split(".")[0]
        super().__init__(
            prog=f"python -m {package}.{command}", description=description, allow_abbrev=False
        )

    def error(self, message: str) -> NoReturn:
        usage = " ".join(self.format_usage().split())
        raise SystemExit(f"error: {message} ({usage})")


def at_least(minimum: float, kind: type) -> Callable[[str], float]:
    """An argument type: a number of `kind` that is at least `minimum`."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not value >= minimum:
            raise argparse.ArgumentTypeError(f"got '{text}', expected a number >= {minimum}")
        return value

    return parse


def listed(item: Callable[[str], float]) -> Callable[[str], list]:
    """An argument type: comma-separated values, each parsed by `item`."""

    def parse(text: str) -> list:
        return [item(part) for part in text.split(",")]

    return parse
