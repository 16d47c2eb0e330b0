"""Where a checkpoint keeps the model's tensors: in a folder of shards beside its file, each
process writing its own through torch.distributed.checkpoint (DCP).

checkpoints/step-000120.pt holds the rest of the training state (checkpoint.py's layout:
the progress, the config, the data's fingerprint, every process's random states) and the
name of its folder, checkpoints/step-000120.shards/: DCP's .metadata and one file per
process, with that process's shards of the model, the weights' average and the optimizer
state. The folder is written under a temporary name and renamed once every process has
written its part, before the file that names it: as in one process, a checkpoint is
complete once its file exists. The file keeps the checksum of every file in the folder,
verified before the checkpoint is used (a damaged shard: the previous checkpoint is).

DCP reshards as it loads, so a checkpoint resumes on any number of processes, one
included, and export and predict read it in one process without a process group. A
checkpoint of the whole model (one file, written without sharding) resumes too: each
process takes its shards of it.
"""

import logging
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from accelerate import Accelerator
from torch import nn
from torch.distributed.checkpoint import DefaultLoadPlanner
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
    set_state_dict,
)

from .average import NoAverage, WeightAverage
from .checkpoint import (
    AVERAGE,
    MODEL,
    OPTIMIZER,
    SHARDS,
    CheckpointError,
    check_fits,
    inference_weights,
    load_model_state,
)
from .distributed import broadcast_buffers
from .processes import on_main_process
from .utils.files import NO_SPACE, disk_full

log = logging.getLogger(__name__)
WHOLE = StateDictOptions(full_state_dict=True)  # whole tensors, on every process
SHARD_FILES = "shard_files"  # the checkpoint's entry: the CRC-32 of each file of its folder


def shards_folder(path: Path) -> Path:
    """The folder of a checkpoint's shards: step-000120.shards beside its file."""
    return path.with_suffix(".shards")


def tensor_states(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    average: NoAverage | WeightAverage,
    accelerator: Accelerator,
) -> dict[str, Any]:
    """Write every process's shards of the model, the weights' average and the optimizer
    into the shards folder of the checkpoint at `path` (a collective); its checkpoint entry
    names the folder."""
    folder = shards_folder(path)
    staged = folder.with_name(f".{folder.name}.partial")
    on_main_process(accelerator, lambda: _empty_folder(staged))
    # Buffers (BatchNorm statistics) are whole on every process, each updated from its own
    # share of the batch: DCP keeps one copy, which must be rank 0's, as DDP's checkpoint is.
    for module in {model, average.module}:
        broadcast_buffers(module, accelerator)
    try:
        dcp.save(_sharded_states(model, optimizer, average), checkpoint_id=staged)
    except CheckpointException as error:
        raise _first_cause(error, staged) from None
    checksums: dict[str, str] = {}  # the main process's, which writes the checkpoint's file

    def publish() -> None:
        checksums.update({file.name: _crc32(file) for file in sorted(staged.iterdir())})
        _replace_folder(staged, folder)

    on_main_process(accelerator, publish)
    return {SHARDS: folder.name, SHARD_FILES: checksums}


def check_resumable(state: dict[str, Any], path: Path) -> None:
    """A CheckpointError where a file of the checkpoint's shards is missing or damaged (DCP
    writes them without a checksum of their own). Nothing is refused: a sharded checkpoint
    reshards, and one of the whole model (written without sharding) is cut into shards as
    it loads (restore_tensor_states)."""
    if SHARDS not in state:
        return
    damage = _damage(path.with_name(state[SHARDS]), state.get(SHARD_FILES, {}))
    if damage:
        raise CheckpointError(f"checkpoint '{path}' has damaged shards ({damage})")


def restore_tensor_states(
    state: dict[str, Any],
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    average: NoAverage | WeightAverage,
) -> None:
    """Load this process's shards of the model, the average and the optimizer state:
    resharded if another number of processes wrote them, cut from the whole tensors of a
    checkpoint written without sharding."""
    if SHARDS not in state:
        log.info(
            "checkpoint '%s' holds the whole model, written without sharding: each process "
            "takes its shards of it",
            path,
        )
        _shard_whole(state, path, model, optimizer, average)
        return
    folder = path.with_name(state[SHARDS])
    saved = dcp.FileSystemReader(folder).read_metadata().state_dict_metadata
    prefix = f"{MODEL}."
    shapes = {
        key.removeprefix(prefix): tuple(meta.size)
        for key, meta in saved.items()
        if key.startswith(prefix)
    }
    check_fits(model, shapes, path)  # a one-line error, before DCP's own
    states = _sharded_states(model, optimizer, average)
    # The states to load into hold AdamW's state for every parameter, the checkpoint none
    # for a parameter no step has updated yet (a backbone thawed at its step): that one is
    # left out of the load, then dropped, for its first step to start it as it would have.
    unstepped = {
        name for name in states[OPTIMIZER]["state"] if f"{OPTIMIZER}.state.{name}.step" not in saved
    }
    partial = DefaultLoadPlanner(allow_partial_load=True)
    try:
        dcp.load(states, checkpoint_id=folder, planner=partial)
    except CheckpointException as error:
        raise CheckpointError(f"checkpoint '{path}' has unreadable shards ({error})") from None
    set_state_dict(
        model, optimizer, model_state_dict=states[MODEL], optim_state_dict=states[OPTIMIZER]
    )
    for name, parameter in model.named_parameters():
        if name in unstepped:
            optimizer.state.pop(parameter, None)
    average.load_state_dict(states.get(AVERAGE, {}))


def load_inference_weights(model: nn.Module, state: dict[str, Any], path: Path) -> nn.Module:
    """`model` (whole, in this process) with the checkpoint's weights for evaluation and
    export: the average where the run kept one; strict: a one-line error names misfits."""
    load_model_state(model, inference_weights(checkpoint_tensors(state, path)), path)
    return model


def checkpoint_tensors(state: dict[str, Any], path: Path) -> dict[str, Any]:
    """The checkpoint's model, average (empty where none was kept) and optimizer state,
    whole, in this process: a sharded one's read from its shards without a process group,
    its optimizer state keyed by parameter name, as DCP keeps it."""
    check_resumable(state, path)
    if SHARDS not in state:
        return {key: state[key] for key in (MODEL, AVERAGE, OPTIMIZER) if key in state}
    with tempfile.TemporaryDirectory(prefix="whole-checkpoint-") as scratch:
        whole = Path(scratch) / "checkpoint.pt"
        try:
            dcp_to_torch_save(path.with_name(state[SHARDS]), whole)
        except Exception as error:  # a missing or damaged shard raises many different errors
            reason = " ".join(str(error).split())[:160]
            raise CheckpointError(f"checkpoint '{path}' has unreadable shards ({reason})") from None
        return {AVERAGE: {}} | torch.load(whole, map_location="cpu", weights_only=True)


def whole_weights(model: nn.Module, accelerator: Accelerator) -> dict[str, torch.Tensor]:
    """The model's weights for model/, gathered whole on the main process, on the CPU (a
    collective; the other processes get none)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=options)


def _sharded_states(
    model: nn.Module, optimizer: torch.optim.Optimizer, average: NoAverage | WeightAverage
) -> dict[str, Any]:
    model_state, optimizer_state = get_state_dict(model, optimizer)
    states = {MODEL: model_state, OPTIMIZER: optimizer_state}
    average_state = average.state_dict()  # empty without ema_decay
    return states | ({AVERAGE: average_state} if average_state else {})


def _shard_whole(
    state: dict[str, Any],
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    average: NoAverage | WeightAverage,
) -> None:
    """Each process's shards of a whole checkpoint's tensors. Its optimizer state is keyed
    by each parameter's position in the optimizer's groups, which follow the model's order
    here as there: each position is given its parameter's name."""
    check_fits(model, {key: tuple(value.shape) for key, value in state[MODEL].items()}, path)
    set_model_state_dict(model, state[MODEL], options=WHOLE)
    named = get_optimizer_state_dict(model, optimizer)
    whole = state[OPTIMIZER]
    names = {
        position: name
        for saved, group in zip(whole["param_groups"], named["param_groups"], strict=True)
        for position, name in zip(saved["params"], group["params"], strict=True)
    }
    optimizer_state = {
        "state": {names.get(key, key): value for key, value in whole["state"].items()},
        "param_groups": [
            saved | {"params": group["params"]}
            for saved, group in zip(whole["param_groups"], named["param_groups"], strict=True)
        ],
    }
    set_optimizer_state_dict(model, optimizer, optimizer_state, options=WHOLE)
    for group, saved in zip(optimizer.param_groups, whole["param_groups"], strict=True):
        # as saved: the loader above turns tuples (AdamW's betas) into lists
        group.update({key: value for key, value in saved.items() if key != "params"})
    if state.get(AVERAGE) and isinstance(average, WeightAverage):
        set_model_state_dict(average.averaged, state[AVERAGE], options=WHOLE)


def _first_cause(error: CheckpointException, folder: Path) -> BaseException:
    """What stopped DCP's save, as this project says it: Ctrl-C as itself, a full disk in
    one line (DiskFull); DCP's own error otherwise."""
    causes = [cause for cause, _ in error.failures.values()]
    for cause in causes:
        if isinstance(cause, KeyboardInterrupt):
            return cause
    for cause in causes:
        if isinstance(cause, OSError) and cause.errno in NO_SPACE:
            return disk_full(folder, cause)
    return error


def _empty_folder(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)  # left by a run stopped while it wrote
    folder.mkdir(parents=True)


def _replace_folder(staged: Path, folder: Path) -> None:
    """`staged` renamed to `folder`; a folder of the same step (one the run wrote before it
    was stopped and resumed) is replaced."""
    if folder.exists():
        shutil.rmtree(folder)
    staged.rename(folder)


def _damage(folder: Path, checksums: dict[str, str]) -> str | None:
    """What differs in `folder` from the files `checksums` lists, or None."""
    if not checksums:
        return "no checksums of its files"
    for name, checksum in checksums.items():
        if not (folder / name).is_file():
            return f"{folder.name}/{name} is missing"
        if _crc32(folder / name) != checksum:
            return f"checksum of {folder.name}/{name} does not match"
    return None


def _crc32(path: Path) -> str:
    crc = 0
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return f"{crc:08x}"
