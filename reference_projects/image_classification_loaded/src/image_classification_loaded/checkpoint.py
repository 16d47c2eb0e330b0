"""Checkpoints: complete, atomic, self-describing; and the weights kept for inference.

A checkpoint is a dict of state_dicts, tensors and plain values (never pickled objects),
so it loads with `weights_only=True`. Files are `checkpoints/step-000120.pt`; the newest
`keep_checkpoints` are kept, plus the best by the task's metric. The text files `latest`
and `best` beside them name a checkpoint and only move after it is completely written.
"""

import logging
import os
import random
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

log = logging.getLogger(__name__)

# Keys of a checkpoint file.
MODEL = "model"
OPTIMIZER = "optimizer"
SCALER = "scaler"
PROGRESS = "progress"
RNG = "rng"
CONFIG = "config"

_NAME = re.compile(r"^step-(\d+)\.pt$")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file and the reason."""


@dataclass
class Progress:
    """Where training stands; a checkpoint taken here resumes exactly here."""

    step: int = 0  # optimizer steps done
    epoch: int = 0  # epoch in progress
    batch: int = 0  # micro-batches of that epoch already trained on
    best_metric: float | None = None
    best_step: int | None = None
    # Losses of the steps since the last log step: a resumed run logs the same averages.
    window_losses: list[float] = field(default_factory=list)


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"step-{step:06d}.pt"


def save_checkpoint(
    directory: Path,
    progress: Progress,
    states: dict[str, Any],
    keep: int,
    is_best: bool,
) -> Path:
    """Write `states` plus progress and RNG states atomically, move the markers, prune.

    The RNG states are this process's, unless `states` brings its own under RNG.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = checkpoint_path(directory, progress.step)
    payload = {RNG: rng_states(), **states, PROGRESS: asdict(progress)}
    _atomic_write(path, lambda file: torch.save(payload, file))
    _atomic_write(directory / "latest", lambda file: file.write(f"{path.name}\n".encode()))
    if is_best:
        _atomic_write(directory / "best", lambda file: file.write(f"{path.name}\n".encode()))
    _prune(directory, keep)
    return path


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load one checkpoint on the CPU, refusing anything but tensors and plain values."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{path}' does not exist")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated or corrupt files raise many different errors
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CheckpointError(f"checkpoint '{path}' is unreadable ({reason[:120]})") from None
    if not isinstance(payload, dict) or not {MODEL, PROGRESS} <= payload.keys():
        raise CheckpointError(f"checkpoint '{path}' is not a training checkpoint of this project")
    return payload


def checkpoint_to_resume(resume: str, directory: Path) -> tuple[Path, dict[str, Any]] | None:
    """What `--resume` asks for: none, the newest usable one in `directory` (auto), or a file."""
    if resume == "none":
        return None
    if resume == "auto":
        return find_resume_checkpoint(directory)
    return Path(resume), load_checkpoint(Path(resume))


def find_resume_checkpoint(directory: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint in `directory` that loads; a broken newer one is reported, skipped."""
    for path in sorted(list_checkpoints(directory), reverse=True):
        try:
            return path, load_checkpoint(path)
        except CheckpointError as error:
            log.warning("%s; trying the previous one", error)
    return None


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoint files, oldest first (temporary files never match)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if _NAME.match(p.name))


def load_model_state(model: nn.Module, state: dict[str, torch.Tensor], source: Path) -> None:
    """Strict load with a one-line error that names the keys and shapes that do not fit."""
    expected = model.state_dict()
    missing = sorted(expected.keys() - state.keys())
    unexpected = sorted(state.keys() - expected.keys())
    reshaped = [
        f"{key} {tuple(state[key].shape)} vs {tuple(value.shape)}"
        for key, value in expected.items()
        if key in state and state[key].shape != value.shape
    ]
    if missing or unexpected or reshaped:
        parts = [
            f"{label}: {', '.join(keys[:4])}{' ...' if len(keys) > 4 else ''}"
            for label, keys in (
                ("missing", missing),
                ("unexpected", unexpected),
                ("shape", reshaped),
            )
            if keys
        ]
        raise CheckpointError(f"checkpoint '{source}' does not fit this model ({'; '.join(parts)})")
    model.load_state_dict(state)


def restore_rng_states(states: dict[str, Any]) -> None:
    random.setstate(_to_tuple(states["python"]))
    np.random.set_state(
        ("MT19937", states["numpy"][0].numpy().astype(np.uint32), *states["numpy"][1:])
    )
    torch.set_rng_state(states["torch"])
    if torch.cuda.is_available() and states["cuda"]:
        torch.cuda.set_rng_state_all(states["cuda"])


def save_weights(model: nn.Module, directory: Path) -> Path:
    """Weights for inference, as safetensors (no code runs when they are loaded)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "model.safetensors"
    state = {key: value.detach().cpu().contiguous() for key, value in model.state_dict().items()}
    save_file(state, path)
    return path


def load_weights(model: nn.Module, directory: Path) -> nn.Module:
    path = directory / "model.safetensors"
    load_model_state(model, load_file(path), path)
    return model


def rng_states() -> dict[str, Any]:
    """This process's random states: Python, NumPy, torch on the CPU and every CUDA device."""
    _, keys, position, has_gauss, gauss = np.random.get_state()
    return {
        "python": random.getstate(),
        # NumPy's state holds an ndarray, which weights_only refuses: store it as a tensor.
        "numpy": (torch.from_numpy(keys.astype(np.int64)), position, has_gauss, gauss),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def _to_tuple(value: Any) -> Any:
    return tuple(_to_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value


def _atomic_write(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Write to a temporary file beside `path`, fsync, then rename over it.

    A crash at any moment leaves either the old file or the new one, never a partial one:
    os.replace is atomic on POSIX and Windows, and it replaces without unlinking first.
    """
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as file:
        write(file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    if hasattr(os, "O_DIRECTORY"):  # make the rename itself durable
        descriptor = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _prune(directory: Path, keep: int) -> None:
    """Delete all but the newest `keep` checkpoints and the best; rebuilt from the files."""
    best_marker = directory / "best"
    best = best_marker.read_text().strip() if best_marker.is_file() else None
    for path in list_checkpoints(directory)[:-keep]:
        if path.name != best:
            path.unlink()
