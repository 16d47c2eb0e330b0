"""What is TensorBoard's own: its folder in output_dir, whose event files hold each step once
after a resume."""

import time

import pytest
from calls import refusal
from run_logs import assert_same_points, logged_points
from tracker_records import read_back

from image_classification_loaded import train as train_module
from image_classification_loaded.train import main


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
    assert_same_points(series["train/loss"], logged_points(tmp_path / "run", "loss"))  # 1-6, once


def test_a_blocked_tensorboard_folder_fails_before_training(short_run, tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "tensorboard").write_text("")  # a file where the folder must go
    message = refusal(main, short_run())
    assert "tensorboard cannot write to" in message
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no step was trained
