"""TensorBoard tracking, read back with TensorBoard's own event reader."""

import json
import time
from pathlib import Path
from typing import Any

import pytest
from calls import refusal
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

from image_classification_loaded import task
from image_classification_loaded import train as train_module
from image_classification_loaded.config import TrainConfig
from image_classification_loaded.train import main

Points = list[tuple[int, float]]  # (step, value) in step order
Series = dict[str, Points]  # by metric name


def logged(output_dir: Path) -> tuple[Points, Points]:
    """Training losses and validation metrics by step, as metrics.jsonl holds them."""
    records = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [(r["step"], r["loss"]) for r in records if "split" not in r]
    metrics = [(r["step"], r[task.METRIC]) for r in records if r.get("split") == "val"]
    return losses, metrics


def assert_same_points(tracked: Points, expected: Points) -> None:
    assert [step for step, _ in tracked] == [step for step, _ in expected]
    # Some trackers store float32.
    assert [v for _, v in tracked] == pytest.approx([v for _, v in expected], rel=1e-6)


def test_the_tracker_holds_every_logged_point_and_the_config(short_run, tmp_path):
    main(short_run())
    series, hyperparameters = read_back(tmp_path / "run")
    losses, metrics = logged(tmp_path / "run")
    assert len(losses) == 6 and len(metrics) == 2  # log_every 1, eval_every 3, 6 steps
    assert_same_points(series["train/loss"], losses)
    assert_same_points(series[f"val/{task.METRIC}"], metrics)
    assert {"train/lr", "train/grad_norm", "train/samples_per_s", "val/loss"} <= series.keys()
    assert float(hyperparameters["lr"]) == TrainConfig.lr
    assert hyperparameters["output_dir"] == str(tmp_path / "run")


def test_a_blocked_tracker_folder_fails_before_training(short_run, tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "tensorboard").write_text("")  # a file where the folder must go
    message = refusal(main, short_run())
    assert "tensorboard cannot write to" in message
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no step was trained


def test_a_resumed_run_replaces_the_steps_it_trains_again(short_run, tmp_path, monkeypatch):
    evaluate = train_module.evaluate
    evaluations = []

    def evaluate_then_die_at_the_second(*args):
        evaluations.append(1)
        if len(evaluations) == 2:
            raise KeyboardInterrupt  # at step 6, after logging steps 4-6; checkpoint at step 3
        return evaluate(*args)

    monkeypatch.setattr(train_module, "evaluate", evaluate_then_die_at_the_second)
    with pytest.raises(SystemExit, match="130"):  # a Ctrl-C that stops at once
        main(short_run())
    monkeypatch.undo()
    # TensorBoard reads event files in name order, and names start with the creation time in
    # seconds: a real resume starts later than the run it resumes, so this one does too.
    time.sleep(1)
    main(short_run())  # resumes at step 3 and logs steps 4-6 again
    series, _ = read_back(tmp_path / "run")
    assert_same_points(series["train/loss"], logged(tmp_path / "run")[0])  # steps 1-6, once


def read_back(output_dir: Path) -> tuple[Series, dict[str, Any]]:
    """Scalars from the run's event files; hyperparameters from the hparams plugin's run."""
    directory = output_dir / "tensorboard"
    events = EventAccumulator(str(directory))
    events.Reload()
    series = {
        tag: [(event.step, event.value) for event in events.Scalars(tag)]
        for tag in events.Tags()["scalars"]
    }
    hyperparameters = {}
    for events_file in directory.glob("*/events.out.tfevents.*"):  # add_hparams' own run
        hparams = EventAccumulator(str(events_file.parent))
        hparams.Reload()
        content = hparams.PluginTagToContent("hparams")["_hparams_/session_start_info"]
        values = HParamsPluginData.FromString(content).session_start_info.hparams
        hyperparameters |= {name: getattr(v, v.WhichOneof("kind")) for name, v in values.items()}
    return series, hyperparameters
