import multiprocessing
import os
import shutil
import time
from multiprocessing import forkserver
from pathlib import Path

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState, PartialState
from calls import EXACT, as_arguments
from data_fixtures import SHORT_RUN_FIELDS

from text_classification.config import load_config
from text_classification.run_folder import records
from text_classification.train import main as train

# The task's data for the tests: the embedded data's arguments, small datasets in the
# user's format (tests/data_fixtures.py).
pytest_plugins = ["data_fixtures"]
SRC = Path(__file__).resolve().parents[1] / "src"
# A training run's imports, made once by the server its children fork from: the project,
# torch._dynamo (imported at the optimizer's first use).
PRELOAD = [
    "text_classification.train",
    "torch._dynamo",
]


def reset_accelerate_state() -> None:
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    PartialState._reset_state()


@pytest.fixture(autouse=True)
def fresh_accelerate_state():
    """Each training run in a test starts from a clean Accelerate state, as a new process would,
    whatever a wider fixture's run left."""
    reset_accelerate_state()
    yield
    reset_accelerate_state()


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and tests may run in parallel. For the whole
    session, so that runs in fixtures wider than a test compute as the tests' runs do."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def skip_drawing_curves(monkeypatch):
    """Drawing curves.png costs matplotlib a fifth of a second, more than a short run trains:
    only test_run_records.py, which checks the picture, draws it."""
    monkeypatch.setattr(records, "plot_curves", lambda *args: None)


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
    environment = dict(os.environ)
    child = trainers.Process(target=quiet_train, args=(args, environment))
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


@pytest.fixture
def short_run(tmp_path, short_run_in):
    """Arguments for a short run into a fresh output directory; extra arguments override."""

    def args(*extra: str, output_dir=None) -> list[str]:
        return short_run_in(output_dir or tmp_path / "run", *extra)

    return args


@pytest.fixture(scope="session")
def short_run_in():
    """short_run's arguments for a given output directory, for fixtures wider than a test."""

    def args(output_dir: Path, *extra: str) -> list[str]:
        fields = {
            "output_dir": output_dir,
            "max_steps": 6,
            "log_every": 1,
            "eval_every": 3,
            "checkpoint_every": 3,
            # Out of its warmup by step 3, so that resumes and schedules are tested where a
            # real run spends its steps.
            "warmup_steps": 2,
            **EXACT,  # the tests compare short runs with each other bit for bit
            **SHORT_RUN_FIELDS,  # the task's (data_fixtures.py)
        }
        return as_arguments(fields, *extra)

    return args


@pytest.fixture(scope="session")
def checkpointed_run(tmp_path_factory, short_run_in):
    """One short run, with checkpoints at steps 3 and 6, for the tests that inspect or resume
    one: each takes its own copy (`trained`)."""
    run_dir = tmp_path_factory.mktemp("checkpointed") / "run"
    train(short_run_in(run_dir))
    return run_dir


@pytest.fixture
def trained(checkpointed_run, tmp_path):
    """A copy of checkpointed_run where short_run writes, for a test to change or resume."""
    return Path(shutil.copytree(checkpointed_run, tmp_path / "run"))


@pytest.fixture(scope="session")
def fast_dev_run():
    """A fast dev run's arguments, for tests of what a run reads and writes."""
    return ["--fast_dev_run"]


@pytest.fixture
def cfg():
    return load_config([])
