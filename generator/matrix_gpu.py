"""docs/MATRIX.md's last section: the GPU matrix, as the shard reports of `check --gpu-matrix
--device cuda` committed under docs/gpu-matrix/ say it went (generator.matrix_doc loads them).

The GPU matrix is every combination whose behaviour on a GPU differs (selection.device_product),
with one project's own suite for each task with each mixed precision. Without its reports the
section says so, and how to make them.
"""

from __future__ import annotations

from collections import Counter

from generator.check import Result
from generator.cover import TESTED_PAIRS
from generator.matrix_text import Matrix, duration, failure_lines, shard_command, where_rows
from generator.selection import DEVICE_FREE

# What one shard of the single-process GPU matrix runs: `report matrix` reads its reports.
COMMAND = (
    "python -m generator check --gpu-matrix --set distributed=single --device cuda "
    "--shard I/N --report docs/gpu-matrix/shard-I-of-N"
)
TWO_GPUS = (
    "the two-process combinations (`--set distributed=multi` and `sharded`) need a machine with "
    "two GPUs"
)


def gpu_section(gpu: Matrix | None, cpu: Matrix) -> list[str]:
    """The section's lines: what the GPU matrix's shards found, beside the CPU matrix `cpu`."""
    lines = ["## The GPU matrix", ""]
    if gpu is None:
        return [
            *lines,
            f"No GPU report is committed yet: shard I of N is `{COMMAND}`, then `python -m "
            f"generator report matrix` writes it here; {TWO_GPUS}.",
        ]
    results = gpu.results
    failed = [r for r in results if not r.ok]
    tested = [r for r in results if _ran_tests(r)]
    selected = max((s.get("selected", 0) for s in gpu.shards), default=0) or len(results)
    lines += [
        "Written from the shards' reports in [`docs/gpu-matrix/`](gpu-matrix/): every "
        "combination whose behaviour on a GPU differs, with each choice of "
        f"{' and '.join(DEVICE_FREE)} meeting every other answer; {TWO_GPUS}. Shard I ran "
        f"`{shard_command(gpu.shards[0]['command'])}`.",
        "",
        f"**{len(results)} of {selected} combinations checked on the GPU, "
        f"{len(results) - len(failed)} passed, {len(failed)} failed**; {len(tested)} ran "
        "their own tests as well.",
        "",
        _suites_line(results),
    ]
    missing = [i for i in range(1, gpu.count + 1) if i not in gpu.done]
    if missing:
        lines += ["", f"Shards not run yet: {', '.join(f'{i}/{gpu.count}' for i in missing)}."]
    same = "the CPU matrix's" if gpu.meta["trees"] == cpu.meta["trees"] else "not the CPU matrix's"
    lines += [
        "",
        *where_rows(gpu),
        "",
        f"These trees are {same}; `python -m generator report status` says whether they are "
        "still HEAD's.",
        "",
        f"In total: {duration(sum(s['wall_s'] for s in gpu.shards))} of wall time over "
        f"{len(gpu.shards)} shard{'s' * (len(gpu.shards) != 1)}, "
        f"{duration(sum(s.get('cpu_s', 0) for s in gpu.shards))} of CPU time.",
    ]
    notes = Counter(note for r in results for note in r.notes)
    if notes:
        lines += ["", *(f"- {note} ({count})" for note, count in sorted(notes.items()))]
    if failed:
        lines += ["", "Failures:", "", *failure_lines(failed, gpu.meta["device"])]
    return [*lines, "", *_combination_table(results)]


def _ran_tests(result: Result) -> bool:
    return any(stage.name == "tests" for stage in result.stages)


def _suites_line(results: list[Result]) -> str:
    """How many of the pairs of answers that TESTED_PAIRS names, of those checked here, met
    in a project's own suite that passed on the GPU."""
    checked = {(pair, tuple(r.answers[q] for q in pair)) for r in results for pair in TESTED_PAIRS}
    passed = {
        (pair, tuple(r.answers[q] for q in pair))
        for r in results
        if r.ok and _ran_tests(r)
        for pair in TESTED_PAIRS
    }
    met = "every one" if passed == checked else str(len(passed))
    names = ", ".join(" x ".join(pair) for pair in TESTED_PAIRS)
    return (
        f"Own suites passed on the GPU for {met} of the {len(checked)} pairs of answers checked "
        f"here that a suite must meet ({names})."
    )


def _combination_table(results: list[Result]) -> list[str]:
    return [
        f"<details><summary>{sum(r.ok for r in results)} of {len(results)} passed on the "
        "GPU</summary>",
        "",
        "| combination | result | own tests | seconds |",
        "|---|---|---|---:|",
        *(
            f"| `{r.slug}` | {'pass' if r.ok else '**FAIL**'} | "
            f"{'yes' if _ran_tests(r) else ''} | {r.seconds:.0f} |"
            for r in sorted(results, key=lambda r: r.slug)
        ),
        "",
        "</details>",
    ]
