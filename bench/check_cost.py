"""Cost of checking the matrix: `python bench/check_cost.py [--jobs J] [--set NAME=VALUE ...]`.

Runs `python -m generator check --pairwise --project-tests none` three times on the same
fixed, mixed selection, in one work folder and so with one compile cache, as a matrix run
has: through the process server with the cache empty (cold), with `--no-server`, then
through the server again. It reports the CPU seconds per combination of each (the check's
process and every process it started) and the ratio of the last two, which differ only in
how the stages start. The warm figure is the matrix's: there each model's graphs compile
once and the other combinations of that task, precision and process count load them.
The pairwise set holds every task, compile on and off, single and multi, every export
target and tracker; `--set` narrows it (the repository's tests run one combination).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from common import environment, write_result

from generator import REPO_ROOT

TARGET_CPU_S = 10  # per combination, with the server


def check(label: str, extra: Sequence[str], args: argparse.Namespace, tmp: Path) -> dict:
    report = tmp / label
    command = [sys.executable, "-m", "generator", "check", "--pairwise", "--device", "cpu"]
    command += ["--project-tests", "none", "--jobs", str(args.jobs), "--report", str(report)]
    command += ["--workdir", str(tmp / "work")]  # one compile cache for every pass
    command += [arg for name in args.sets for arg in ("--set", name)] + list(extra)
    # A failing combination exits 1 and is counted in the report; no report is an error.
    subprocess.run(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
    written = json.loads((report / "report.json").read_text(encoding="utf-8"))
    count = len(written["results"])
    return {
        "combinations": count,
        "passed": written["passed"],
        "wall_s": written["wall_s"],
        "cpu_s": written["cpu_s"],
        "cpu_s_per_combination": written["cpu_s"] / count,
        "stage_s": _stage_totals(written["results"]),
        # what a failed combination says, so a failure is read from the result alone
        "failures": [
            f"{r['slug']}: {r['failed_stage']} stage: {r['log_tail'][-1000:]}"
            for r in written["results"]
            if not r["ok"]
        ],
    }


def _stage_totals(results: list[dict]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for result in results:
        for stage in result["stages"]:
            totals[stage["name"]] = totals.get(stage["name"], 0) + stage["seconds"]
    return {name: round(seconds, 1) for name, seconds in totals.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="combinations checked at once")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--out", type=Path, help="JSON file (default: bench/results/)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        cold = check("server-cold", [], args, Path(tmp))
        plain = check("no-server", ["--no-server"], args, Path(tmp))
        server = check("server", [], args, Path(tmp))
    result = {
        "benchmark": "check_cost",
        "selection": ["--pairwise", *(f"--set {name}" for name in args.sets)],
        "jobs": args.jobs,
        "server_cold_cache": cold,
        "server": server,
        "no_server": plain,
        "cpu_ratio": server["cpu_s"] / plain["cpu_s"],
        "target_cpu_s_per_combination": TARGET_CPU_S,
        "environment": environment(),
    }
    path = write_result("check_cost", result, args.out)
    runs = (("server, cold cache", cold), ("no server", plain), ("server", server))
    for label, run in runs:
        print(
            f"{label:>18}: {run['combinations']} combinations, {run['passed']} passed, "
            f"{run['cpu_s_per_combination']:.1f} CPU s each, {run['wall_s']:.0f} s wall"
        )
    print(
        f"CPU with the server / without: {result['cpu_ratio']:.2f} (target: <= {TARGET_CPU_S} "
        "CPU s a combination with it)"
    )
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
