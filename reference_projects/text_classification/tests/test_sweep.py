"""The hyperparameter sweep: every trial a real run in its own folder, a report to read, a
sweep killed at any moment loses nothing, a pruned trial ends like an early-stopped run,
and a space a run would refuse is refused before any trial starts."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from calls import refusal
from PIL import Image
from run_logs import assert_same_end, logged
from tracker_setup import child_environment

from text_classification import task
from text_classification.config import load_config
from text_classification.search.pruning import PRUNER
from text_classification.sweep import PACKAGE, STUDY, main
from text_classification.train import main as train

SRC = Path(__file__).resolve().parents[1] / "src"
SPACE = "lr: {log: [1.0e-3, 1.0e-2]}\ndropout: {float: [0.0, 0.3]}\n"


@pytest.fixture
def trial_fields(short_run_in, tmp_path, embedded_args):
    """Fixed fields of the trials: a short run's (conftest.py) of 30 steps, in epochs short
    enough for them (data_fixtures.py), without its output_dir."""
    fields = short_run_in(tmp_path / "unused", "--max_steps", "30", "--eval_every", "10")
    fields += embedded_args
    return [field for field in fields if not field.startswith("--output_dir")]


def sweep_command(
    tmp_path: Path, trials: int, processes: int, *extra: str, space_text: str = SPACE
) -> list[str]:
    space = tmp_path / "space.yaml"
    space.write_text(space_text)
    options = ["--space", str(space), "--trials", str(trials), "--heartbeat_s", "1"]
    options += ["--study_dir", str(tmp_path / "sweep")]
    return [sys.executable, "-m", f"{PACKAGE}.sweep", *options, *extra]


def project_env() -> dict[str, str]:
    """As a shell starts a sweep (tracker_setup.py)."""
    return {**child_environment(), "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = project_env()
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def trials(study_dir: Path) -> list[optuna.trial.FrozenTrial]:
    storage = f"sqlite:///{study_dir / 'study.db'}"
    return optuna.load_study(study_name=STUDY, storage=storage).get_trials()


def steps_logged(output_dir: Path) -> int:
    return sum(1 for record in logged(output_dir) if "split" not in record)


@pytest.mark.sweep
@pytest.mark.shared_study
def test_two_workers_share_a_study_and_every_trial_is_a_run(tmp_path, trial_fields):
    result = run(sweep_command(tmp_path, 4, 1, "--workers", "2", *trial_fields), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    study_dir = tmp_path / "sweep"
    done = [trial for trial in trials(study_dir) if trial.state.is_finished()]
    # Each worker stops once 4 have finished; one may finish a trial it had started.
    assert 4 <= len(done) <= 5 and all(t.state.name == "COMPLETE" for t in done)
    folders = [Path(trial.user_attrs["output_dir"]) for trial in done]
    assert len(set(folders)) == len(folders)  # no trial ran twice, none shares a folder
    for trial, folder in zip(done, folders, strict=True):
        summary = json.loads((folder / "summary.json").read_text())
        assert trial.value == summary["best_value"] and summary["steps"] == 30
        assert (folder / "model" / "model.safetensors").is_file()
        assert (folder / "checkpoints" / "latest").is_file()
        assert load_config(["--config", str(folder / "config.yaml")]).lr == trial.params["lr"]
    rows = [line for line in (study_dir / "sweep.md").read_text().splitlines() if "|" in line]
    assert sorted(int(row.split("|")[1]) for row in rows[2:]) == sorted(t.number for t in done)
    best = max(done, key=lambda trial: trial.value * (1 if task.HIGHER_IS_BETTER else -1))
    assert rows[2].startswith(f"| {best.number} | complete |")  # the best first
    reproduced = load_config(["--config", str(study_dir / "best.yaml")])
    assert (reproduced.lr, reproduced.dropout) == (best.params["lr"], best.params["dropout"])
    assert reproduced.max_steps == 30  # the fixed fields too
    for name in ("history.png", "importances.png", "slices.png"):
        with Image.open(study_dir / name) as image:
            image.verify()


def start(command: list[str], cwd: Path) -> subprocess.Popen:
    """The sweep in a session of its own, which a test may kill whole, as a reboot would;
    its stderr goes to cwd/sweep.err."""
    env = project_env()
    with open(cwd / "sweep.err", "w") as stderr:
        return subprocess.Popen(command, cwd=cwd, env=env, stderr=stderr, start_new_session=True)


def wait_for_steps(output_dir: Path, steps: int, sweep: subprocess.Popen) -> None:
    deadline = time.monotonic() + 300
    while not ((output_dir / "metrics.jsonl").exists() and steps_logged(output_dir) >= steps):
        assert sweep.poll() is None, f"the sweep ended before {output_dir} logged {steps} steps"
        assert time.monotonic() < deadline, f"{output_dir} never logged {steps} steps"
        time.sleep(0.005)


@pytest.mark.sweep
def test_a_stopped_or_killed_sweep_run_again_loses_nothing(tmp_path, trial_fields):
    fields = [*trial_fields, "--log_every", "1", "--checkpoint_every", "5"]
    command = sweep_command(tmp_path, 2, 2, *fields)
    study_dir = tmp_path / "sweep"
    # SIGTERM, as a scheduler preempting the sweep's job: the trial checkpoints, exit 75.
    sweep = start(command, tmp_path)
    wait_for_steps(study_dir / "trial-0000", 5, sweep)
    sweep.send_signal(signal.SIGTERM)
    assert sweep.wait(timeout=300) == 75
    assert "stopped by signal 15" in (study_dir / "trial-0000" / "sweep.log").read_text()
    said = (tmp_path / "sweep.err").read_text()
    assert "stopped by signal 15 in trial 0; run the same command again" in said
    assert "Traceback" not in said and "failed" not in said  # not Optuna's failed trial
    # Run again: trial 0 continues at once (as trial 1); SIGKILL the whole session in the
    # next one (trial 2), as a reboot would: nothing checkpoints, the trial's run dies too.
    sweep = start(command, tmp_path)
    wait_for_steps(study_dir / "trial-0002", 12, sweep)
    os.killpg(sweep.pid, signal.SIGKILL)
    sweep.wait()
    assert "done:" not in (study_dir / "trial-0002" / "sweep.log").read_text()

    result = run(command, tmp_path)  # and again: trial 2 continues once its heartbeat is stale
    assert result.returncode == 0, result.stderr[-3000:]
    states = {trial.number: trial.state.name for trial in trials(study_dir)}
    assert states == {0: "FAIL", 1: "COMPLETE", 2: "FAIL", 3: "COMPLETE"}  # attempts, retries
    for folder in ("trial-0000", "trial-0002"):
        assert "resuming from" in (study_dir / folder / "sweep.log").read_text()
        assert steps_logged(study_dir / folder) == 30  # each step once
    # The killed trial ends as one never interrupted: the same fields, trained in one go.
    params = trials(study_dir)[3].params
    whole = tmp_path / "whole"
    arguments = ["--output_dir", str(whole), *fields]
    arguments += [f"--{name}={value}" for name, value in params.items()]
    train(arguments)
    assert logged(study_dir / "trial-0002") == logged(whole)  # every step, the same values
    assert_same_end(study_dir / "trial-0002", whole, 30)


@pytest.mark.sweep
def test_the_trials_of_a_region_that_cannot_learn_stop_early(tmp_path, trial_fields):
    """Half the space is a learning rate too small to learn with: once a trial of the other
    half has finished, the median pruner stops each of that half's trials before its end."""
    good = load_config(trial_fields).lr
    space = yaml.safe_dump({"lr": {"choices": [good, 1.0e-9]}})
    options = ["--startup_trials", "1", *trial_fields]
    result = run(sweep_command(tmp_path, 3, 1, *options, space_text=space), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    done = trials(tmp_path / "sweep")
    learning = [trial.number for trial in done if trial.params["lr"] == good]
    judged = [t for t in done if t.params["lr"] != good and learning and t.number > learning[0]]
    assert judged, "the sampler drew no trial of the bad half after a good one: change --seed"
    for trial in done:
        if trial.params["lr"] == good:
            assert trial.state.name == "COMPLETE" and trial.user_attrs["steps"] == 30
        elif trial in judged:
            assert trial.state.name == "PRUNED" and trial.user_attrs["steps"] < 30
    assert "| pruned |" in (tmp_path / "sweep" / "sweep.md").read_text()


def test_pruning_ends_a_trial_at_the_evaluation_its_pruner_rejects(tmp_path, short_run):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    direction = "maximize" if task.HIGHER_IS_BETTER else "minimize"
    study = optuna.create_study(study_name=STUDY, storage=storage, direction=direction)
    study.set_user_attr(PRUNER, {"name": "median", "startup_trials": 5})  # as sweep.py does
    perfect = 1.0 if task.HIGHER_IS_BETTER else 0.0  # no run reaches it
    dropout = optuna.distributions.FloatDistribution(0.0, 0.5)
    for _ in range(5):  # the median pruner's startup trials
        completed = optuna.trial.create_trial(
            params={"dropout": 0.1},
            distributions={"dropout": dropout},
            value=perfect,
            intermediate_values={3: perfect, 6: perfect},
        )
        study.add_trial(completed)
    trial = study.ask({"dropout": dropout})
    summary = train(short_run("--sweep_trial", f"{STUDY}/{trial.number}@{storage}"))
    assert summary["pruned"] and summary["stopped_early"] and summary["steps"] == 3
    assert (tmp_path / "run" / "checkpoints" / "step-000003.pt").is_file()
    assert (tmp_path / "run" / "model" / "model.safetensors").is_file()
    reported = study.get_trials()[trial.number].intermediate_values
    assert reported == {3: summary["value"]}


@pytest.mark.parametrize(
    ("space", "expected"),
    [
        ("lrr: {log: [0.001, 0.01]}", "lrr is not a field of TrainConfig"),
        ("output_dir: {choices: [a, b]}", "output_dir cannot be searched"),
        ("lr: {log: [0.01, 0.001]}", "needs [low, high] with low < high"),
        ("lr: {log: [0.0, 0.01]}", "log needs low > 0"),
        ("dropout: {float: [0.0, 1.5]}", "dropout 1.5 is refused: --dropout"),
        ("lr: [0.001, 0.01]", "expected {log|float|int: [low, high]} or {choices: [...]}"),
        ("max_steps: {int: [1, 5]}", "--max_steps is searched"),
    ],
)
def test_a_space_a_run_would_refuse_is_one_line_before_any_trial(tmp_path, space, expected):
    (tmp_path / "space.yaml").write_text(space)
    argv = ["--space", str(tmp_path / "space.yaml"), "--study_dir", str(tmp_path / "sweep")]
    message = refusal(main, [*argv, "--max_steps", "3"])
    assert message.startswith("error: ") and expected in message
    assert not list(tmp_path.glob("sweep/trial-*"))


def test_a_study_that_searched_another_space_is_refused(tmp_path):
    space = tmp_path / "space.yaml"
    argv = ["--space", str(space), "--study_dir", str(tmp_path / "sweep"), "--report"]
    space.write_text(SPACE)
    main(argv)  # creates the study and reports its (no) trials
    space.write_text("lr: {log: [1.0e-4, 1.0e-2]}\n")
    message = refusal(main, argv)
    assert "searched another space" in message and "another --study_dir" in message
