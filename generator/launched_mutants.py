"""Mutants that only launched processes reach: `python -m generator mutate ... --launched`.

mutmut runs, for each mutant, the tests that reached its function in the test process
itself. A function that only processes launched by a test run (torchrun's workers, the
fork server's children) stays `no tests`, however closely those tests check it: the code
of several processes (distributed.py, processes.py) above all. Launched processes inherit
MUTANT_UNDER_TEST, so they run the mutant too, provided they import mutmut's mutated copy
of src/. The tests find src/ beside their own folder, and mutmut's copy holds the project's
other files too (mutation._configure's also_copy), so each such mutant runs the named test
files there. The outcome goes into mutmut's own record of the module (its .meta), as
mutmut's exit codes, so the report reads it like any other.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

NO_TESTS = (5, 33)  # mutmut's exit codes for a mutant no test reached
SURVIVED, KILLED, TIMEOUT = 0, 1, 36  # mutmut's exit codes for what a launched run found
# -x: the first failure kills the mutant. The whole-sweep tests stay out, as in mutmut's run.
PYTEST = ["-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not sweep"]
# A mutant's run may take this many times the unmutated run's time (plus a margin) before it
# counts as a timeout: a mutant that makes a collective wait, or a loop never end.
SLOWER, MARGIN_S = 3, 240


def run_launched(project: Path, package: str, modules: list[str], tests: list[str]) -> None:
    """Run `tests` (files of the project) once without a mutant, which must pass, then once
    for each mutant of `modules` that mutmut left `no tests`, with that mutant active."""
    folder = project / "mutants"  # mutmut's copy: its mutated src/, the tests, the rest
    start = time.perf_counter()
    unmutated = _pytest(folder, tests, mutant="", limit_s=None)
    if unmutated != SURVIVED:
        raise ValueError(
            f"--launched: {', '.join(tests)} failed without a mutant (pytest exit {unmutated}) "
            f"in {folder}; make them pass there first"
        )
    limit_s = SLOWER * (time.perf_counter() - start) + MARGIN_S
    for module in modules:
        meta = folder / "src" / package / f"{module}.py.meta"
        record = json.loads(meta.read_text(encoding="utf-8"))
        codes = record["exit_code_by_key"]
        for name in sorted(name for name, code in codes.items() if code in NO_TESTS):
            codes[name] = outcome(folder, tests, name, limit_s)
            meta.write_text(json.dumps(record), encoding="utf-8")  # each as it is known


def outcome(folder: Path, tests: list[str], mutant: str, limit_s: float) -> int:
    """mutmut's exit code for `mutant` from a run of `tests` with it active."""
    try:
        code = _pytest(folder, tests, mutant, limit_s)
    except subprocess.TimeoutExpired:
        return TIMEOUT
    if code not in (SURVIVED, KILLED, 3):  # 3: pytest's internal error, which mutmut kills
        raise ValueError(f"--launched: pytest exited {code} under {mutant}: neither pass nor fail")
    return SURVIVED if code == SURVIVED else KILLED


def _pytest(folder: Path, tests: list[str], mutant: str, limit_s: float | None) -> int:
    env = {**os.environ, "MUTANT_UNDER_TEST": mutant, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, *PYTEST, *tests]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    return subprocess.run(command, cwd=folder, env=env, timeout=limit_s, **quiet).returncode
