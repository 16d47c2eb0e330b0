"""Training runs in child processes of their own, for the tests that kill, stop or starve
one or fill its disk: forked from a server that has imported torch and this project once."""

import importlib
import multiprocessing
import os
import resource
import signal
import time
from multiprocessing import forkserver
from pathlib import Path

import pytest
import torch
from tracker_setup import PRELOAD as TRACKER_PRELOAD
from tracker_setup import child_environment

from language_modeling.train import main as train

SRC = Path(__file__).resolve().parents[1] / "src"
# A training run's imports, made once by the server its children fork from: the project,
# torch._dynamo (imported at the optimizer's first use) and the tracker's (tracker_setup.py).
PRELOAD = ["language_modeling.train", "torch._dynamo", *TRACKER_PRELOAD]


def steps_logged(metrics: Path) -> int:
    with metrics.open() as lines:
        return sum(1 for line in lines if '"split"' not in line)


@pytest.fixture(scope="session")
def trainers():
    """Training processes forked from one that has imported torch and this project once
    (multiprocessing's forkserver): each is a process of its own, killed for real, without
    the seconds a new interpreter spends on imports. The server starts clean, on one thread
    and with the package on its path, whatever this process has run or set up before."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(SRC), prepend=os.pathsep)
        patch.setenv("OMP_NUM_THREADS", "1")
        forkserver.ensure_running()
    return context


def quiet_train(args: list[str], environment: dict[str, str]) -> None:
    """A training run, as `python -m` starts it, in a forked child; its output discarded.
    It sees the test's environment, as a subprocess would (the server has its own)."""
    # Loader workers fork from this process, as from `python -m`: forked by the server, they
    # would not see a killed run end, and would outlive it.
    multiprocessing.set_start_method("fork", force=True)
    os.environ.clear()
    os.environ.update(environment)
    torch.set_num_threads(1)  # as the test's runs (one_thread)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    train(args)


@pytest.fixture
def interrupt(trainers):
    """interrupt(args, output_dir, at_step, signum): train in a child process, send it
    `signum` once it has logged `at_step`, and return its exit code."""
    return lambda *args: _interrupt(trainers, *args)


@pytest.fixture
def start_training(trainers):
    """start_training(args): a training run started in a child process, for the test to stop."""
    return lambda args: _start_training(trainers, args)


def _start_training(trainers, args: list[str]) -> multiprocessing.Process:
    child = trainers.Process(target=quiet_train, args=(args, child_environment()))
    child.start()
    return child


def _interrupt(trainers, args: list[str], output_dir: Path, at_step: int, signum: int) -> int:
    child = _start_training(trainers, args)
    metrics, deadline = output_dir / "metrics.jsonl", time.monotonic() + 120
    try:
        while child.is_alive() and time.monotonic() < deadline:
            if metrics.exists() and steps_logged(metrics) >= at_step:
                os.kill(child.pid, signum)
                break
            time.sleep(0.002)
        child.join(timeout=60)
        return child.exitcode
    finally:
        child.kill()


def train_on_a_full_disk(args: list[str], environment: dict, log: str, writer: str) -> None:
    """A training run in a child process whose `writer` ("module:function" of this project:
    what writes the checkpoint, the config or model/'s weights) finds no room: each call runs
    under a file size limit (RLIMIT_FSIZE) smaller than what it writes. With SIGXFSZ
    ignored, a write past the limit fails with EFBIG, as one on a full disk fails with
    ENOSPC: a short write, then an error."""
    os.environ.clear()
    os.environ.update(environment)
    torch.set_num_threads(1)
    output = os.open(log, os.O_WRONLY | os.O_CREAT)
    os.dup2(output, 1)
    os.dup2(output, 2)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    module_name, name = writer.split(":")
    module = importlib.import_module(f"language_modeling.{module_name}")
    write, limits = getattr(module, name), resource.getrlimit(resource.RLIMIT_FSIZE)

    def full(*args, **kwargs):
        resource.setrlimit(resource.RLIMIT_FSIZE, (100, limits[1]))
        try:
            return write(*args, **kwargs)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, limits)

    setattr(module, name, full)
    train(args)


def full_disk_run(trainers, args: list[str], tmp_path, writer: str) -> tuple[int, list[str]]:
    """The exit code and output lines of train_on_a_full_disk."""
    log = tmp_path / "output.txt"
    child = trainers.Process(
        target=train_on_a_full_disk, args=(args, child_environment(), str(log), writer)
    )
    child.start()
    child.join(timeout=120)
    child.kill()
    return child.exitcode, log.read_text().splitlines()
