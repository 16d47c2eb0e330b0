"""Command line: `python -m generator {matrix,render,check,references} ...`.

Exit codes: 0 done, 1 a checked combination failed, 2 bad usage or answers (one line on
stderr, like argparse).
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from copier.errors import CopierError

from generator import references
from generator.answers import AnswerError, Answers, load_space
from generator.check import Options, Result, check_all, processes, visible_gpus
from generator.cover import TESTED_PAIRS, covering
from generator.render import render
from generator.report import merge, template_commit, write_report
from generator.selection import Shard, matching, rest_sample, select, with_user_names
from generator.server import ServerDied

SAMPLES = ("sample", "rest", "all", "none")


def get_parser() -> argparse.ArgumentParser:
    """The parser, apart from main() so tests and docs can inspect it."""
    parser = argparse.ArgumentParser(
        prog="python -m generator",
        description="Enumerate, render and check the combinations of answers copier.yml allows.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    matrix = commands.add_parser("matrix", help="list the combinations of the choices")
    matrix.add_argument("--json", action="store_true", help="a JSON list of {slug, answers}")
    _add_selection(matrix, every="(default)")

    render_ = commands.add_parser("render", help="render one project, defaults for the rest")
    render_.add_argument("dest", type=Path, help="an empty or missing directory")
    _add_sets(render_, "answer one question (repeatable)")

    check = commands.add_parser(
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
        help="which combinations also run their own tests: sample (default), rest, all or "
        "none; the sample is a greedy cover of the selection that uses each of its choices, and "
        "each task with each mixed_precision and each distributed choice, once or more, taken "
        "before --shard; rest covers only what the reference projects leave unused, for runs "
        "whose reference projects' tests run too (make test)",
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
    _add_references(commands)
    report = commands.add_parser("report", help="merge the reports of a check's shards")
    merge = report.add_subparsers(dest="action", required=True).add_parser(
        "merge",
        help="one report.json and report.md from shards' reports; exit 1 if any combination "
        "failed, 2 if the shards do not belong together (other commits, devices, overlaps)",
    )
    merge.add_argument("shards", nargs="+", type=Path, metavar="DIR", help="a shard's --report")
    merge.add_argument("--report", type=Path, required=True, metavar="DIR", help="where to write")
    return parser


def _add_references(commands: argparse._SubParsersAction) -> None:
    refs = commands.add_parser(
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
    test = actions.add_parser("test", help="run each committed project's own tests")
    for action in (sync, check, test):
        action.add_argument(
            "--only",
            nargs="+",
            action="extend",
            metavar="NAME",
            help="only these projects (default: every one)",
        )
        action.add_argument(
            "--root",
            type=Path,
            default=references.REFERENCES_DIR,
            metavar="DIR",
            help="the folder of reference projects (default: reference_projects/)",
        )
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
    _add_sets(parser, "fix a question; the combinations of the others are selected (repeatable)")
    parser.add_argument(
        "--shard",
        default="1/1",
        metavar="I/N",
        help="only the I-th of N shards; the N shards cover the selection exactly once",
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
    if args.command == "check" and not (args.all or args.pairwise or args.sets):
        print(
            "python -m generator check: error: choose the combinations: --all, --pairwise "
            "or --set NAME=VALUE",
            file=sys.stderr,
        )
        return 2
    try:
        if args.command == "matrix":
            return _matrix(args)
        if args.command == "check":
            return _check(args, sys.argv[1:] if argv is None else list(argv))
        if args.command == "references":
            return _references(args)
        if args.command == "report":
            return _merge_reports(args, sys.argv[1:] if argv is None else list(argv))
        return _render(args.dest, args.sets)
    except (ValueError, CopierError) as error:  # copier reports a failed validator as ValueError
        message = " ".join(str(error).split())  # copier's messages may span lines
        command = " ".join(filter(None, [args.command, getattr(args, "action", None)]))
        print(f"python -m generator {command}: error: {message}", file=sys.stderr)
        return 2


def _matrix(args: argparse.Namespace) -> int:
    space = load_space()
    shard = Shard.parse(args.shard)
    _, combinations = select(space, args.sets, pairwise_only=args.pairwise, shard=shard)
    if args.json:
        rows = [{"slug": space.slug(c), "answers": c} for c in combinations]
        print(json.dumps(rows, indent=2))
    else:
        print("\n".join(space.slug(c) for c in combinations))
    return 0


def _render(dest: Path, sets: Sequence[str]) -> int:
    answers = load_space().parse_sets(sets)
    print(render(answers, dest))
    return 0


def _check(args: argparse.Namespace, argv: Sequence[str]) -> int:
    space = load_space()
    shard = Shard.parse(args.shard)
    fixed, selection = select(space, args.sets, pairwise_only=args.pairwise)
    if args.project_tests == "rest":
        # From every combination the --set answers leave: --pairwise and --all hold them.
        sample = rest_sample(space, matching(space.combinations(), fixed))
    elif args.project_tests == "sample":
        sample = covering(space, selection, (), TESTED_PAIRS)
    else:
        sample = selection if args.project_tests == "all" else []
    combinations = shard.take(selection, space.slug)
    if not combinations:
        raise AnswerError(f"shard {args.shard} of {len(selection)} combinations is empty")
    if args.device == "cuda":
        _require_gpus(combinations)
    # Free-text answers given with --set (a project name, say) go into every render.
    combinations = [fixed | answers for answers in combinations]
    sample = [fixed | answers for answers in sample]
    if args.pairwise and not {"project_name", "package_name"} & fixed.keys():
        # The pairwise check proves the names users type too, not only the default.
        combinations = with_user_names(space, combinations)
        sample = with_user_names(space, sample)

    with tempfile.TemporaryDirectory(prefix="generator-check-") as scratch:
        workdir = args.workdir or Path(scratch)
        options = Options(
            workdir / "compile-cache", args.device, args.steps, args.jobs, not args.no_server
        )
        print(
            f"checking {len(combinations)} combinations on {args.device}, "
            f"{args.jobs} at a time, in {workdir}",
            flush=True,
        )
        start, cpu_start = time.perf_counter(), _cpu_seconds()
        try:
            results = check_all(
                space, combinations, sample, workdir, options, _progress(combinations)
            )
        except ServerDied as error:
            print(f"error: {error}, and again after a restart: the check stops", file=sys.stderr)
            return 2
        wall_s, cpu_s = time.perf_counter() - start, _cpu_seconds() - cpu_start

    failed = [r for r in results if not r.ok]
    for result in failed:
        print(f"\n--- {result.slug}: {result.failed_stage} failed\n{result.log_tail}")
    print(
        f"\n{len(results) - len(failed)} passed, {len(failed)} failed in {wall_s:.0f} s "
        f"({cpu_s:.0f} CPU seconds)"
    )
    if args.report:
        meta = {
            "command": "python -m generator " + shlex.join(argv),
            "device": args.device,
            "jobs": args.jobs,
            "server": not args.no_server,
            "steps": args.steps,
            "wall_s": round(wall_s, 1),
            "cpu_s": round(cpu_s, 1),
            "commit": template_commit(),
        }
        print(f"report: {write_report(args.report, results, meta)}")
    return 1 if failed else 0


def _merge_reports(args: argparse.Namespace, argv: Sequence[str]) -> int:
    results, meta = merge(args.shards, "python -m generator " + shlex.join(argv))
    failed = sum(not result.ok for result in results)
    print(f"{len(results) - failed} passed, {failed} failed in {len(args.shards)} shard(s)")
    print(f"report: {write_report(args.report, results, meta)}")
    return 1 if failed else 0


def _references(args: argparse.Namespace) -> int:
    references.select(args.only)  # a bad name fails before anything is rendered or run
    if args.action == "check":
        return _references_check(args.root, args.only)
    if args.action == "test":
        return _references_test(args.root, args.only, args.jobs)
    return _references_sync(args.root, args.only, args.jobs)


def _references_check(root: Path, only: Sequence[str] | None) -> int:
    start = time.perf_counter()
    problems = references.check(root, only)
    for problem in problems:
        print(problem)
    if problems:
        print(
            f"{len(problems)} file(s) of {root} differ from what the template renders; "
            "run `python -m generator references sync`"
        )
        return 1
    print(f"{root}: in sync with the template ({time.perf_counter() - start:.1f} s)")
    return 0


def _references_sync(root: Path, only: Sequence[str] | None, jobs: int) -> int:
    def show(trained: references.Trained) -> None:
        status = "pass" if trained.ok else "FAIL"
        print(f"{status:<5} {trained.ref.name}: {trained.message}", flush=True)

    start = time.perf_counter()
    done = references.sync(root, only, jobs, show)
    failed = [trained for trained in done if not trained.ok]
    print(
        f"synced {len(done) - len(failed)} of {len(done)} reference projects into {root} "
        f"in {time.perf_counter() - start:.0f} s"
    )
    return 1 if failed else 0


def _references_test(root: Path, only: Sequence[str] | None, jobs: int) -> int:
    def show(tested: references.Tested) -> None:
        ref, ok, seconds, log_tail = tested
        print(f"{'pass' if ok else 'FAIL':<5} {ref.name} {seconds:.0f} s", flush=True)
        if not ok:
            print(log_tail, flush=True)

    results = references.run_project_tests(root, only, jobs, show)
    return 0 if all(ok for _, ok, _, _ in results) else 1


def _progress(combinations: Sequence[Answers]) -> Callable[[int, Result], None]:
    """One line per finished combination, as they finish."""
    width = len(str(len(combinations)))

    def show(done: int, result: Result) -> None:
        status = "pass" if result.ok else f"FAIL ({result.failed_stage})"
        notes = f"  [{'; '.join(result.notes)}]" if result.notes else ""
        print(
            f"[{done:>{width}}/{len(combinations)}] {status:<16} {result.slug} "
            f"{result.seconds:.0f} s{notes}",
            flush=True,
        )

    return show


def _cpu_seconds() -> float:
    """CPU time of this process and every process it started and reaped, their children too.

    On a machine shared with other work, wall time says little; CPU time depends on it less.
    """
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _require_gpus(combinations: Sequence[Answers]) -> None:
    """Refuse before rendering anything when the GPUs can't run the selection."""
    gpus = visible_gpus()
    needed = max(processes(answers) for answers in combinations)
    if gpus < needed:
        raise AnswerError(
            f"--device cuda: the selection needs {needed} GPU(s) and torch sees {gpus}; "
            "use --device cpu, or leave out the combinations that launch more with --set"
        )
