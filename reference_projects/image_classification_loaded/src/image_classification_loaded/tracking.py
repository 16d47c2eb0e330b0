"""Experiment tracking with TensorBoard, through Accelerate's tracker integration.

    tensorboard --logdir outputs/run/tensorboard

Event files go to output_dir/tensorboard; `--logdir outputs` compares every run under outputs/.
tracker_run.py holds the run around the loop; this file, what is TensorBoard's own.
"""

import logging
from dataclasses import asdict
from pathlib import Path

from accelerate import Accelerator

from .config import TrainConfig
from .tracker_run import TrackerRun, start_run, writable_dir

log = logging.getLogger(__name__)
PROJECT = "tensorboard"  # TensorBoard's project is the folder in output_dir for its event files


def start_tracker(accelerator: Accelerator, cfg: TrainConfig, resumed_step: int) -> TrackerRun:
    """The tracker's run, started before training (tracker_run.start_run)."""
    return start_run(accelerator, cfg, resumed_step, _start, _end_stopped)


def _start(accelerator: Accelerator, cfg: TrainConfig, output_dir: Path, resumed_step: int) -> int:
    # Accelerator(project_dir=output_dir) puts the event files in output_dir/PROJECT.
    directory = writable_dir(output_dir / PROJECT)
    # A resumed run first hides the events the interrupted run logged after its checkpoint,
    # so the curves do not double back (as metrics.jsonl drops those lines).
    writer_kwargs = {"purge_step": resumed_step + 1} if resumed_step else {}
    accelerator.init_trackers(
        PROJECT, config=asdict(cfg), init_kwargs={"tensorboard": writer_kwargs}
    )
    log.info("tensorboard: view this run with `tensorboard --logdir %s`", directory)
    return resumed_step  # the events it holds; those logged after it were purged


def _end_stopped(accelerator: Accelerator, killed: bool) -> None:
    """TensorBoard has no run status: close the event file, which holds every logged step."""
    accelerator.get_tracker("tensorboard").finish()
