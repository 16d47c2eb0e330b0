"""The data command: what a run with these fields would train on, without training.

    python -m tabular_regression.data [--config FILE] [--field value ...]

prints the split, what the targets hold, the trivial baseline and the fingerprint that a
resume checks. Data that training would refuse is refused with the same one line (exit 1),
and skipped files are counted the same way.
"""

import logging
import sys

from . import data, task
from .config import ConfigError, load_config
from .loaders import DataError
from .run_folder.model_card import baseline_summary
from .utils.monitor import configure_logging


def main(argv: list[str] | None = None) -> None:
    configure_logging(logging.INFO)
    try:
        cfg = load_config(sys.argv[1:] if argv is None else argv, command="data")
        datasets = data.build_datasets(cfg)
    except (ConfigError, DataError) as error:
        raise SystemExit(f"error: {error}") from None
    baseline = task.baseline(datasets.train_targets, datasets.val_targets)
    lines = [
        f"{task.TASK} data: {cfg.data_dir or 'the embedded dataset'}",
        f"samples: {len(datasets.train)} train / {len(datasets.val)} validation "
        f"(val_fraction {cfg.val_fraction})",
        *data.describe(datasets),
        f"trivial baseline: {task.METRIC} {baseline:.4f} on validation ({baseline_summary()})",
        f"fingerprint: {datasets.fingerprint} (recorded in run.json and checkpoints)",
    ]
    print("\n".join(lines))
