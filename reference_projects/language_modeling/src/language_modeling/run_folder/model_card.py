"""The model card, model/README.md: what the weights beside it are, in the format the
Hugging Face Hub reads (YAML front matter with the metrics as `model-index`, then prose).

It is written from the run's own records (run.json, summary.json and config.yaml) at the end
of every run, so it never disagrees with them.
"""

import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .. import task
from ..config import TrainConfig

PROJECT = "language-modeling"
HUB_TASK = "text-generation"  # the task as the Hub names it
MODEL = "A byte-level GPT"  # model.py's, trained from scratch
EMBEDDED_DATA = "Python's documentation"  # what a run without data_dir trains on
# Shown whatever their value; any other field only where the run changed its default.
TRAINING_FIELDS = ("epochs", "max_steps", "batch_size", "lr", "weight_decay", "seed")


def write_model_card(output_dir: Path) -> None:
    """model/README.md (and model/curves.png, when the run drew its curves)."""
    model_dir = output_dir / "model"
    run = json.loads((output_dir / "run.json").read_text())
    summary = json.loads((output_dir / "summary.json").read_text())
    config = yaml.safe_load((output_dir / "config.yaml").read_text())
    if (output_dir / "curves.png").is_file():
        shutil.copyfile(output_dir / "curves.png", model_dir / "curves.png")
    data = config["data_dir"] or EMBEDDED_DATA
    validation = f"validation {summary['metric']}"
    evaluated = {
        "task_type": HUB_TASK,
        "dataset_type": Path(config["data_dir"]).name if config["data_dir"] else "embedded",
        "dataset_name": data,
        "dataset_split": "validation",
        "metric_type": summary["metric"],
    }
    card_data = ModelCardData(
        model_name=PROJECT,
        library_name="pytorch",
        pipeline_tag=HUB_TASK,
        tags=[HUB_TASK, "pytorch"],
        eval_results=[
            EvalResult(**evaluated, metric_value=summary["value"], metric_name=validation),
            EvalResult(
                **evaluated, metric_value=summary["baseline_value"], metric_name="trivial baseline"
            ),
        ],
    )
    sections = [
        _summary(run, summary, data),
        _results(summary),
        _configuration(config),
        _provenance(run),
        "![Loss and validation metric by step](curves.png)"
        if (model_dir / "curves.png").is_file()
        else "",
    ]
    text = "\n\n".join(section for section in sections if section)
    ModelCard(f"---\n{card_data.to_yaml()}\n---\n\n{text}\n").save(model_dir / "README.md")


def _summary(run: dict[str, Any], summary: dict[str, Any], data: str) -> str:
    sizes = ""  # a run folder of an earlier release of the template has none in run.json
    if "train_samples" in run:
        sizes = f"{run['train_samples']} training and {run['val_samples']} validation samples; "
    return (
        f"# {PROJECT}\n\n"
        f"{MODEL} for {task.TASK.replace('_', ' ')}, trained from scratch with PyTorch on "
        f"{data} ({sizes}data fingerprint `{run['data_fingerprint']}`). "
        "`model.safetensors` holds the weights (their moving average where `ema_decay` is "
        "set), `preprocess.json` the preprocessing and `config.yaml` the configuration: "
        "everything `predict` needs."
    )


def _results(summary: dict[str, Any]) -> str:
    better = "higher" if summary["higher_is_better"] else "lower"
    rows = [
        (f"validation {summary['metric']}", f"**{summary['value']:.4f}** ({better} is better)"),
        ("best evaluation", _best(summary)),
        ("trivial baseline", f"{summary['baseline_value']:.4f}: {baseline_summary()}"),
        ("training", f"{summary['steps']} steps, {summary['epochs']:.2f} epochs"),
        ("stopped early", "yes" if summary.get("stopped_early") else "no"),
        ("wall time", f"{summary['wall_s']:.1f} s"),
    ]
    if summary["samples_per_s"]:  # None for a run of one step, whose first step is not timed
        rows.append(("throughput", f"{summary['samples_per_s']:,.0f} samples/s"))
    return "## Results\n\n" + _table(("", ""), rows)


def _best(summary: dict[str, Any]) -> str:
    if summary["best_value"] is None:  # resumed past its end before any evaluation
        return "none: the run ended before its first evaluation during training"
    return f"{summary['best_value']:.4f} at step {summary['best_step']}"


def _configuration(config: dict[str, Any]) -> str:
    defaults = asdict(TrainConfig())
    rows = [
        (f"`{name}`", f"`{value}`")
        for name, value in config.items()
        if name in TRAINING_FIELDS or (name != "output_dir" and value != defaults.get(name))
    ]
    return (
        "## Configuration\n\n"
        + _table(("field", "value"), rows)
        + "\n\nEvery other field has the default of `TrainConfig` (config.py); `config.yaml` "
        "holds them all."
    )


def _provenance(run: dict[str, Any]) -> str:
    commit = run["git_commit"] or "not in a git repository"
    if run["git_dirty"]:
        commit += " (with uncommitted changes)"
    versions = ", ".join(f"{name} {version}" for name, version in run["libraries"].items())
    processes = "process" if run["world_size"] == 1 else "processes"
    return (
        "## How it was trained\n\n"
        f"- Command: `{run['command']}`\n"
        f"- Seed {run['seed']}; commit {commit}\n"
        f"- {run['world_size']} {processes} on {run['device']}, {run['start_time']} to "
        f"{run.get('end_time', 'unfinished')}\n"
        f"- {versions}"
    )


def baseline_summary() -> str:
    """What the task's trivial baseline is: the summary line of its docstring."""
    return " ".join(task.baseline.__doc__.split("\n\n")[0].split())


def _table(header: tuple[str, str], rows: list[tuple[str, str]]) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    return "\n".join([*lines, *(f"| {name} | {value} |" for name, value in rows)])
