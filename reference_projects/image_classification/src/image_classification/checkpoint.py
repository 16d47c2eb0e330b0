"""Checkpoints: complete, atomic, self-describing; and the weights kept for inference.

A checkpoint is a dict of state_dicts, tensors and plain values (never pickled objects),
so it loads with `weights_only=True`. Files are `checkpoints/step-000120.pt`, ordered by
the step number in the name (step-1000000.pt comes after step-999999.pt); the newest
`keep_checkpoints` are kept, plus the best by the task's metric. The text files `latest`
and `best` beside them name a checkpoint and only move after it is completely written.

Every checkpoint has one layout, whatever the number of processes that wrote it: RNG holds
one entry per process; storage.py decides where the model's tensors are kept. FORMAT_VERSION
numbers that layout; older versions load through `_upgrade`, newer ones are refused. Every
file ends with a checksum of its bytes, verified before it is loaded: a damaged checkpoint
is reported and skipped for the previous one (resume.py), never trained on.
"""

import random
import re
import shutil
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from safetensors.torch import load_file, save
from torch import nn

from .average import averaged_weights
from .loaders import SHUFFLE, SHUFFLE_BEFORE_FORMAT_5
from .utils.errors import UserError, first_line
from .utils.files import DiskFull, archive_damage, atomic_write, with_checksum

# Keys of a checkpoint file.
MODEL = "model"
AVERAGE = "average"  # the weights' moving average (average.py); empty without one
OPTIMIZER = "optimizer"
PROGRESS = "progress"
RNG = "rng"  # a list: one entry per process, in rank order
CONFIG = "config"
DATA = "data_fingerprint"
FORMAT = "format"
DATA_GENERATOR = "data_generator"  # key of the loader generator's state in an RNG entry
# A checkpoint of sharded training names here the folder beside its file that holds the
# model's, average's and optimizer's shards, instead of MODEL, AVERAGE and OPTIMIZER.
SHARDS = "shards"
# precision.py adds the entries of what it keeps, where the precision keeps anything.

# 1: before checkpoints had FORMAT (one process stored RNG as a dict); 2: one RNG layout for
# any number of processes; 3: progress counts stale evaluations (early stopping), and the
# weights' average is kept where ema_decay asks for one; 4: progress says whether a sweep's
# pruner stopped the run; 5: progress says how each epoch's shuffle is seeded (loaders.py:
# earlier checkpoints resume with seed + epoch), and the file ends with its checksum.
FORMAT_VERSION = 5

_NAME = re.compile(r"^step-(\d+)\.pt$")
_STEP_NAMED = re.compile(r"^(step-\d+)\.")  # a checkpoint's file, and what is kept beside it


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that cannot be used; the message names the file and the reason."""


class CheckpointRefused(CheckpointError):
    """A readable checkpoint that this run must not continue: never skipped for an older one."""


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
    total_steps: int = 0  # where the run ends; 0: unknown (checkpoints of format version 1)
    # Evaluations in a row without an improvement of more than early_stopping_min_delta.
    stale_evaluations: int = 0
    pruned: bool = False  # a sweep's pruner stopped the run (search/pruning.py)
    shuffle: str = SHUFFLE  # how each epoch's shuffle is seeded, kept for the run's lifetime


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"step-{step:06d}.pt"


def save_checkpoint(
    directory: Path, progress: Progress, states: dict[str, Any], keep: int, is_best: bool
) -> Path:
    """Write `states` plus progress and the format version atomically, move the markers, prune."""
    directory.mkdir(parents=True, exist_ok=True)
    path = checkpoint_path(directory, progress.step)
    payload = {FORMAT: FORMAT_VERSION, **states, PROGRESS: asdict(progress)}
    try:
        atomic_write(path, lambda file: with_checksum(partial(torch.save, payload), file))
        atomic_write(directory / "latest", lambda file: file.write(f"{path.name}\n".encode()))
        if is_best:
            atomic_write(directory / "best", lambda file: file.write(f"{path.name}\n".encode()))
    except DiskFull as error:
        complete = list_checkpoints(directory)  # the newest may be this step's, if complete
        resumes = f" to resume from '{complete[-1]}'" if complete else ""
        raise DiskFull(f"{error}{resumes}") from error.__cause__
    _prune(directory, keep)
    return path


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load one checkpoint on the CPU, refusing anything but tensors and plain values."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{path}' does not exist")
    try:
        damage = archive_damage(path)
    except Exception as error:  # not a zip archive: truncated, emptied, or another file
        reason = first_line(error, 120)
        raise CheckpointError(f"checkpoint '{path}' is unreadable ({reason})") from None
    if damage:
        raise CheckpointError(f"checkpoint '{path}' is corrupt ({damage})")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated or corrupt files raise many different errors
        reason = first_line(error, 120)
        raise CheckpointError(f"checkpoint '{path}' is unreadable ({reason})") from None
    if not _is_training_checkpoint(payload):
        raise CheckpointError(f"checkpoint '{path}' is not a training checkpoint of this project")
    version = payload.get(FORMAT, 1)
    if version not in range(1, FORMAT_VERSION + 1):
        raise CheckpointRefused(
            f"checkpoint '{path}' has format version {version!r}; this project reads versions "
            f"1 to {FORMAT_VERSION}: update the project (copier update) to read it"
        )
    return _upgrade(payload)


def _is_training_checkpoint(payload: Any) -> bool:
    """Whether `payload` has what every version holds: the model (or its shards), the progress
    and the random states (version 1 of one process: a dict, the loader generator's beside)."""
    if not isinstance(payload, dict) or not {PROGRESS, RNG} <= payload.keys():
        return False
    if MODEL not in payload and not isinstance(payload.get(SHARDS), str):
        return False
    return not isinstance(payload[RNG], dict) or DATA_GENERATOR in payload


def _upgrade(payload: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint in this version's layout. Version 1 of one process kept its RNG states
    as a dict, the loader generator's beside them. Before 3 and 4 (stale evaluations, pruned)
    Progress's defaults hold; before 5 every epoch's shuffle was seeded with seed + epoch."""
    if isinstance(payload[RNG], dict):
        payload[RNG] = [payload[RNG] | {DATA_GENERATOR: payload.pop(DATA_GENERATOR)}]
    payload[PROGRESS].setdefault("shuffle", SHUFFLE_BEFORE_FORMAT_5)
    payload[FORMAT] = FORMAT_VERSION
    return payload


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoint files, oldest first by step number (temporary files never match)."""
    if not directory.is_dir():
        return []
    steps = {p: int(match[1]) for p in directory.iterdir() if (match := _NAME.match(p.name))}
    return sorted(steps, key=steps.get)


def load_model_state(model: nn.Module, state: dict[str, torch.Tensor], source: Path) -> None:
    """Strict load with a one-line error that names the keys and shapes that do not fit."""
    check_fits(model, {key: tuple(value.shape) for key, value in state.items()}, source)
    model.load_state_dict(state)


def check_fits(model: nn.Module, shapes: dict[str, tuple[int, ...]], source: Path) -> None:
    """A CheckpointError naming what of `model`'s state_dict the saved `shapes` do not fit."""
    expected = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    missing = sorted(expected.keys() - shapes.keys())
    unexpected = sorted(shapes.keys() - expected.keys())
    reshaped = [
        f"{key} {shapes[key]} vs {shape}"
        for key, shape in expected.items()
        if key in shapes and shapes[key] != shape
    ]
    if missing or unexpected or reshaped:
        labelled = (("missing", missing), ("unexpected", unexpected), ("shape", reshaped))
        parts = [
            f"{label}: {', '.join(keys[:4])}{' ...' if len(keys) > 4 else ''}"
            for label, keys in labelled
            if keys
        ]
        raise CheckpointError(f"checkpoint '{source}' does not fit this model ({'; '.join(parts)})")


def gather_rng_states(data_generator: torch.Generator) -> list[dict]:
    """Every process's random states, in rank order (a collective where there are several):
    each process draws its own dropout and loader worker seeds."""
    return gather_object([_rng_states() | {DATA_GENERATOR: data_generator.get_state()}])


def restore_rng_states(
    states: list[dict], accelerator: Accelerator, data_generator: torch.Generator
) -> None:
    """Restore this process's entry; a process the checkpoint has none for keeps its seed."""
    if accelerator.process_index >= len(states):
        return
    own = states[accelerator.process_index]
    random.setstate(_to_tuple(own["python"]))
    np.random.set_state(("MT19937", own["numpy"][0].numpy().astype(np.uint32), *own["numpy"][1:]))
    torch.set_rng_state(own["torch"])
    if torch.cuda.is_available() and own["cuda"]:
        torch.cuda.set_rng_state_all(own["cuda"])
    data_generator.set_state(own[DATA_GENERATOR])


def save_weights(weights: dict[str, torch.Tensor], directory: Path) -> Path:
    """Weights for inference, as safetensors (no code runs when they are loaded)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "model.safetensors"
    state = {key: value.detach().cpu().contiguous() for key, value in weights.items()}
    atomic_write(path, lambda file: file.write(save(state)))
    return path


def inference_weights(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A checkpoint's weights for evaluation and export: the average where one was kept."""
    return averaged_weights(state.get(AVERAGE, {})) or state[MODEL]


def load_weights(model: nn.Module, directory: Path) -> nn.Module:
    path = directory / "model.safetensors"
    load_model_state(model, load_file(path), path)
    return model


def _rng_states() -> dict[str, Any]:
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


def _prune(directory: Path, keep: int) -> None:
    """Delete all but the newest `keep` checkpoints and the best: everything named after
    another step (a checkpoint's file, what storage.py keeps beside it, and that of a file a
    stopped run never wrote); rebuilt from the files."""
    best_marker = directory / "best"
    kept = {path.stem for path in list_checkpoints(directory)[-keep:]}
    if best_marker.is_file():
        kept.add(Path(best_marker.read_text().strip()).stem)
    for entry in directory.iterdir():
        step = _STEP_NAMED.match(entry.name)
        if step is None or step[1] in kept:
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink()
