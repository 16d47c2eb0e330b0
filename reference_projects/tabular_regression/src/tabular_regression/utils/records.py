"""What a run writes besides checkpoints: config.yaml and run.json before training,
metrics.jsonl during it, model/ (with its card), summary.json and curves.png after it."""

import hashlib
import json
import math
import platform
import resource
import socket
import subprocess
import sys
from dataclasses import asdict
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from torch import nn

from ..checkpoint import save_weights
from ..config import ConfigError, TrainConfig, save_config
from ..loaders import Datasets
from .curves import plot_curves
from .model_card import write_model_card

# Whose versions run.json records: what computes, stores and exports a result.
LIBRARIES = (
    "torch",
    "accelerate",
    "numpy",
    "scikit-learn",
    "safetensors",
    "pillow",
    "matplotlib",
)


METRICS_FILE = "metrics.jsonl"


class MetricsLog:
    """Appends one JSON object per logged step or evaluation to metrics.jsonl.

    On resume, lines after the resumed step are dropped first: they came from the part of
    the interrupted run that is about to be trained again.
    """

    def __init__(self, path: Path, resume_step: int):
        if path.exists():
            lines = path.read_text().splitlines()
            kept = [line for line in lines if _step_of(line) <= resume_step]
            path.write_text("".join(f"{line}\n" for line in kept))
        self.file = path.open("a")

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> "MetricsLog":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def logged_records(output_dir: Path, after: int, until: int) -> list[dict[str, Any]]:
    """The records of output_dir/METRICS_FILE whose step is after `after`, up to `until`."""
    path = output_dir / METRICS_FILE
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if after < _step_of(line) <= until]


def _step_of(line: str) -> float:
    """The step a metrics line belongs to; a line cut short by a killed run counts as none."""
    try:
        return json.loads(line)["step"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return math.inf


def start_run_folder(cfg: TrainConfig, datasets: Datasets, accelerator: Accelerator) -> None:
    """config.yaml and run.json; an output_dir that is not writable fails here, before
    training, not at the first checkpoint."""
    output_dir = Path(cfg.output_dir)
    reason = unwritable_reason(output_dir)
    if reason:
        raise ConfigError(f"--output_dir: cannot write to '{output_dir}' ({reason})")
    save_config(cfg, output_dir / "config.yaml")
    info = run_info(cfg, datasets.fingerprint, accelerator.num_processes, accelerator.device)
    info |= {"train_samples": len(datasets.train), "val_samples": len(datasets.val)}
    write_json(output_dir / "run.json", info)


def finish_run_folder(
    cfg: TrainConfig, model: nn.Module, preprocess: Any, summary: dict[str, Any]
) -> None:
    """model/ (weights, preprocessing, config, the model card), summary.json, curves.png,
    run.json's end."""
    output_dir = Path(cfg.output_dir)
    save_weights(model, output_dir / "model")
    preprocess.save(output_dir / "model" / "preprocess.json")
    save_config(cfg, output_dir / "model" / "config.yaml")
    write_json(output_dir / "summary.json", summary)
    plot_curves(output_dir, summary["metric"], summary["baseline_value"])  # from metrics.jsonl
    complete_run_info(output_dir / "run.json")
    write_model_card(output_dir)  # from the files above


def write_json(path: Path, content: dict[str, Any]) -> None:
    path.write_text(json.dumps(content, indent=2) + "\n")


def unwritable_reason(directory: Path) -> str | None:
    """Create `directory` and write a probe file there: why that failed, or None if it worked.

    Callers check their folders before training, not at the first save an hour later.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        return error.strerror or type(error).__name__
    return None


def run_info(
    config: Any, data_fingerprint: str, world_size: int, device: torch.device
) -> dict[str, Any]:
    """Everything needed to tell later what produced a result."""
    commit, dirty = _git_state()
    resolved = asdict(config)
    return {
        "seed": config.seed,
        "git_commit": commit,
        "git_dirty": dirty,
        "libraries": {"python": platform.python_version(), **_versions(LIBRARIES)},
        "data_fingerprint": data_fingerprint,
        "config_hash": hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[
            :16
        ],
        "world_size": world_size,
        "device": str(device),
        "gpu": _gpu(device),
        "repeatable": _repeatable(config.deterministic, device),
        "host": socket.gethostname(),
        "command": " ".join(sys.argv),
        "start_time": _now(),
    }


def complete_run_info(path: Path) -> None:
    """Add the end time to run.json: a run.json without one is from a run that did not finish."""
    write_json(path, json.loads(path.read_text()) | {"end_time": _now()})


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory of the run: allocated on the GPU, or this process's resident set on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    # ru_maxrss is in KiB on Linux and in bytes on macOS.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def _gpu(device: torch.device) -> dict[str, Any] | None:
    """The GPUs of a CUDA run and the CUDA and cuDNN versions it ran with; None on a CPU."""
    if device.type != "cuda":
        return None
    return {
        "name": torch.cuda.get_device_name(device),
        "count": torch.cuda.device_count(),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
    }


def _repeatable(deterministic: bool, device: torch.device) -> str:
    """What a second run of the same command, or a killed run resumed, gives: the README's
    "Resuming" section says why."""
    if deterministic or device.type == "cpu":
        return "bit for bit"
    # Every state resumes exactly, but cuDNN's autotuning and CUDA's atomic adds sum in an
    # order that varies between runs: the last bits differ from the first step on.
    return "within run-to-run noise (--deterministic true for bit for bit)"


def _versions(names: tuple[str, ...]) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _git_state() -> tuple[str | None, bool | None]:
    """The commit of the code being run and whether it has uncommitted changes."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=5
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=5,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, bool(status.strip())
