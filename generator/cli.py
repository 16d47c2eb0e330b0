"""Command line: `python -m generator {matrix,render,check,references,report} ...`.

The arguments are parsed here and each command runs in generator.commands. Exit codes: 0
done, 1 a checked combination failed, 2 bad usage or answers (one line on stderr, like
argparse).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from copier.errors import CopierError

from generator import REPO_ROOT, commands, matrix_doc, mutation, references
from generator.selection import DEVICE_FREE, SAMPLES


class _Parser(argparse.ArgumentParser):
    """argparse's parser, with its errors in one line (the usage is what --help is for)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def get_parser() -> argparse.ArgumentParser:
    """The parser, apart from main() so tests and docs can inspect it."""
    parser = _Parser(
        prog="python -m generator",
        description="Enumerate, render and check the combinations of answers copier.yml allows.",
    )
    subcommands = parser.add_subparsers(dest="command", required=True)

    matrix = subcommands.add_parser("matrix", help="list the combinations of the choices")
    matrix.add_argument("--json", action="store_true", help="a JSON list of {slug, answers}")
    _add_selection(matrix, every="(default)")

    render_ = subcommands.add_parser("render", help="render one project, defaults for the rest")
    render_.add_argument("dest", type=Path, help="an empty or missing directory")
    _add_sets(render_, "answer one question (repeatable)")

    check = subcommands.add_parser(
        "check",
        help="render, lint, train, resume, export and test combinations",
        description=(
            "Check combinations end to end: render, lint (ruff format --check, ruff check and "
            "the static checks), the project's fast dev run in a new process, a resume in "
            "another that trains --steps more, the export when one is chosen, and the "
            "project's own tests for a sample. Exit 1 when any combination fails."
        ),
    )
    _add_selection(check, every="")
    check.add_argument(
        "--jobs", type=_positive, default=1, metavar="J", help="combinations at once (default 1)"
    )
    check.add_argument(
        "--no-server",
        action="store_true",
        help="start each stage as a plain subprocess (python -m, torchrun) instead of forking "
        "it from a process server that has imported torch and the rest once",
    )
    check.add_argument(
        "--steps",
        type=_positive,
        default=2,
        metavar="S",
        help="optimizer steps the resume adds to the fast dev run's (default 2)",
    )
    check.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cpu passes --cpu true and hides GPUs; cuda runs on the GPUs (default cpu)",
    )
    check.add_argument(
        "--project-tests",
        choices=SAMPLES,
        default="sample",
        help="which combinations also run their own tests: sample (default), pairwise, rest, "
        "all or none; the sample is a greedy cover of the selection that uses each of its "
        "choices, and each task with each mixed_precision and each distributed choice, once or "
        "more (--gpu-matrix's: one suite for each task with each mixed_precision); pairwise is the "
        "selection's pairwise set (what --pairwise checks); both are "
        "taken before --shard; rest covers only what the reference projects leave unused, for runs "
        "whose reference projects' tests run too (make test), the pairs' only the test files their "
        "answers add to the task's default project; of the whole suites, only the fewest "
        "that give every choice to the whole-sweep tests (marker sweep) run them",
    )
    check.add_argument(
        "--report", type=Path, metavar="DIR", help="write DIR/report.json and DIR/report.md"
    )
    check.add_argument(
        "--workdir",
        type=Path,
        metavar="DIR",
        help="renders, runs and the compile cache; kept, failures included (default: a "
        "temporary folder, removed at the end)",
    )
    _add_references(subcommands)
    _add_mutate(subcommands)
    report = subcommands.add_parser(
        "report", help="merge the reports of a check's shards; write and date docs/MATRIX.md"
    )
    actions = report.add_subparsers(dest="action", required=True)
    merge = actions.add_parser(
        "merge",
        help="one report.json and report.md from shards' reports; exit 1 if any combination "
        "failed, 2 if the shards do not belong together (other commits, devices, overlaps)",
    )
    merge.add_argument("shards", nargs="+", type=Path, metavar="DIR", help="a shard's --report")
    merge.add_argument("--report", type=Path, required=True, metavar="DIR", help="where to write")
    _add_matrix_doc(actions)
    return parser


def _add_mutate(subcommands: argparse._SubParsersAction) -> None:
    mutate = subcommands.add_parser(
        "mutate",
        help="mutation-test the training core of a reference project (a copy of it) with "
        "mutmut; write the kill rate per module and every surviving mutant (hours on a CPU)",
    )
    mutate.add_argument("reference", help="a reference project's name, e.g. tabular_regression")
    mutate.add_argument(
        "--modules",
        default=",".join(mutation.CORE),
        help=f"modules of its package, comma-separated (default: {','.join(mutation.CORE)})",
    )
    mutate.add_argument("--jobs", type=int, default=2, help="mutants tested at once (default 2)")
    mutate.add_argument(
        "--workdir",
        type=Path,
        metavar="DIR",
        help="where the copy runs (default: a temporary folder, removed at the end)",
    )
    mutate.add_argument(
        "--resume", action="store_true", help="go on with the run copied in --workdir"
    )
    mutate.add_argument(
        "--launched",
        metavar="TESTS",
        help="test files (comma-separated, e.g. tests/test_distributed.py) to run for each "
        "mutant that only launched processes reach, which then run it",
    )
    _add_path(mutate, "--report", mutation.REPORT_DIR, "the folder of the reports")
    mutate.add_argument(
        "--rewrite",
        action="store_true",
        help=f"run nothing: rewrite the report from its JSON and {mutation.EQUIVALENTS}",
    )


def _add_matrix_doc(actions: argparse._SubParsersAction) -> None:
    write = actions.add_parser(
        "matrix",
        help="write docs/MATRIX.md from the whole matrix's shard reports (docs/matrix/"
        "shard-I-of-N/report.json) and the GPU matrix's, if any (docs/gpu-matrix/...); exit 2 "
        "if the first are missing or the shards of either do not belong together",
    )
    status = actions.add_parser(
        "status",
        help="one line: whether docs/MATRIX.md's whole matrix and GPU matrix were checked on "
        "HEAD's template (tree hashes), or which template commits came after; always exit 0",
    )
    for action in (write, status):
        _add_path(action, "--root", matrix_doc.MATRIX_DIR, "the folder of shard reports")
        _add_path(action, "--gpu-root", matrix_doc.GPU_DIR, "the GPU matrix's shard reports")
    _add_path(write, "--out", matrix_doc.MATRIX_MD, "where to write")
    _add_path(write, "--readme", REPO_ROOT / "README.md", "the README whose figures to rewrite")


def _add_references(subcommands: argparse._SubParsersAction) -> None:
    refs = subcommands.add_parser(
        "references",
        help="sync or check reference_projects/, the rendered projects kept as worked examples",
        description=(
            "reference_projects/ holds one rendered project per task type and a fully loaded "
            "one, each with the results of its default run. sync renders and trains them; "
            "check fails when a committed file differs from a fresh render."
        ),
    )
    actions = refs.add_subparsers(dest="action", required=True)
    sync = actions.add_parser(
        "sync",
        help="render each project, train its default run on the CPU, write RESULTS.md, "
        "results/ and the index",
    )
    check = actions.add_parser(
        "check",
        help="render each project into a temporary folder; exit 1 listing the files that "
        "differ from the committed ones (the results excepted)",
    )
    test = actions.add_parser(
        "test",
        help="run each committed project's own tests (the whole-sweep tests, marker sweep, "
        "in the image_classification_loaded and language_modeling projects only)",
    )
    for action in (sync, check, test):
        action.add_argument(
            "--only",
            nargs="+",
            action="extend",
            metavar="NAME",
            help="only these projects (default: every one)",
        )
        _add_path(action, "--root", references.REFERENCES_DIR, "the folder of reference projects")
    sync.add_argument(
        "--jobs",
        type=_positive,
        default=1,
        metavar="J",
        help="projects trained at once (default 1)",
    )
    test.add_argument(
        "--jobs", type=_positive, default=1, metavar="J", help="pytest workers (pytest -n J)"
    )


def _add_selection(parser: argparse.ArgumentParser, every: str) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help=f"every combination {every}".strip())
    which.add_argument(
        "--pairwise",
        action="store_true",
        help="a covering set in which every two choices of any two questions meet; `check` "
        "renders each with the shortest or the longest package name (unless --set names one)",
    )
    which.add_argument(
        "--gpu-matrix",
        action="store_true",
        help="every combination of the questions that change what runs on the device (all "
        f"but {', '.join(DEVICE_FREE)}), with {', '.join(DEVICE_FREE)} answered so that each "
        "of its choices meets every choice of the others; with --set distributed=single, "
        "what one GPU can check",
    )
    _add_sets(parser, "fix a question; the combinations of the others are selected (repeatable)")
    parser.add_argument(
        "--shard",
        default="1/1",
        metavar="I/N",
        help="only the I-th of N shards; the N shards cover the selection exactly once",
    )


def _add_path(parser: argparse.ArgumentParser, flag: str, default: Path, what: str) -> None:
    """An option naming a file or folder, its default shown relative to the repository."""
    shown = default.relative_to(REPO_ROOT).as_posix() + ("/" if default.suffix == "" else "")
    parser.add_argument(
        flag,
        type=Path,
        default=default,
        metavar="DIR" if default.suffix == "" else "FILE",
        help=f"{what} (default: {shown})",
    )


def _add_sets(parser: argparse.ArgumentParser, help_: str) -> None:
    parser.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="NAME=VALUE", help=help_
    )


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and return its exit status; tests call it with `argv`."""
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.command == "check" and not (args.all or args.pairwise or args.gpu_matrix or args.sets):
        print(
            "python -m generator check: error: choose the combinations: --all, --pairwise, "
            "--gpu-matrix or --set NAME=VALUE",
            file=sys.stderr,
        )
        return 2
    try:
        if args.command == "matrix":
            return commands.list_matrix(args)
        if args.command == "check":
            return commands.check_combinations(args, sys.argv[1:] if argv is None else list(argv))
        if args.command == "references":
            return commands.run_references(args)
        if args.command == "mutate":
            return commands.mutation_report(args)
        if args.command == "report" and args.action == "merge":
            return commands.merge_reports(args, sys.argv[1:] if argv is None else list(argv))
        if args.command == "report":
            return commands.matrix_report(args)
        return commands.render_project(args)
    except (ValueError, CopierError) as error:  # copier reports a failed validator as ValueError
        message = " ".join(str(error).split())  # copier's messages may span lines
        command = " ".join(filter(None, [args.command, getattr(args, "action", None)]))
        print(f"python -m generator {command}: error: {message}", file=sys.stderr)
        return 2
