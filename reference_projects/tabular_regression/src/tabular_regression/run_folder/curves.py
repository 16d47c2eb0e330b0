"""The run's curves as a picture, drawn from metrics.jsonl at the end of training.

matplotlib's object-oriented API renders on its Agg canvas directly: no pyplot, no display
and no global state, so it works on a headless server, in parallel tests and in notebooks.
"""

import json
from pathlib import Path

from matplotlib.figure import Figure


def plot_curves(output_dir: Path, metric: str, baseline: float) -> None:
    """Draw output_dir/metrics.jsonl into output_dir/curves.png: loss and `metric` by step."""
    train, val = [], []
    for line in (output_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        (val if record.get("split") == "val" else train).append(record)

    figure = Figure(figsize=(10, 4))
    # Fixed margins: a layout engine would take most of the drawing's time, every run.
    figure.subplots_adjust(left=0.07, right=0.98, bottom=0.12, top=0.92, wspace=0.2)
    loss_axes, metric_axes = figure.subplots(1, 2)
    loss_axes.plot(*_series(train, "loss"), label="train")
    loss_axes.plot(*_series(val, "loss"), marker="o", label="validation")
    # Linear axes: a log axis labels its ticks with mathtext, whose parser keeps exceptions
    # (and with them the caller's stack frames) in reference cycles.
    loss_axes.set(title="loss", xlabel="step")
    metric_axes.plot(*_series(val, metric), marker="o", label="validation")
    metric_axes.axhline(baseline, color="grey", linestyle="--", label="trivial baseline")
    metric_axes.set(title=f"validation {metric}", xlabel="step")
    for axes in (loss_axes, metric_axes):
        axes.grid(alpha=0.3)
        axes.legend()
    figure.savefig(output_dir / "curves.png", dpi=100)


def _series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [(record["step"], record[key]) for record in records if key in record]
    return [step for step, _ in points], [value for _, value in points]
