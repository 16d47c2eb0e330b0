"""Mutation testing of a reference project's training core: `python -m generator mutate`.

mutmut changes one operator, constant or call at a time in the modules named (each change a
mutant) and runs the project's own tests that reach the changed function: a mutant that no
test notices survives. The project is copied first, so the committed one is never touched;
the report lists, per module, how many mutants the tests killed, and each survivor's diff,
to be killed by a new test or explained as equivalent (docs/mutation/README.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from generator import REPO_ROOT
from generator.references import REFERENCES_DIR, select
from generator.render import package_of

REPORT_DIR = REPO_ROOT / "docs" / "mutation"
# The rendered core, as issue 48 names it: what decides a step, a checkpoint and a resume.
CORE = ("optim", "loaders", "checkpoint", "evaluate", "average", "resume", "state")
# Left to the whole-sweep tests' own runs: minutes of trials each, for functions the rest of
# the suite reaches in-process.
PYTEST_ARGS = ["-p", "no:cacheprovider", "-m", "not sweep", "-q"]


@dataclass
class ModuleResult:
    module: str
    statuses: dict[str, str] = field(default_factory=dict)  # mutant -> mutmut's status
    diffs: dict[str, str] = field(default_factory=dict)  # the survivors' diffs
    run: str = ""  # the command, template and time of the run that tested it

    def count(self, status: str) -> int:
        return sum(1 for s in self.statuses.values() if s == status)

    @property
    def kill_rate(self) -> float | None:
        """Killed over killed and survived. A timeout is neither: mutmut stops a test at a
        CPU limit estimated from the unmutated run, which a loaded machine can hit, so those
        mutants are to be run again, not counted as caught."""
        judged = self.count("killed") + self.count("survived")
        return self.count("killed") / judged if judged else None


def mutate(reference: str, modules: list[str], workdir: Path, jobs: int) -> list[ModuleResult]:
    """Copy the reference project into `workdir`, run mutmut over `modules` of its package,
    and read back each mutant's status (and each survivor's diff)."""
    paths = module_paths(reference, modules)
    project = workdir / reference
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(REFERENCES_DIR / reference, project, ignore=shutil.ignore_patterns("outputs"))
    _configure(project / "pyproject.toml", paths)
    package = package_of(project)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs)]
    subprocess.run(command, cwd=project, env=env, check=True, stdout=subprocess.DEVNULL)
    return [_read(project, package, module, env) for module in modules]


def module_paths(reference: str, modules: list[str]) -> list[str]:
    """The modules' files in the reference project; ValueError naming a missing one."""
    (ref,) = select([reference])  # ValueError naming the valid names
    package = package_of(REFERENCES_DIR / ref.name)
    paths = [f"src/{package}/{module}.py" for module in modules]
    missing = [path for path in paths if not (REFERENCES_DIR / ref.name / path).is_file()]
    if missing or not modules:
        raise ValueError(
            f"--modules: {ref.name} has no {', '.join(missing) or 'module named'}; "
            f"choose from: {', '.join(CORE)}"
        )
    return paths


def _configure(pyproject: Path, paths: list[str]) -> None:
    """mutmut's settings, appended to the copy's pyproject.toml (it reads no other file).
    forkserver: torch is not safe to fork once it has run, and the tests run torch."""
    settings = {
        "source_paths": ["src"],
        "only_mutate": paths,
        "pytest_add_cli_args": PYTEST_ARGS,
        "process_isolation": "forkserver",
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


def as_markdown(reference: str, results: list[ModuleResult], header: list[str]) -> str:
    """The report: a row per module, the run each comes from, then every survivor's diff."""
    lines = [f"# Mutation testing: {reference}", "", *header, ""]
    lines += ["| module | mutants | killed | survived | timeout | no tests | kill rate |"]
    lines += ["|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        rate = "-" if r.kill_rate is None else f"{r.kill_rate:.0%}"
        counts = [len(r.statuses), *(r.count(s) for s in ("killed", "survived", "timeout"))]
        counts.append(r.count("no tests"))
        lines.append(f"| {r.module} | {' | '.join(map(str, counts))} | {rate} |")
    lines += ["", "Runs:", ""] + [f"- {r.module}: {r.run}" for r in results]
    for r in results:
        for name, diff in sorted(r.diffs.items()):
            lines += ["", f"## Survivor `{name}`", "", "```diff", diff, "```"]
    return "\n".join(lines) + "\n"


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
    order = [*CORE, *sorted(set(by_module) - set(CORE))]
    return [by_module[name] for name in order if name in by_module]
