"""How a rendered project's processes start and run: the launcher, the environment, the run.

`generator.check` runs its stages through here and `generator.reference_runs` the reference
projects' training and tests, so both start a project alike: one process with `python -m`,
several with torchrun, in an environment that splits the cores between the runs going at
once and shares one compile cache; output and errors together, within TIMEOUT_S.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from generator import cpu
from generator.answers import Answer
from generator.server import Client, describe

# Generous, so a hang fails its stage instead of stalling the matrix; never a speed check.
TIMEOUT_S = 1800
TAIL_LINES = 60


class ProcessFailure(Exception):
    """A process exited non-zero or timed out; the message is its command and its output."""


@dataclass(frozen=True)
class Options:
    cache_dir: Path  # torch.compile's caches, shared by every run of the check
    device: str = "cpu"  # cpu | cuda
    steps: int = 2  # optimizer steps the resume stage adds to the fast dev run's
    jobs: int = 1  # combinations checked at once
    server: bool = True  # fork the stages' processes from a process server (generator.server)
    # The slugs of the combinations whose own suites leave out the whole-sweep tests (the
    # pytest marker `sweep`): see selection.sweep_sample.
    without_sweep_tests: frozenset[str] = frozenset()
    # Whether the others run every whole-sweep test, or only the one whose trials log to the
    # tracker side by side (the marker `shared_study`; the reference suites run the rest).
    every_sweep_test: bool = True
    # The slugs of the combinations whose own suites run only the tests their answers add to
    # their task's default project: see selection.rest_sample and check.added_tests.
    added_tests_only: frozenset[str] = frozenset()


def processes(answers: Mapping[str, Answer]) -> int:
    """How many processes a combination's runs launch."""
    return 1 if answers.get("distributed", "single") == "single" else 2


def launch_command(answers: Mapping[str, Answer]) -> list[str]:
    """The command that runs `-m MODULE ...` of a rendered project: the one place to adjust.

    `distributed=multi` or `sharded` starts two processes with torchrun, as the project's `make
    dev-run-2cpu` does (its accelerate config names torchrun as the equivalent on GPUs); on a
    CPU the processes, given `--cpu true`, talk over gloo. `--standalone` finds a free port,
    so combinations checked at the same time never share a rendezvous. (`accelerate launch
    --cpu --num_processes 2` would start a single process.)
    """
    if processes(answers) == 1:
        return [sys.executable, "-m"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    return [*torchrun, "--nproc_per_node", str(processes(answers)), "-m"]


def project_env(answers: Mapping[str, Answer], options: Options) -> dict[str, str]:
    """The environment of a rendered project's processes.

    The cores are split between the combinations running at once (torch uses every core by
    default, and two runs each using both only slow each other down). One compile cache for
    every run, so a graph another combination compiled is loaded instead of rebuilt.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = (cores or 1) // (options.jobs * processes(answers))
    env["OMP_NUM_THREADS"] = str(max(1, threads))
    env["PYTHONPATH"] = "src"
    env["TORCHINDUCTOR_CACHE_DIR"] = str(options.cache_dir.resolve() / "inductor")
    env["TRITON_CACHE_DIR"] = str(options.cache_dir.resolve() / "triton")
    if options.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # the project's own tests, too, stay on the CPU
    return env


def visible_gpus() -> int:
    """CUDA devices torch sees in a fresh process of this environment."""
    command = [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    return int(result.stdout.strip() or 0) if result.returncode == 0 else 0


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run `command` in `cwd`, its output and errors together in one text, within TIMEOUT_S;
    its CPU time counts in the thread's (generator.cpu)."""
    return cpu.run(command, cwd=cwd, env=env, timeout_s=TIMEOUT_S)


def shown(command: Sequence[str]) -> str:
    """`command` as a reader types it: `python` for this interpreter."""
    return shlex.join(["python", *command[1:]])


def run_checked(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    """`$ COMMAND` and the output of `run`; ProcessFailure with both when it fails or times out."""
    try:
        result = run(command, cwd, env)
    except subprocess.TimeoutExpired as expired:
        output = expired.output or ""
        output = output.decode(errors="replace") if isinstance(output, bytes) else output
        raise ProcessFailure(
            f"$ {shown(command)}\ntimed out after {TIMEOUT_S} s\n{output}"
        ) from None
    if result.returncode != 0:
        raise ProcessFailure(f"$ {shown(command)}\nexited {result.returncode}\n{result.stdout}")
    return f"$ {shown(command)}\n{result.stdout}"


def run_forked(
    client: Client,
    launch: Sequence[str],
    module: str,
    args: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    log: Path,
    count: int,
) -> str:
    """`count` processes of `python -m MODULE ARGS` forked by the process server, their output
    in `log`; the output and failures read as run_checked's of `[*launch, module, *args]`
    would, each failing rank named."""
    command = shown([*launch, module, *args])
    try:
        codes = client.run(
            module, args, cwd=cwd, env=env, log=log, processes=count, timeout_s=TIMEOUT_S
        )
    except TimeoutError:
        codes = None
    output = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    if codes is None:
        raise ProcessFailure(f"$ {command}\ntimed out after {TIMEOUT_S} s\n{output}")
    failed = [(rank, code) for rank, code in enumerate(codes) if code != 0]
    if failed:
        said = ", ".join(f"rank {rank} {describe(code)}" for rank, code in failed)
        said = said.removeprefix("rank 0 ") if count == 1 else said
        raise ProcessFailure(f"$ {command}\n{said}\n{output}")
    return f"$ {command}\n{output}"
