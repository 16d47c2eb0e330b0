"""Command line: `python -m generator {matrix,render} ...`.

Exit codes: 0 done, 2 bad usage or answers (one line on stderr, like argparse).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from copier.errors import CopierError

from generator.answers import load_space
from generator.render import render


def get_parser() -> argparse.ArgumentParser:
    """The parser, apart from main() so tests and docs can inspect it."""
    parser = argparse.ArgumentParser(
        prog="python -m generator",
        description="Enumerate and render the combinations of answers that copier.yml allows.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    matrix = commands.add_parser("matrix", help="list every combination of the choices")
    matrix.add_argument("--json", action="store_true", help="a JSON list of {slug, answers}")

    render_ = commands.add_parser("render", help="render one project, defaults for the rest")
    render_.add_argument("dest", type=Path, help="an empty or missing directory")
    render_.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="answer one question (repeatable)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and return its exit status; tests call it with `argv`."""
    args = get_parser().parse_args(argv)
    try:
        if args.command == "matrix":
            return _matrix(as_json=args.json)
        return _render(args.dest, args.sets)
    except (ValueError, CopierError) as error:  # copier reports a failed validator as ValueError
        message = " ".join(str(error).split())  # copier's messages may span lines
        print(f"python -m generator {args.command}: error: {message}", file=sys.stderr)
        return 2


def _matrix(*, as_json: bool) -> int:
    space = load_space()
    combinations = space.combinations()
    if as_json:
        rows = [{"slug": space.slug(c), "answers": c} for c in combinations]
        print(json.dumps(rows, indent=2))
    else:
        print("\n".join(space.slug(c) for c in combinations))
    return 0


def _render(dest: Path, sets: Sequence[str]) -> int:
    answers = load_space().parse_sets(sets)
    print(render(answers, dest))
    return 0
