"""How a sweep of multi-process runs starts each trial: through its --launcher (LAUNCHER by
default)."""

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .trial_processes import TrialProcesses

PACKAGE = __name__.partition(".")[0]
# How each trial starts its processes, as the README starts training on this machine's GPUs.
LAUNCHER = "python -m accelerate.commands.launch --config_file configs/accelerate/one-machine.yaml"


class Trials(TrialProcesses):
    """The sweep's processes, each trial the processes its launcher starts."""

    def run_trial(self, argv: list[str], log_path: Path, args: Any) -> int:
        """Train with `argv` through --launcher, its output appended to `log_path`."""
        words = args.launcher.split()
        launcher = [sys.executable, *words[1:]] if words[0] == "python" else words
        with log_path.open("a") as output:
            return self.run([[*launcher, "-m", f"{PACKAGE}.train", *argv]], output)[0]


def add_trial_options(option: Callable[..., Any]) -> None:
    """The sweep's option for how trials start (`option`: its parser's add_argument)."""
    option("--launcher", default=LAUNCHER, metavar="COMMAND", help="starts each trial's processes")


def trial_options(args: Any) -> list[str]:
    """That option as the sweep passes it on to its workers."""
    return ["--launcher", args.launcher]
