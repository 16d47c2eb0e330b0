"""What every tracker holds of a run, read back with the tracker's own reader
(tracker_records.py); test_tensorboard.py tests what is this tracker's own."""

from run_logs import assert_same_points, logged_points
from tracker_records import read_back

from image_classification_loaded import task
from image_classification_loaded.config import TrainConfig
from image_classification_loaded.train import main


def test_the_tracker_holds_every_logged_point_and_the_config(short_run, tmp_path):
    main(short_run())
    series, hyperparameters = read_back(tmp_path / "run")
    losses = logged_points(tmp_path / "run", "loss")
    metrics = logged_points(tmp_path / "run", task.METRIC, "val")
    assert len(losses) == 6 and len(metrics) == 2  # log_every 1, eval_every 3, 6 steps
    assert_same_points(series["train/loss"], losses)
    assert_same_points(series[f"val/{task.METRIC}"], metrics)
    assert {"train/lr", "train/grad_norm", "train/samples_per_s", "val/loss"} <= series.keys()
    assert float(hyperparameters["lr"]) == TrainConfig.lr
    assert hyperparameters["output_dir"] == str(tmp_path / "run")
