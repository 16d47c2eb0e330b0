"""The training state: what the loop saves in a checkpoint (checkpoint.py's layout; the
model's tensors where storage.py keeps them) and what a resumed run restores from one."""

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from torch import nn

from .checkpoint import (
    CONFIG,
    DATA,
    RNG,
    Progress,
    checkpoint_path,
    gather_rng_states,
    restore_rng_states,
    save_checkpoint,
)
from .config import TrainConfig
from .optim import TrainStep
from .processes import on_main_process
from .storage import restore_tensor_states, tensor_states
from .utils.monitor import LogWindow


@dataclass
class TrainingState:
    """Everything a step changes besides the progress: weights and their average, optimizer
    state, random streams, and what the mixed precision keeps (a gradient scaler's state)."""

    cfg: TrainConfig
    accelerator: Accelerator
    model: nn.Module  # uncompiled and unwrapped: its state_dict loads without either
    data_generator: torch.Generator
    train_step: TrainStep  # the optimizer, the weights' average and the step's precision

    def save(
        self, progress: Progress, window: LogWindow, data_fingerprint: str, is_best: bool
    ) -> None:
        """A checkpoint of this step, with the losses the log window has not logged yet."""
        progress.window_losses = window.pending_losses()  # raises if the loss diverged
        directory, keep = Path(self.cfg.output_dir) / "checkpoints", self.cfg.keep_checkpoints
        step = self.train_step
        path = checkpoint_path(directory, progress.step)
        states = {
            **tensor_states(path, self.model, step.optimizer, step.average, self.accelerator),
            **step.precision.state_dict(),  # what the precision keeps, if anything
            CONFIG: asdict(self.cfg),
            DATA: data_fingerprint,
            RNG: gather_rng_states(self.data_generator),  # one per process
        }
        on_main_process(
            self.accelerator, lambda: save_checkpoint(directory, progress, states, keep, is_best)
        )

    def restore(self, state: dict[str, Any] | None, path: Path | None) -> None:
        """Continue where the checkpoint at `path`, loaded as `state`, stopped (None: a new
        run). `state` is emptied: the checkpoint's copy of every tensor is freed."""
        if state is None or path is None:
            return
        step = self.train_step
        restore_tensor_states(state, path, self.model, step.optimizer, step.average)
        self.train_step.precision.load_state_dict(state)
        restore_rng_states(state[RNG], self.accelerator, self.data_generator)
        state.clear()
