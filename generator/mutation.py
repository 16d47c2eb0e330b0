"""Mutation testing of a reference project's training core: `python -m generator mutate`.

mutmut changes one operator, constant or call at a time in the modules named (each change a
mutant) and runs the project's own tests that reach the changed function: a mutant that no
test notices survives. The project is copied first, so the committed one is never touched;
the report lists, per module, how many mutants the tests killed, and each survivor's diff,
to be killed by a new test or explained as equivalent (docs/mutation/README.md).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from generator import REPO_ROOT
from generator.launched_mutants import run_launched
from generator.references import REFERENCES_DIR, select
from generator.render import package_of

REPORT_DIR = REPO_ROOT / "docs" / "mutation"
# Survivors that change no behaviour, each with its reason and the changed line(s) it is of.
EQUIVALENTS = "equivalent.toml"
# The rendered core: what decides a step, a checkpoint and a resume.
CORE = ("optim", "precision", "loaders", "checkpoint", "evaluate", "average", "resume", "state")
# What several processes add to it (multi-process projects), reached by launched runs.
PROCESSES = ("distributed", "processes")
# Left to the whole-sweep tests' own runs: minutes of trials each, for functions the rest of
# the suite reaches in-process.
PYTEST_ARGS = ["-p", "no:cacheprovider", "-m", "not sweep", "-q"]
# Left out of mutmut's own runs: the ranks of test_slurm's job run in the job's submit folder,
# where mutmut's stats run (MUTANT_UNDER_TEST=stats) cannot find its settings and every rank
# fails. In-process the file reaches nothing; name it with --launched to count its kills.
LAUNCHED_ELSEWHERE = ("tests/test_slurm.py",)


@dataclass
class ModuleResult:
    module: str
    statuses: dict[str, str] = field(default_factory=dict)  # mutant -> mutmut's status
    diffs: dict[str, str] = field(default_factory=dict)  # the survivors' diffs
    run: str = ""  # the command, template and time of the run that tested it
    # Survivors explained as equivalent (explain()): mutant -> why.
    equivalent: dict[str, str] = field(default_factory=dict)

    def count(self, status: str) -> int:
        return sum(1 for s in self.statuses.values() if s == status)

    @property
    def gaps(self) -> list[str]:
        """The survivors not explained as equivalent: each wants a test that kills it."""
        return sorted(name for name in self.diffs if name not in self.equivalent)

    @property
    def kill_rate(self) -> float | None:
        """Killed over killed and survived, equivalent mutants aside (no test can kill one).
        A timeout is neither: mutmut stops a test at a CPU limit estimated from the
        unmutated run, which a loaded machine can hit, so those mutants are to be run again,
        not counted as caught."""
        judged = self.count("killed") + len(self.gaps)
        return self.count("killed") / judged if judged else None


@dataclass(frozen=True)
class Equivalent:
    change: str  # the mutant's changed line(s), as changed_lines() reads them from its diff
    why: str


def changed_lines(diff: str) -> str:
    """The lines a mutant's diff adds, stripped: what an explanation names, so that one written
    for a mutant whose number now belongs to another change no longer applies."""
    added = [line[1:] for line in diff.splitlines() if line.startswith("+")]
    return "\n".join(line.strip() for line in added if not line.startswith("++"))


def load_equivalents(path: Path) -> dict[str, Equivalent]:
    """equivalent.toml: a table per mutant name with `change` and `why`; ValueError naming
    the file and the entry that is not."""
    if not path.is_file():
        return {}
    try:
        tables = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: not TOML ({error})") from None
    explained = {}
    for name, entry in tables.items():
        if not (
            isinstance(entry, dict)
            and entry.keys() == {"change", "why"}
            and all(isinstance(v, str) and v.strip() for v in entry.values())
        ):
            raise ValueError(f"{path}: [{name!r}] wants exactly `change` and `why`, as text")
        explained[name] = Equivalent(entry["change"].strip(), entry["why"].strip())
    return explained


def explain(results: list[ModuleResult], equivalents: dict[str, Equivalent]) -> list[str]:
    """Mark each survivor an explanation fits as equivalent; the names of the explanations
    that no longer fit their survivor's change (stale: the mutant is a gap again)."""
    stale = []
    for result in results:
        result.equivalent = {}
        for name, diff in result.diffs.items():
            if name not in equivalents:
                continue
            if equivalents[name].change == changed_lines(diff):
                result.equivalent[name] = equivalents[name].why
            else:
                stale.append(name)
    return stale


def mutate(
    reference: str, modules: list[str], workdir: Path, jobs: int, launched: list[str]
) -> list[ModuleResult]:
    """Copy the reference project into `workdir`, run mutmut over `modules` of its package,
    then the `launched` test files for each mutant no test reached in-process
    (launched_mutants.py), and read back each mutant's status (and each survivor's diff)."""
    paths = module_paths(reference, modules)
    project = workdir / reference
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(REFERENCES_DIR / reference, project, ignore=shutil.ignore_patterns("outputs"))
    _configure(project / "pyproject.toml", paths)
    package = package_of(project)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run_mutmut(project, package, modules, jobs, env)
    if launched:
        run_launched(project, package, modules, launched)
    return [_read(project, package, module, env) for module in modules]


# What mutmut says when no test reached any mutant in the test process (it exits 1 then).
NOTHING_REACHED = "could not find any test case for any mutant"


def run_mutmut(
    project: Path, package: str, modules: list[str], jobs: int, env: dict[str, str]
) -> None:
    """mutmut's own run over the project (configured by _configure). A run in which no test
    reached any mutant in-process stops early with every mutant unchecked: those are `no
    tests`, as launched tests may still reach them (the modules of several processes)."""
    log = project / "mutmut.log"
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs)]
    with log.open("w", encoding="utf-8") as output:
        done = subprocess.run(command, cwd=project, env=env, stdout=output, stderr=output)
    if done.returncode == 0:
        return
    printed = log.read_text(encoding="utf-8", errors="replace")
    if NOTHING_REACHED not in printed:
        last = printed.strip().splitlines()[-1:] or ["no output"]
        raise ValueError(f"mutmut exited {done.returncode}: {last[0][:200]}")
    for module in modules:
        meta = project / "mutants" / "src" / package / f"{module}.py.meta"
        record = json.loads(meta.read_text(encoding="utf-8"))
        codes = record["exit_code_by_key"]
        record["exit_code_by_key"] = {name: 33 if c is None else c for name, c in codes.items()}
        meta.write_text(json.dumps(record), encoding="utf-8")


def module_paths(reference: str, modules: list[str]) -> list[str]:
    """The modules' files in the reference project; ValueError naming a missing one."""
    (ref,) = select([reference])  # ValueError naming the valid names
    package = package_of(REFERENCES_DIR / ref.name)
    paths = [f"src/{package}/{module}.py" for module in modules]
    missing = [path for path in paths if not (REFERENCES_DIR / ref.name / path).is_file()]
    if missing or not modules:
        raise ValueError(
            f"--modules: {ref.name} has no {', '.join(missing) or 'module named'}; "
            f"choose from: {', '.join(CORE + PROCESSES)}"
        )
    return paths


def test_paths(reference: str, tests: str | None) -> list[str]:
    """--launched's test files (comma-separated) in the reference project; ValueError naming
    one that is not a test file of it."""
    paths = [path.strip() for path in (tests or "").split(",") if path.strip()]
    project = REFERENCES_DIR / reference
    missing = [p for p in paths if not (p.startswith("tests/test_") and (project / p).is_file())]
    if missing:
        raise ValueError(
            f"--launched: {reference} has no test file {', '.join(missing)} "
            "(its tests/test_*.py, e.g. tests/test_distributed.py)"
        )
    return paths


NOT_COPIED = ("src", "mutants", "outputs")  # mutmut writes the first two; runs the last


def _configure(pyproject: Path, paths: list[str]) -> None:
    """mutmut's settings, appended to the copy's pyproject.toml (it reads no other file).
    forkserver: torch is not safe to fork once it has run, and the tests run torch."""
    project = pyproject.parent
    settings = {
        "source_paths": ["src"],
        "only_mutate": paths,
        "pytest_add_cli_args": PYTEST_ARGS + [f"--ignore={p}" for p in LAUNCHED_ELSEWHERE],
        "process_isolation": "forkserver",
        # mutmut runs the tests in its mutants/ folder, where they read the project's files
        # beside src/ (README.md's examples, configs/): copied there with the tests.
        "also_copy": sorted(p.name for p in project.iterdir() if p.name not in NOT_COPIED),
    }
    lines = ["", "[tool.mutmut]", *(f"{k} = {json.dumps(v)}" for k, v in settings.items())]
    with pyproject.open("a", encoding="utf-8") as file:
        file.write("\n".join(lines) + "\n")


def _read(project: Path, package: str, module: str, env: dict[str, str]) -> ModuleResult:
    from mutmut.stats import status_by_exit_code  # mutmut's own reading of its exit codes

    meta = project / "mutants" / "src" / package / f"{module}.py.meta"
    exit_codes = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
    result = ModuleResult(
        module, {name: status_by_exit_code[code] for name, code in exit_codes.items()}
    )
    for name, status in result.statuses.items():
        if status == "survived":
            shown = subprocess.run(
                [sys.executable, "-m", "mutmut", "show", name],
                cwd=project,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            result.diffs[name] = shown.stdout.strip()
    return result


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
