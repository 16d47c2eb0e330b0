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

from ..checkpoint import save_weights
from ..config import ConfigError, TrainConfig, save_config
from ..loaders import Datasets
from ..utils.files import NO_SPACE, disk_full, write_json
from .curves import plot_curves
from .folder_lock import claim_run_folder
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
# The package's own folder: run.json records the commit of the repository that holds it.
PACKAGE_DIR = Path(__file__).resolve().parents[1]


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
        try:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()
        except OSError as error:
            if error.errno not in NO_SPACE:
                raise
            raise disk_full(self.file.name, error) from error

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


# What a run writes in output_dir, folder (True) or file: one of the other kind in the way
# would fail the run at its first checkpoint or at its end, so it is refused before step 1.
OUTPUTS = {
    "checkpoints": True,
    "config.yaml": False,
    "run.json": False,
    METRICS_FILE: False,
    "summary.json": False,
    "curves.png": False,
    "model": True,
    "model/model.safetensors": False,
    "model/preprocess.json": False,
    "model/config.yaml": False,
    "model/README.md": False,
}


def start_run_folder(cfg: TrainConfig, datasets: Datasets, accelerator: Accelerator) -> None:
    """The run's claim on the folder, config.yaml and run.json. An output_dir that another
    run holds, that is not writable, or where a file or folder is in the way of an output
    fails here, before training, not at the first checkpoint or at the end."""
    output_dir = Path(cfg.output_dir)
    for name, is_folder in OUTPUTS.items():
        path = output_dir / name
        if path.exists() and path.is_dir() != is_folder:
            kind, wanted = ("a folder", "file") if path.is_dir() else ("a file", "folder")
            raise ConfigError(
                f"--output_dir: '{path}' is {kind}, where the run writes its {name} {wanted}: "
                "move it away, or give the run another --output_dir"
            )
    reason = unwritable_reason(output_dir)
    if reason:
        raise ConfigError(f"--output_dir: cannot write to '{output_dir}' ({reason})")
    claim_run_folder(output_dir)
    # Created now: a folder whose run stopped before its first checkpoint (resume.py) starts over
    checkpoints = output_dir / "checkpoints"
    reason = unwritable_reason(checkpoints)
    if reason:
        raise ConfigError(f"--output_dir: cannot write to '{checkpoints}' ({reason})")
    save_config(cfg, output_dir / "config.yaml")
    info = run_info(cfg, datasets.fingerprint, accelerator.num_processes, accelerator.device)
    info |= {"train_samples": len(datasets.train), "val_samples": len(datasets.val)}
    write_json(output_dir / "run.json", info)


def finish_run_folder(
    cfg: TrainConfig, weights: dict[str, torch.Tensor], preprocess: Any, summary: dict[str, Any]
) -> None:
    """model/ (weights, preprocessing, config, the model card), summary.json, curves.png,
    run.json's end."""
    output_dir = Path(cfg.output_dir)
    save_weights(weights, output_dir / "model")
    preprocess.save(output_dir / "model" / "preprocess.json")
    save_config(cfg, output_dir / "model" / "config.yaml")
    write_json(output_dir / "summary.json", summary)
    plot_curves(output_dir, summary["metric"], summary["baseline_value"])  # from metrics.jsonl
    complete_run_info(output_dir / "run.json")
    write_model_card(output_dir)  # from the files above


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
    commit, dirty = git_state(PACKAGE_DIR, Path(config.output_dir))
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


def git_state(code: Path, output_dir: Path) -> tuple[str | None, bool | None]:
    """The commit of the repository that holds `code`, and whether the files differ from it:
    changed files and untracked ones (a new module the run imports) count, except those under
    the run's own output_dir and those .gitignore ignores. (None, None) outside a repository.

    Git runs in `code`'s folder, not the current one, which may be another repository."""

    def git(*args: str) -> str:
        command = ["git", "-C", str(code), *args]
        run = subprocess.run(command, capture_output=True, text=True, check=True, timeout=10)
        return run.stdout

    try:
        top = Path(git("rev-parse", "--show-toplevel").strip()).resolve()
        commit = git("rev-parse", "HEAD").strip()
        outputs = output_dir.resolve()
        # :(top) is the whole repository, wherever `code` sits in it.
        pathspec = [":(top)"]
        if outputs.is_relative_to(top) and outputs != top:
            pathspec.append(f":(top,exclude,literal){outputs.relative_to(top)}")
        status = git("status", "--porcelain", "--untracked-files=normal", "--", *pathspec)
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, bool(status.strip())
