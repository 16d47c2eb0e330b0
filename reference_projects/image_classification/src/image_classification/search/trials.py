"""How a sweep of one-process runs starts each trial: forked from a server that imported
training once, a new process in a fraction of a second instead of the seconds torch takes
to import."""

import importlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .trial_processes import TrialProcesses

PACKAGE = __name__.partition(".")[0]


class Trials(TrialProcesses):
    """The sweep's processes, each trial a process forked from the server."""

    def __init__(self) -> None:
        super().__init__()
        self.trials = multiprocessing.get_context("forkserver")
        self.trials.set_forkserver_preload([f"{PACKAGE}.train"])

    def run_trial(self, argv: list[str], log_path: Path, args: Any) -> int:
        """Train with `argv` in a process of its own, its output appended to `log_path`."""
        trial = self.trials.Process(target=_train, args=(argv, str(log_path), os.getpid()))
        trial.start()
        self.running = [trial]
        trial.join()
        return trial.exitcode


def add_trial_options(option: Callable[..., Any]) -> None:
    """One-process trials start one way only: the sweep has no option for it."""


def trial_options(args: Any) -> list[str]:
    return []


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
