"""Where a checkpoint keeps the model's tensors: in its one file, beside the rest of the
training state (checkpoint.py's layout). A sharded project's version of this module keeps
them in a folder of shards instead, with the same interface."""

from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from torch import nn

from .average import NoAverage, WeightAverage
from .checkpoint import (
    AVERAGE,
    MODEL,
    OPTIMIZER,
    SHARDS,
    CheckpointRefused,
    inference_weights,
    load_model_state,
)


def tensor_states(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    average: NoAverage | WeightAverage,
    accelerator: Accelerator,
) -> dict[str, Any]:
    """The checkpoint entries of the model, the weights' average and the optimizer."""
    return {
        MODEL: model.state_dict(),
        AVERAGE: average.state_dict(),  # empty without ema_decay
        OPTIMIZER: optimizer.state_dict(),
    }


def check_resumable(state: dict[str, Any], path: Path) -> None:
    """Refuse a checkpoint of sharded training, whose tensors are in a folder of shards."""
    if SHARDS in state:
        raise CheckpointRefused(
            f"checkpoint '{path}' was written by sharded training (its tensors are in "
            f"'{state[SHARDS]}'), which this project does not read: continue it with a "
            "project rendered with distributed sharded"
        )


def restore_tensor_states(
    state: dict[str, Any],
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    average: NoAverage | WeightAverage,
) -> None:
    """Load the checkpoint's model, average and optimizer state (checked by check_resumable)."""
    load_model_state(model, state[MODEL], path)
    average.load_state_dict(state.get(AVERAGE, {}))
    optimizer.load_state_dict(state[OPTIMIZER])


def load_inference_weights(model: nn.Module, state: dict[str, Any], path: Path) -> nn.Module:
    """`model` with the checkpoint's weights for evaluation and export: the average where the
    run kept one; strict: a one-line error names what does not fit."""
    check_resumable(state, path)
    load_model_state(model, inference_weights(state), path)
    return model


def checkpoint_tensors(state: dict[str, Any], path: Path) -> dict[str, Any]:
    """The checkpoint's model, average (where one was kept) and optimizer state: its own."""
    check_resumable(state, path)
    return {key: state[key] for key in (MODEL, AVERAGE, OPTIMIZER) if key in state}


def whole_weights(model: nn.Module, accelerator: Accelerator) -> dict[str, torch.Tensor]:
    """The model's weights for model/: its state_dict, whole on every process."""
    return model.state_dict()
