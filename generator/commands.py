"""What each command of `python -m generator` does and prints, given its parsed arguments.

generator.cli parses the arguments and dispatches here; each command returns its exit code:
0 done, 1 a checked combination (or reference project) failed, 2 bad usage or answers. A
command raises ValueError (AnswerError) or CopierError for bad answers; cli prints it.
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

from generator import matrix_doc, mutation, mutation_text, reference_runs, references
from generator.answers import AnswerError, Answers, AnswerSpace, load_space
from generator.check import Result
from generator.folders import require_folder, write_whole
from generator.launch import Options, processes, visible_gpus
from generator.parallel import check_all
from generator.provenance import machine, now, template_commit, template_trees
from generator.render import render
from generator.report import REPORT_FOLDER, merge, require_report_folder, write_report
from generator.selection import Shard, check_selection, select, sweep_sample, whole_suites
from generator.server import ServerDied


def list_matrix(args: argparse.Namespace) -> int:
    space = load_space()
    shard = Shard.parse(args.shard)
    _, combinations = select(
        space, args.sets, pairwise_only=args.pairwise, gpu_matrix=args.gpu_matrix, shard=shard
    )
    if args.json:
        rows = [{"slug": space.slug(c), "answers": c} for c in combinations]
        print(json.dumps(rows, indent=2))
    else:
        print("\n".join(space.slug(c) for c in combinations))
    return 0


def render_project(args: argparse.Namespace) -> int:
    answers = load_space().parse_sets(args.sets)
    print(render(answers, args.dest))
    return 0


def check_combinations(args: argparse.Namespace, argv: Sequence[str]) -> int:
    space = load_space()
    combinations, sample = check_selection(
        space,
        args.sets,
        args.shard,
        pairwise_only=args.pairwise,
        gpu_matrix=args.gpu_matrix,
        project_tests=args.project_tests,
    )
    if args.report:
        require_report_folder(args.report)
    if args.workdir:
        require_folder(args.workdir, "--workdir", REPORT_FOLDER)
    if args.device == "cuda":
        _require_gpus(combinations)
    # How many the shards of this command check together (docs/MATRIX.md counts against it).
    _, selection = select(space, args.sets, pairwise_only=args.pairwise, gpu_matrix=args.gpu_matrix)

    with tempfile.TemporaryDirectory(prefix="generator-check-") as scratch:
        workdir = args.workdir or Path(scratch)
        rest = args.project_tests == "rest"  # of which few run sweeps, and some added tests
        options = Options(
            workdir / "compile-cache",
            args.device,
            args.steps,
            args.jobs,
            not args.no_server,
            _outside(space, sample, sweep_sample(space, sample)) if rest else frozenset(),
            every_sweep_test=not rest,
            added_tests_only=_outside(space, sample, whole_suites(space, sample))
            if rest
            else frozenset(),
        )
        print(
            f"checking {len(combinations)} combinations on {args.device}, "
            f"{args.jobs} at a time, in {workdir}",
            flush=True,
        )
        # Before anything renders: what the combinations are rendered from.
        started, commit, trees = now(), template_commit(), template_trees()
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
            "selected": len(selection),
            "jobs": args.jobs,
            "server": not args.no_server,
            "steps": args.steps,
            "wall_s": round(wall_s, 1),
            "cpu_s": round(cpu_s, 1),
            "commit": commit,
            "trees": trees,
            "started": started,
            "finished": now(),
            "machine": machine(args.device),
        }
        print(f"report: {write_report(args.report, results, meta)}")
    return 1 if failed else 0


def merge_reports(args: argparse.Namespace, argv: Sequence[str]) -> int:
    require_report_folder(args.report)
    results, meta = merge(args.shards, "python -m generator " + shlex.join(argv))
    failed = sum(not result.ok for result in results)
    print(f"{len(results) - failed} passed, {failed} failed in {len(args.shards)} shard(s)")
    print(f"report: {write_report(args.report, results, meta)}")
    return 1 if failed else 0


def matrix_report(args: argparse.Namespace) -> int:
    """`report matrix` writes docs/MATRIX.md; `report status` prints whether it is current."""
    if args.action == "status":
        print(matrix_doc.status(args.root, gpu_root=args.gpu_root))
        return 0
    written = matrix_doc.write(args.root, args.out, args.readme, args.gpu_root)
    print(f"wrote {written} and {args.readme}'s figures")
    return 0


def run_references(args: argparse.Namespace) -> int:
    references.select(args.only)  # a bad name fails before anything is rendered or run
    if args.action == "check":
        return _check_references(args.root, args.only)
    if args.action == "test":
        return _test_references(args.root, args.only, args.jobs)
    return _sync_references(args.root, args.only, args.jobs)


def _check_references(root: Path, only: Sequence[str] | None) -> int:
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


def _show(outcome: reference_runs.Outcome) -> None:
    status = "pass" if outcome.ok else "FAIL"
    print(f"{status:<5} {outcome.ref.name}: {outcome.message}", flush=True)


def _sync_references(root: Path, only: Sequence[str] | None, jobs: int) -> int:
    start = time.perf_counter()
    done = reference_runs.sync(root, only, jobs, _show)
    failed = [outcome for outcome in done if not outcome.ok]
    print(
        f"synced {len(done) - len(failed)} of {len(done)} reference projects into {root} "
        f"in {time.perf_counter() - start:.0f} s"
    )
    return 1 if failed else 0


def _test_references(root: Path, only: Sequence[str] | None, jobs: int) -> int:
    results = reference_runs.run_project_tests(root, only, jobs, _show)
    return 0 if all(outcome.ok for outcome in results) else 1


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


def _outside(space: AnswerSpace, sample: list[Answers], chosen: list[Answers]) -> frozenset[str]:
    """The slugs of the combinations of `sample` that `chosen` leaves out."""
    return frozenset(space.slug(answers) for answers in sample) - {space.slug(c) for c in chosen}


def mutation_report(args: argparse.Namespace) -> int:
    """`mutate`: run mutmut over the modules (or, with --rewrite, nothing), then write
    REFERENCE.md and REFERENCE.json with the survivors equivalent.toml explains."""
    modules = [name.strip() for name in args.modules.split(",") if name.strip()]
    mutation.module_paths(args.reference, modules)  # a bad name fails before anything runs
    launched = mutation.test_paths(args.reference, args.launched)  # checked before the run
    require_folder(args.report, "--report", "a folder for the mutation reports")
    if args.workdir:
        require_folder(args.workdir, "--workdir", "a folder to copy the project into")
    elif args.resume:
        raise ValueError("--resume: give --workdir, the folder of the run to continue")
    # The earlier report and the explanations, read before the hours of mutants: one that
    # cannot be read stops the command now, not after the run.
    earlier_json = args.report / f"{args.reference}.json"
    try:
        earlier = json.loads(earlier_json.read_text()) if earlier_json.is_file() else {}
        mutation_text.merged(earlier, [])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{earlier_json}: not a report of this command ({error!r})") from None
    equivalents = mutation.load_equivalents(args.report / mutation.EQUIVALENTS)
    if args.rewrite and not earlier:
        raise ValueError(f"--rewrite: no report to rewrite at {earlier_json}")
    results = [] if args.rewrite else _mutants(args, modules, launched)
    results = mutation_text.merged(earlier, results)
    stale = mutation.explain(results, equivalents)
    header = [
        "Written by `python -m generator mutate`. Kill rate: killed over killed and survived, "
        f"equivalent mutants aside (each explained below, from {mutation.EQUIVALENTS}); a "
        "timeout (a test stopped at mutmut's CPU limit) is to run again; `no tests`: no test "
        "reached the mutated function in-process, and no --launched test file ran it."
    ]
    markdown = mutation_text.as_markdown(args.reference, results, header, stale)
    texts = {
        f"{args.reference}.md": markdown,
        f"{args.reference}.json": json.dumps(mutation_text.as_json(results), indent=1),
    }
    write_whole(args.report, texts)
    print(markdown.split("\n## ", 1)[0])
    return 0


def _mutants(
    args: argparse.Namespace, modules: list[str], tests: list[str]
) -> list[mutation.ModuleResult]:
    started, commit, start = now(), template_commit(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="generator-mutate-") as scratch:
        workdir = args.workdir or Path(scratch)
        results = mutation.mutate(args.reference, modules, workdir, args.jobs, tests, args.resume)
    minutes = (time.perf_counter() - start) / 60
    launched = f" --launched {args.launched}" if args.launched else ""
    launched += " --resume" if args.resume else ""  # its minutes are then the last part's
    run = (
        f"`mutate {args.reference} --modules {','.join(modules)} --jobs {args.jobs}{launched}`, "
        f"template {commit[:12]}, started {started}, {minutes:.0f} min on "
        f"{machine()['cores']} cores"
    )
    for result in results:
        result.run = run
    return results
