"""The commands' argument parser (export, tune, sample): argparse, with a wrong argument
reported in one line with the usage, never a traceback, and the value checks they share.
Training's own `--field value` arguments and `--config FILE` are parsed and checked by
config.load_config, with the strict YAML reader below; the help of both lists the config's
fields with the comments written beside them in config.py."""

import argparse
import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, NoReturn

import yaml

PACKAGE = __name__.split(".")[0]


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line; options are never abbreviated, so that
    an option a command passes on to load_config is not taken for one of its own."""

    def __init__(self, command: str, description: str):
        super().__init__(
            prog=f"python -m {PACKAGE}.{command}", description=description, allow_abbrev=False
        )

    def error(self, message: str) -> NoReturn:
        usage = " ".join(self.format_usage().split())
        raise SystemExit(f"error: {message} ({usage})")

    def add_config_fields(self, config: type, intro: str) -> None:
        """List the fields of the dataclass `config` after the options in --help, for a
        command that passes every other `--field value` on to load_config; a field that an
        option of the command takes the place of (sweep's --seed) is left out."""
        own = {action.dest for action in self._actions}
        self.epilog = f"{intro}:\n{describe_fields(config, skip=own)}"
        self.formatter_class = argparse.RawDescriptionHelpFormatter


def config_help(command: str, config: type) -> str:
    """The --help of a command whose arguments are all fields of the dataclass `config`."""
    return (
        f"usage: python -m {PACKAGE}.{command} [--config FILE] [--field value ...]\n\n"
        "Values resolve in order: the defaults below < --config FILE (YAML, field: value) < "
        f"--field value\n(or --field=value; a flag alone, as --cpu, means true).\n\n"
        f"fields ({config.__name__} in config.py):\n{describe_fields(config)}"
    )


def describe_fields(config: type, skip: Collection[str] = ()) -> str:
    """`--name TYPE (default: VALUE)` for each field of the dataclass `config`, and below it
    the comments beside and above the field in its source, grouped under its `# --- section`
    rules: the comments are the one description of the fields, for readers and for --help."""
    try:
        source = textwrap.dedent(inspect.getsource(config))
    except (OSError, TypeError):  # no source installed: names, types and defaults only
        source = ""
    comments = {
        token.start[0]: token.string.lstrip("#").strip()
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    source_lines = source.splitlines()
    defaults = {field.name: field.default for field in dataclasses.fields(config)}
    lines, section = [], None
    statements = ast.parse(source).body[0].body if source else []
    annotated = {node.target.id: node for node in statements if isinstance(node, ast.AnnAssign)}
    for field in dataclasses.fields(config):
        node = annotated.get(field.name)
        above = []  # the comment lines just above the field, up to a section rule
        line = node.lineno - 1 if node else 0
        while line in comments and source_lines[line - 1].lstrip().startswith("#"):
            if comments[line].startswith("---"):
                break
            above.insert(0, comments[line])
            line -= 1
        if line in comments and comments[line].startswith("---") and comments[line] != section:
            section = comments[line]
            lines.append(f"\n{section.removeprefix('---').strip()}")
        if field.name in skip:
            continue
        kind = ast.unparse(node.annotation) if node else getattr(field.type, "__name__", field.type)
        lines.append(f"  --{field.name} {kind} (default: {_as_typed(defaults[field.name])})")
        beside = [comments[node.lineno]] if node and node.lineno in comments else []
        text = " ".join(above + beside)
        lines += textwrap.wrap(text, 88, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


def _as_typed(value: object) -> str:
    """A default as it is typed on the command line."""
    if isinstance(value, bool):
        return str(value).lower()
    return "none" if value is None else str(value)


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


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a key given twice in one mapping: safe_load keeps the last
    value without a word, and the run would not be the one the file seems to describe."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = self.construct_object(key_node)
                if key in seen:
                    line = key_node.start_mark.line + 1
                    raise ValueError(f"line {line}: '{key}' is given twice; keep one")
                seen.add(key)
        return super().construct_mapping(node, deep)


def read_mapping(path: Path) -> dict[str, Any]:
    """A YAML file of `name: value` lines; ValueError with one line saying what is wrong."""
    try:
        content = path.read_bytes()
        data = yaml.load(content.decode("utf-8"), _UniqueKeyLoader)
    except (OSError, yaml.YAMLError) as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise ValueError(f"cannot read it ({reason})") from None
    except UnicodeDecodeError as error:
        line = content[: error.start].count(b"\n") + 1
        raise ValueError(
            f"line {line} holds byte 0x{content[error.start]:02x}, which is not UTF-8; save "
            "the file as UTF-8"
        ) from None
    if not isinstance(data, dict):
        raise ValueError("expected a mapping of field: value")
    return data
