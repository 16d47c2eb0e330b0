"""The loop's log: its records of training steps and evaluations, in output_dir/metrics.jsonl,
written by the main process.

No experiment tracker was chosen, so that file is the whole log: curves.png is drawn from it
when the run ends, and `pandas.read_json(path, lines=True)` reads it.
"""

from pathlib import Path

from accelerate import Accelerator

from .checkpoint import Progress
from .config import TrainConfig
from .processes import open_metrics_log
from .run_folder.records import MetricsLog


def open_run_log(accelerator: Accelerator, cfg: TrainConfig, progress: Progress) -> MetricsLog:
    """metrics.jsonl, continued after a resumed run's step; a context manager around the loop."""
    return open_metrics_log(accelerator, Path(cfg.output_dir), progress)
