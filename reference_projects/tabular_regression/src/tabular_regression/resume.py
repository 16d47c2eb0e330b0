"""Whether a run may continue a checkpoint, and where in its data it continues.

A checkpoint records the config and the data fingerprint of the run that wrote it. A resume
whose steps would compute something else is refused before the run writes anything, unless
`--resume_changed true` accepts it; config.RESUME_FREE_FIELDS lists what may change freely.
"""

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .checkpoint import (
    CONFIG,
    DATA,
    PROGRESS,
    RNG,
    CheckpointError,
    CheckpointRefused,
    Progress,
    list_checkpoints,
    load_checkpoint,
)
from .config import RESUME_FREE_FIELDS, TrainConfig
from .run_folder.records import METRICS_FILE
from .storage import check_resumable

log = logging.getLogger(__name__)


def resume_point(
    cfg: TrainConfig,
    data_fingerprint: str,
    num_processes: int,
    batches_per_epoch: int,
    total_steps: int,
) -> tuple[Progress, Path | None, dict[str, Any] | None]:
    """Where this run starts: the progress, and the checkpoint it continues (path and state;
    None for a new run). A checkpoint of another run is refused here, before anything is
    written; a run given another length stretches its learning-rate decay to the new end."""
    output_dir = Path(cfg.output_dir)
    resume_from = checkpoint_to_resume(cfg.resume, output_dir / "checkpoints")
    if resume_from is None:
        if cfg.resume == "auto":
            check_nothing_to_lose(output_dir)
        return Progress(total_steps=total_steps), None, None
    path, state = resume_from
    for note in check_resume(path, state, cfg, data_fingerprint, num_processes):
        log.warning("%s", note)
    progress = resumed_progress(state, cfg, data_fingerprint, num_processes, batches_per_epoch)
    log.info("resuming from %s at step %d", path, progress.step)
    if progress.step >= total_steps:
        log.info(
            "the checkpoint is at or past this run's end (step %d): nothing is left to "
            "train; its weights are evaluated and saved",
            total_steps,
        )
    elif progress.total_steps not in (0, total_steps):
        log.info(
            "the run now ends at step %d instead of %d: the learning-rate decay is "
            "stretched to the new end from here on",
            total_steps,
            progress.total_steps,
        )
    progress.total_steps = total_steps
    return progress, path, state


def checkpoint_to_resume(resume: str, directory: Path) -> tuple[Path, dict[str, Any]] | None:
    """What `--resume` asks for: none, the newest usable one in `directory` (auto), or a file."""
    if resume == "none":
        return None
    if resume == "auto":
        return find_resume_checkpoint(directory)
    return Path(resume), _usable_checkpoint(Path(resume))


def find_resume_checkpoint(directory: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest usable checkpoint in `directory`; a broken newer one is reported, skipped.

    One this project refuses (another format, tensors it cannot read) stops the run instead:
    it would otherwise continue from an older one, and its pruning delete the newer.
    """
    for path in reversed(list_checkpoints(directory)):
        try:
            return path, _usable_checkpoint(path)
        except CheckpointRefused:
            raise
        except CheckpointError as error:
            log.warning("%s; trying the previous one", error)
    return None


def _usable_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint at `path`, loaded, with its tensors where storage.py reads them."""
    state = load_checkpoint(path)
    check_resumable(state, path)
    return state


MODEL_FILE = "model/model.safetensors"


def check_nothing_to_lose(output_dir: Path) -> None:
    """A new run in a folder whose earlier run left records (metrics, a model) but no
    checkpoint to continue them would replace them: refused, unless `--resume none` asks
    for it. A run stopped before its first checkpoint left a checkpoints/ folder that never
    held one: starting over loses nothing of it."""
    checkpoints, metrics = output_dir / "checkpoints", output_dir / METRICS_FILE
    records = [
        path.relative_to(output_dir).as_posix()
        for path in (metrics, output_dir / "summary.json", output_dir / MODEL_FILE)
        if path.is_file() and (path != metrics or path.stat().st_size > 0)
    ]
    written = list_checkpoints(checkpoints) or (checkpoints / "latest").exists()
    unfinished = checkpoints.is_dir() and not written
    if records and not unfinished:
        raise CheckpointRefused(
            f"--output_dir '{output_dir}' holds an earlier run ({', '.join(records)}) but no "
            "checkpoint to continue it from: give this run another --output_dir, or start "
            "over in this one with --resume none (its records are replaced)"
        )


def check_resume(
    path: Path,
    state: dict[str, Any],
    cfg: TrainConfig,
    data_fingerprint: str,
    num_processes: int,
) -> list[str]:
    """Refuse to continue a checkpoint whose run computed something else; say what is not exact.

    A changed field outside config.RESUME_FREE_FIELDS, other data, or another global batch
    (batch_size x processes) raises CheckpointRefused naming each change, before the run
    writes anything, unless `cfg.resume_changed` accepts them. Returns the lines to log:
    the changes accepted, and what another number of processes makes inexact.
    """
    saved = state[CONFIG]
    written_by = len(state[RNG])
    changes = [
        f"{name} {saved[name]!r} -> {value!r}"
        for name, value in asdict(cfg).items()
        if name in saved and name not in RESUME_FREE_FIELDS | {"batch_size"}
        if saved[name] != value
    ]
    if saved["batch_size"] * written_by != cfg.batch_size * num_processes:
        changes.append(
            f"batch_size x processes {saved['batch_size']} x {written_by} -> "
            f"{cfg.batch_size} x {num_processes}"
        )
    if state.get(DATA, data_fingerprint) != data_fingerprint:  # version 1 did not record it
        changes.append(f"data (fingerprint {state[DATA]} -> {data_fingerprint})")
    notes = []
    if changes and not cfg.resume_changed:
        raise CheckpointRefused(
            f"--resume: '{path}' was trained with other settings: {', '.join(changes)}. "
            "Start a new run with another --output_dir (or --resume none), or continue its "
            "weights and optimizer state anyway with --resume_changed true (no longer exact)"
        )
    if changes:
        notes.append(
            f"resuming '{path}' with changed settings ({', '.join(changes)}): the weights and "
            "optimizer state continue, the run is no longer exact"
        )
    if written_by != num_processes:
        notes.append(
            f"'{path}' was written at world size {written_by}, this run's is {num_processes}: "
            "the weights and data order continue; not exact: each process's share of a "
            "batch, the order gradients are summed in, and the random streams (dropout, "
            "augmentation) of processes the checkpoint has none for"
        )
    return notes


def resumed_progress(
    state: dict[str, Any],
    cfg: TrainConfig,
    data_fingerprint: str,
    num_processes: int,
    batches_per_epoch: int,
) -> Progress:
    """Where the checkpoint stands, in this run's batches. Unchanged, exactly where it stopped;
    where --resume_changed accepted another global batch, at the same number of samples into
    the epoch; in other data, at the start of the epoch."""
    progress = Progress(**state[PROGRESS])
    saved_batch = state[CONFIG]["batch_size"] * len(state[RNG])
    progress.batch = progress.batch * saved_batch // (cfg.batch_size * num_processes)
    if state.get(DATA, data_fingerprint) != data_fingerprint or progress.batch >= batches_per_epoch:
        progress.batch = 0
    return progress
