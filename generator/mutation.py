"""Mutation testing of a reference project's training core: `python -m generator mutate`.

mutmut changes one operator, constant or call at a time in the modules named (each change a
mutant) and runs the project's own tests that reach the changed function: a mutant that no
test notices survives. The project is copied first, so the committed one is never touched;
the report lists, per module, how many mutants the tests killed, and each survivor's diff,
to be killed by a new test or explained as equivalent (docs/mutation/README.md).
"""

from __future__ import annotations

import hashlib
import json
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
    reference: str,
    modules: list[str],
    workdir: Path,
    jobs: int,
    launched: list[str],
    resume: bool = False,
) -> list[ModuleResult]:
    """Copy the reference project into `workdir`, run mutmut over `modules` of its package,
    then the `launched` test files for each mutant no test reached in-process
    (launched_mutants.py), and read back each mutant's status (and each survivor's diff).

    `resume`: a copy already in `workdir` (of a run stopped part way) is kept, with what
    mutmut and the launched runs recorded there; each tests only the mutants left. A copy of
    other modules or another version of the reference is refused (ValueError): its results
    are of other code.
    """
    paths = module_paths(reference, modules)
    project = workdir / reference
    origin = json.dumps({"source": tree_digest(REFERENCES_DIR / reference), "mutated": paths})
    copied = project / COPIED_FROM
    if resume and copied.is_file():
        if copied.read_text(encoding="utf-8") != origin:
            raise ValueError(
                f"--resume: {project} is a run of other --modules or of another version of "
                f"{reference}; run without --resume to start over"
            )
    else:
        shutil.rmtree(project, ignore_errors=True)
        shutil.copytree(REFERENCES_DIR / reference, project, ignore=_NOT_SOURCE)
        _configure(project / "pyproject.toml", paths)
        copied.write_text(origin, encoding="utf-8")
    package = package_of(project)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run_mutmut(project, package, modules, jobs, env)
    if launched:
        run_launched(project, package, modules, launched)
    return [_read(project, package, module, env) for module in modules]


# The copy's record of what it was made from (the reference's tree_digest, the mutated
# modules), for --resume.
COPIED_FROM = ".copied-from"
_NOT_SOURCE = shutil.ignore_patterns("outputs")  # what a run writes, never mutated or read


def tree_digest(folder: Path) -> str:
    """A SHA-256 of the files under `folder` (names and bytes), its run outputs aside."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and relative.parts[0] != "outputs":
            digest.update(f"{relative.as_posix()}\0{path.stat().st_size}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


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
