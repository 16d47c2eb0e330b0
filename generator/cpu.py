"""CPU time by thread: what one combination's stages cost while others run beside it.

`check --jobs J` checks J combinations at once, in threads of one process, so the process's
CPU counters mix them. A thread's CPU time is its own (time.thread_time) and that of the
processes it ran: those started with `run` here, reaped with os.wait4 for their resource
usage (their own children's included), and those a process server forked for it, which
the server reports (server.Client.children_cpu_s).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

_ran = threading.local()  # cpu_s: the CPU seconds of the processes this thread ran


def thread_cpu_s() -> float:
    """CPU seconds of this thread and of the processes it ran with `run`."""
    return time.thread_time() + getattr(_ran, "cpu_s", 0.0)


def run(
    command: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float,
) -> subprocess.CompletedProcess[str]:
    """subprocess.run(command, stdout=PIPE, stderr=STDOUT, text=True, timeout=timeout_s),
    whose CPU time counts in thread_cpu_s(). TimeoutExpired, its output attached, once it
    has been killed."""
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(
            list(command), cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT
        )
        code, usage = _reap(process, time.monotonic() + timeout_s)
        output.seek(0)
        text = output.read().decode(errors="replace")
    _ran.cpu_s = getattr(_ran, "cpu_s", 0.0) + usage.ru_utime + usage.ru_stime
    if code is None:
        raise subprocess.TimeoutExpired(list(command), timeout_s, output=text)
    return subprocess.CompletedProcess(list(command), code, text)


def _reap(process: subprocess.Popen[bytes], deadline: float) -> tuple[int | None, os.rusage]:
    """The exit code and resource usage of `process`, reaped here (Popen.wait would drop the
    usage); killed at `deadline`, which gives no code."""
    delay = 0.001
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
            return process.returncode, usage
        if time.monotonic() >= deadline:
            process.kill()
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            return None, usage
        time.sleep(delay)
        delay = min(2 * delay, 0.05)  # quick commands end quickly; long ones are polled slowly
