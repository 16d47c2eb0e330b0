import shutil
from pathlib import Path

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState, PartialState
from calls import EXACT, LEAN, as_arguments
from data_fixtures import SHORT_RUN_FIELDS

from text_classification.config import load_config
from text_classification.run_folder import records
from text_classification.train import main as train

# Fixtures of their own modules: the task's data for the tests (the embedded data's
# arguments, small datasets in the user's format), the tracker's setup, and training runs
# in child processes, to kill or stop.
pytest_plugins = ["data_fixtures", "tracker_setup", "training_children"]


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
            **LEAN,
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
