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
from calls import refusal
from PIL import Image
from run_logs import assert_same_end, logged

from image_classification import task
from image_classification.config import load_config
from image_classification.sweep import PACKAGE, STUDY, main
from image_classification.train import main as train
from image_classification.utils.pruning import PRUNER

SRC = Path(__file__).resolve().parents[1] / "src"
SPACE = "lr: {log: [1.0e-3, 1.0e-2]}\ndropout: {float: [0.0, 0.3]}\n"


@pytest.fixture
def trial_fields(short_run_in, tmp_path):
    """Fixed fields of the trials: a short run's (conftest.py), without its output_dir."""
    fields = short_run_in(tmp_path / "unused", "--max_steps", "30", "--eval_every", "10")
    return [field for field in fields if not field.startswith("--output_dir")]


def sweep_command(tmp_path: Path, trials: int, processes: int, *extra: str) -> list[str]:
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    options = ["--space", str(space), "--trials", str(trials), "--heartbeat_s", "1"]
    options += ["--study_dir", str(tmp_path / "sweep")]
    return [sys.executable, "-m", f"{PACKAGE}.sweep", *options, *extra]


def project_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = project_env()
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def trials(study_dir: Path) -> list[optuna.trial.FrozenTrial]:
    storage = f"sqlite:///{study_dir / 'study.db'}"
    return optuna.load_study(study_name=STUDY, storage=storage).get_trials()


def steps_logged(output_dir: Path) -> int:
    return sum(1 for record in logged(output_dir) if "split" not in record)


def test_two_workers_share_a_study_and_every_trial_is_a_run(tmp_path, trial_fields):
    result = run(sweep_command(tmp_path, 3, 1, "--workers", "2", *trial_fields), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    study_dir = tmp_path / "sweep"
    done = [trial for trial in trials(study_dir) if trial.state.is_finished()]
    # Each worker stops once 3 have finished; one may finish a trial it had started.
    assert 3 <= len(done) <= 4 and all(t.state.name == "COMPLETE" for t in done)
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


def test_a_killed_sweep_run_again_resumes_its_trial_and_ends_with_every_trial(
    tmp_path, trial_fields
):
    fields = [*trial_fields, "--log_every", "1", "--checkpoint_every", "5"]
    command = sweep_command(tmp_path, 2, 2, *fields)
    # The sweep in a session of its own, killed whole as a reboot would: the trial too.
    sweep = subprocess.Popen(
        command, cwd=tmp_path, env=project_env(), stderr=subprocess.DEVNULL, start_new_session=True
    )
    second = tmp_path / "sweep" / "trial-0001"
    deadline = time.monotonic() + 300
    while not ((second / "metrics.jsonl").exists() and steps_logged(second) >= 12):
        assert sweep.poll() is None and time.monotonic() < deadline, "trial 1 never got going"
        time.sleep(0.005)
    os.killpg(sweep.pid, signal.SIGKILL)
    sweep.wait()
    assert "done:" not in (second / "sweep.log").read_text()

    result = run(command, tmp_path)  # the same command again
    assert result.returncode == 0, result.stderr[-3000:]
    by_state = {}
    for trial in trials(tmp_path / "sweep"):
        by_state.setdefault(trial.state.name, []).append(trial)
    assert len(by_state["COMPLETE"]) == 2 and len(by_state["FAIL"]) == 1  # the killed attempt
    resumed = [t for t in by_state["COMPLETE"] if t.user_attrs["output_dir"].endswith("-0001")]
    assert len(resumed) == 1 and "resuming from" in (second / "sweep.log").read_text()
    # The resumed trial ends as one never interrupted: the same fields, trained in one go.
    params = [f"--{name}={value}" for name, value in resumed[0].params.items()]
    whole = tmp_path / "whole"
    launcher = [sys.executable]
    train_command = [*launcher, "-m", f"{PACKAGE}.train", "--output_dir", str(whole)]
    uninterrupted = run([*train_command, *fields, *params], tmp_path)
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
    assert logged(second) == logged(whole)  # every step once, with the same values
    assert_same_end(second, whole, 30)


def test_pruning_ends_a_trial_at_the_evaluation_its_pruner_rejects(tmp_path, short_run):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    direction = "maximize" if task.HIGHER_IS_BETTER else "minimize"
    study = optuna.create_study(study_name=STUDY, storage=storage, direction=direction)
    study.set_user_attr(PRUNER, "median")  # as sweep.py records its --pruner
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
