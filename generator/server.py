"""A server of fresh processes for the check's stages: forked after the heavy imports.

Each stage of a combination (train, resume, export) runs the project's code in a new
process. Started with `python -m`, every one of them spends seconds importing torch,
accelerate, numpy and scikit-learn before it does anything; a check starts hundreds. The
server imports those once, never touches a device, and forks a child per process a stage
asks for. The child takes the stage's folder, environment and arguments, redirects its
output to the stage's log and runs the module as `python -m` would; it shares nothing with
the stage before it but the files on disk, and the project's own modules are imported
fresh in each child (the server never imports them).

A stage of several processes gets them forked at once with the environment torchrun sets
(RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT); as under
torchrun, when one exits with an error the others are stopped.

Protocol, one JSON object per line: the client writes a request ({"module", "args", "cwd",
"env", "log", "processes"}); the server answers {"pids": [...]} once the children run, then
{"codes": [...], "cpu_s": S}: each child's exit code, negative for the signal that ended it,
and the CPU seconds they used together.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

# Heavy, project-independent and starting no thread at import: what the projects import.
# torch._dynamo: an optimizer's first step imports it; scikit-learn's splits and datasets
# (seconds of scipy each, more than torch); matplotlib: every run plots its curves; then
# the export and tracker libraries that start no thread (mlflow and onnxruntime do, so the
# children that use them import them).
PRELOAD = (
    "torch",
    "torch._dynamo",
    "accelerate",
    "numpy",
    "sklearn",
    "sklearn.datasets",
    "sklearn.model_selection",
    "safetensors",
    "yaml",
    "tqdm",
    "PIL",
    "matplotlib.pyplot",
    "huggingface_hub.repocard",  # the model card every run writes
    "onnx",
    "torch.utils.tensorboard",
    "wandb",
)
_REPLIES = -1  # the server's answers to the client, which no child may write to


class ServerDied(RuntimeError):
    """The server process ended while a stage ran or could not be started."""


def serve() -> None:
    """The server's loop: import, then fork children for each request until stdin closes."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    global _REPLIES
    _REPLIES = os.dup(sys.stdout.fileno())  # fd 1 becomes each child's log
    replies = os.fdopen(_REPLIES, "w", buffering=1)
    for line in sys.stdin:
        request = json.loads(line)
        pids = _start(request)
        replies.write(json.dumps({"pids": pids}) + "\n")
        codes, cpu_s = _wait(pids)
        replies.write(json.dumps({"codes": codes, "cpu_s": cpu_s}) + "\n")


def _start(request: Mapping) -> list[int]:
    count = int(request["processes"])
    ranks = [{}] if count == 1 else _torchrun_env(count)
    sys.stdout.flush()
    sys.stderr.flush()
    pids = []
    for extra in ranks:
        pid = os.fork()
        if pid == 0:
            _child(request, extra)  # never returns
        pids.append(pid)
    return pids


def _torchrun_env(count: int) -> list[dict[str, str]]:
    with socket.socket() as probe:  # a free port for the rendezvous, as --standalone finds
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    shared = {
        "WORLD_SIZE": str(count),
        "LOCAL_WORLD_SIZE": str(count),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "GROUP_RANK": "0",
    }
    return [shared | {"RANK": str(rank), "LOCAL_RANK": str(rank)} for rank in range(count)]


def _child(request: Mapping, extra: Mapping[str, str]) -> None:
    """Become `python -m module args` in the stage's folder; exit with its code."""
    code = 1
    try:
        os.setpgid(0, 0)  # its own group: a timeout kills it and whatever it started
        os.close(_REPLIES)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"] | dict(extra))
        # As `python -m` in that folder: it comes first on the path, then PYTHONPATH.
        paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        sys.path[0] = os.getcwd()
        sys.path[1:1] = [str(Path(path).resolve()) for path in paths if path]
        import torch

        # OpenMP read OMP_NUM_THREADS when torch loaded, in the server: set it again.
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.argv = [request["module"], *request["args"]]
        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exit_:
            code = _exit_code(exit_.code)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _exit_code(code: object) -> int:
    """What the interpreter exits with for SystemExit(code), printing a message as it does."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _wait(pids: Sequence[int]) -> tuple[list[int], float]:
    """Each child's code, and the CPU seconds they used (their own children's included); the
    first that fails stops the others, as torchrun does."""
    codes: dict[int, int] = {}
    cpu_s = 0.0
    while len(codes) < len(pids):
        pid, status, usage = os.wait4(-1, 0)
        if pid not in pids:
            continue
        codes[pid] = os.waitstatus_to_exitcode(status)
        cpu_s += usage.ru_utime + usage.ru_stime
        if codes[pid] != 0:
            for other in pids:
                if other not in codes:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(other, signal.SIGTERM)
    return [codes[pid] for pid in pids], round(cpu_s, 3)


class Client:
    """One server, used by one thread at a time: one per combination checked at once."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._pending = b""  # read from the server, not yet a whole line
        self.restarts = 0
        self.children_cpu_s = 0.0  # CPU seconds of every process the server forked for it

    def run(
        self,
        module: str,
        args: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        log: Path,
        processes: int = 1,
        timeout_s: float,
    ) -> list[int]:
        """Run `python -m module args` in `processes` forked children; their exit codes.

        TimeoutError when they are still running after `timeout_s` (they are killed first);
        ServerDied when the server ends and a restarted one ends too.
        """
        request = {
            "module": module,
            "args": list(args),
            "cwd": str(cwd),
            "env": dict(env),
            "log": str(log),
            "processes": processes,
        }
        for _ in range(2):
            try:
                return self._ask(request, timeout_s)
            except ServerDied:
                self.close()
                if self.restarts:
                    raise
                self.restarts += 1  # restarted once in the check's life, then it stops
        raise AssertionError("unreachable")

    def _ask(self, request: dict, timeout_s: float) -> list[int]:
        process = self._started()
        try:
            process.stdin.write(json.dumps(request).encode() + b"\n")
            process.stdin.flush()
        except OSError as error:
            raise ServerDied(f"the process server exited ({process.poll()})") from error
        pids = self._reply(None)["pids"]
        try:
            finished = self._reply(time.monotonic() + timeout_s)
        except TimeoutError:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            self.children_cpu_s += self._reply(None)["cpu_s"]  # the killed children's
            raise
        self.children_cpu_s += finished["cpu_s"]
        return finished["codes"]

    def _reply(self, deadline: float | None) -> dict:
        """The server's next line; read unbuffered, so that waiting can time out."""
        assert self._process is not None
        fd = self._process.stdout.fileno()
        while b"\n" not in self._pending:
            if deadline is not None:
                left = max(0.0, deadline - time.monotonic())
                if not select.select([fd], [], [], left)[0]:
                    raise TimeoutError
            chunk = os.read(fd, 65536)
            if not chunk:
                raise ServerDied(f"the process server exited ({self._process.wait()})")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return json.loads(line)

    def _started(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            self._pending = b""
            # In this checkout's root, never in the caller's working directory: another thread
            # (copier in a render) may be in a folder it deletes while the server imports.
            self._process = subprocess.Popen(
                [sys.executable, "-m", "generator.server"],
                cwd=Path(__file__).resolve().parents[1],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
            )
        return self._process

    def close(self) -> None:
        if self._process is not None:
            with contextlib.suppress(OSError):
                self._process.stdin.close()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def describe(code: int) -> str:
    """An exit code as a reader wants it: `exited 3`, or the signal's name."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exited {code}"


if __name__ == "__main__":
    serve()
