"""The report of a mutation run (`python -m generator mutate`): a row per module with its kill
rate, the run each comes from, and every surviving mutant's diff; and its JSON, which a later
run of other modules merges into."""

from __future__ import annotations

import math

from generator.mutation import CORE, EQUIVALENTS, PROCESSES, ModuleResult


def as_markdown(
    reference: str, results: list[ModuleResult], header: list[str], stale: list[str]
) -> str:
    """The report: a row per module, the run each comes from, then every survivor's diff:
    the gaps first, then the equivalent mutants with their reasons."""
    lines = [f"# Mutation testing: {reference}", "", *header, ""]
    lines += [
        "| module | mutants | killed | survived | equivalent | timeout | no tests | kill rate |"
    ]
    lines += ["|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        rate = "-" if r.kill_rate is None else percent_down(r.kill_rate)
        counts = [len(r.statuses), r.count("killed"), len(r.gaps), len(r.equivalent)]
        counts += [r.count("timeout"), r.count("no tests")]
        lines.append(f"| {r.module} | {' | '.join(map(str, counts))} | {rate} |")
    lines += ["", "Runs:", ""] + [f"- {r.module}: {r.run}" for r in results]
    if stale:
        lines += ["", f"Explanations in {EQUIVALENTS} of another change than the mutant's now:"]
        lines += [""] + [f"- `{name}`" for name in sorted(stale)]
    for r in results:
        for name in r.gaps:
            lines += ["", f"## Survivor `{name}`", "", "```diff", r.diffs[name], "```"]
    for r in results:
        for name, why in sorted(r.equivalent.items()):
            lines += ["", f"## Equivalent `{name}`", "", why, "", "```diff", r.diffs[name], "```"]
    return "\n".join(lines) + "\n"


def percent_down(rate: float) -> str:
    """A whole percentage, rounded down: a module with a survivor never reads 100%."""
    return f"{math.floor(round(rate * 100, 9))}%"  # 0.29 * 100 is 28.999999999999996


def as_json(results: list[ModuleResult]) -> dict:
    return {r.module: {"run": r.run, "statuses": r.statuses, "survivors": r.diffs} for r in results}


def merged(earlier: dict, results: list[ModuleResult]) -> list[ModuleResult]:
    """The modules of an earlier report (as_json's), each replaced where this run tested it:
    a core is tested a few modules at a time, in runs of an hour or so."""
    by_module = {
        name: ModuleResult(name, entry["statuses"], entry["survivors"], entry["run"])
        for name, entry in earlier.items()
    }
    by_module |= {r.module: r for r in results}
    order = [*CORE, *PROCESSES, *sorted(set(by_module) - set(CORE + PROCESSES))]
    return [by_module[name] for name in order if name in by_module]
