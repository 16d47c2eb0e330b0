"""The data command (data.py run as a module): what a run would train on, without training;
data that training refuses is refused in the same one line."""

import os
import subprocess
import sys
from pathlib import Path

from data_fixtures import described_lines

from image_classification import data, task
from image_classification.config import load_config
from image_classification.describe import main

SRC = Path(__file__).resolve().parents[1] / "src"


def test_it_shows_the_split_the_targets_the_baseline_and_the_fingerprint(
    user_data, tmp_path, capsys
):
    args = user_data(tmp_path / "data")
    main(args)
    shown = capsys.readouterr().out.splitlines()
    cfg = load_config(args)
    datasets = data.build_datasets(cfg)
    baseline = task.baseline(datasets.train_targets, datasets.val_targets)
    assert shown[0] == f"{task.TASK} data: {cfg.data_dir}"
    assert shown[1].startswith(f"samples: {len(datasets.train)} train / {len(datasets.val)} ")
    assert shown[-2].startswith(f"trivial baseline: {task.METRIC} {baseline:.4f} on validation")
    assert shown[-1].startswith(f"fingerprint: {datasets.fingerprint} ")
    words = [" ".join(line.split()) for line in shown]
    for expected in described_lines(datasets):  # the task's own (data_fixtures.py)
        assert any(line.startswith(expected) for line in words), (expected, shown)


def test_the_command_refuses_bad_data_in_one_line(tmp_path):
    missing = tmp_path / "missing"
    command = [sys.executable, "-m", data.__name__, "--data_dir", str(missing)]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [result.stderr.strip()]  # one line, no traceback
    assert result.stderr.startswith(f"error: --data_dir: '{missing}'")
