"""The processes of a sweep (sweep.py): each trial's training, and the workers.

A signal to the sweep reaches them: on SIGTERM a run checkpoints and exits 75, and the sweep
stops after it. A sweep that dies without a word (SIGKILL) takes them along: on Linux each
gets SIGTERM then, and checkpoints, instead of training on alone.
"""

import contextlib
import importlib
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

PACKAGE = __name__.partition(".")[0]
# Run before a command on Linux: asks for SIGTERM when the parent dies (PR_SET_PDEATHSIG),
# then becomes the command, which keeps that setting.
ON_PARENT_DEATH = (
    "import ctypes, os, sys; ctypes.CDLL(None).prctl(1, 15); os.execvp(sys.argv[1], sys.argv[1:])"
)


class TrialProcesses:
    """Starts the sweep's processes one set at a time and passes SIGTERM on to them;
    `requested` holds the signal once one came."""

    def __init__(self) -> None:
        self.requested: int | None = None
        self.running: list[Any] = []  # what a signal goes to: processes with a pid
        self.previous = signal.signal(signal.SIGTERM, self._forward)
        # Trials fork from a server that imported training once: a new process each, in a
        # fraction of a second instead of the seconds torch takes to import.
        self.trials = multiprocessing.get_context("forkserver")
        self.trials.set_forkserver_preload([f"{PACKAGE}.train"])

    def run_trial(self, argv: list[str], log_path: Path, args: Any) -> int:
        """Train with `argv` in a process of its own, its output appended to `log_path`."""
        trial = self.trials.Process(target=_train, args=(argv, str(log_path), os.getpid()))
        trial.start()
        self.running = [trial]
        trial.join()
        return trial.exitcode

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


def _train(argv: list[str], log_path: str, sweep: int) -> None:
    """A trial's training, in its forked process, as `python -m PACKAGE.train ARGV` runs."""
    # Its parent is the fork server, which outlives a killed sweep: watch the sweep.
    threading.Thread(target=_stop_when_gone, args=(sweep,), daemon=True).start()
    # Loader workers fork from this process, as from `python -m`: forked by the server,
    # they would not see a killed run end.
    multiprocessing.set_start_method("fork", force=True)
    output = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(output, 1)
    os.dup2(output, 2)
    # By name, as the fork server preloads it: the sweep's parts sit below training.
    training = importlib.import_module(f"{PACKAGE}.train")
    sys.argv = [training.__file__, *argv]  # what run.json records as the command
    training.main(argv)


def _stop_when_gone(sweep: int) -> None:
    """SIGTERM to this process (a checkpoint, then exit 75) once the sweep has ended."""
    while True:
        time.sleep(0.2)
        try:
            os.kill(sweep, 0)
        except ProcessLookupError:
            os.kill(os.getpid(), signal.SIGTERM)
            return


def _with_parent(command: list[str]) -> list[str]:
    """`command`, made to end with the sweep where the system allows it (Linux)."""
    if sys.platform != "linux":
        return command
    return [sys.executable, "-c", ON_PARENT_DEATH, *command]
