"""The processes of a sweep (sweep.py): each trial's training (started as trials.py says),
and the workers.

A signal to the sweep reaches them: on SIGTERM a run checkpoints and exits 75, and the sweep
stops after it. A sweep that dies without a word (SIGKILL) takes them along: on Linux each
gets SIGTERM then, and checkpoints, instead of training on alone.
"""

import contextlib
import os
import signal
import subprocess
import sys
from typing import Any

# Run before a command on Linux: asks for SIGTERM when the parent dies (PR_SET_PDEATHSIG),
# then becomes the command, which keeps that setting.
ON_PARENT_DEATH = (
    "import ctypes, os, sys; ctypes.CDLL(None).prctl(1, 15); os.execvp(sys.argv[1], sys.argv[1:])"
)


class TrialProcesses:
    """Starts the sweep's processes one set at a time and passes SIGTERM on to them;
    `requested` holds the signal once one came. trials.Trials adds how a trial starts."""

    def __init__(self) -> None:
        self.requested: int | None = None
        self.running: list[Any] = []  # what a signal goes to: processes with a pid
        self.previous = signal.signal(signal.SIGTERM, self._forward)

    def run(self, commands: list[list[str]], output: Any = None) -> list[int]:
        stderr = None if output is None else subprocess.STDOUT
        self.running = [
            subprocess.Popen(_with_parent(command), stdout=output, stderr=stderr)
            for command in commands
        ]
        return [process.wait() for process in self.running]

    def _forward(self, signum: int, frame: object) -> None:
        self.requested = signum
        for process in self.running:
            with contextlib.suppress(ProcessLookupError):  # one that has ended
                os.kill(process.pid, signum)

    def restore(self) -> None:
        signal.signal(signal.SIGTERM, self.previous)


def _with_parent(command: list[str]) -> list[str]:
    """`command`, made to end with the sweep where the system allows it (Linux)."""
    if sys.platform != "linux":
        return command
    return [sys.executable, "-c", ON_PARENT_DEATH, *command]
