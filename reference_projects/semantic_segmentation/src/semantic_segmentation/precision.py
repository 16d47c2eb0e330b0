"""Mixed precision: none. The model trains in fp32: no autocast, no gradient scaler, and a
step is clipped and taken as it is.

Each mixed_precision answer renders its own version of this module, with this interface,
so the training loop reads the same with any.
"""

import torch
from accelerate import Accelerator
from torch import nn

from .config import TrainConfig
from .processes import prepare_model


def build_adamw(groups: list[dict], cfg: TrainConfig) -> torch.optim.Optimizer:
    # fused: one kernel per parameter group instead of several per tensor, which makes a
    # step about 20% faster for small models on the CPU and more so on GPUs.
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, cfg.beta2), fused=True)


def prepare(
    accelerator: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The model as the processes run it (processes.prepare_model); the optimizer stays
    plain: its step has no overhead."""
    return prepare_model(accelerator, model), optimizer


class StepPrecision:
    """What the precision decides in a step: clipping, and the steps skipped (never here)."""

    def __init__(self, accelerator: Accelerator):
        pass

    def clip(self, model: nn.Module, max_norm: float) -> torch.Tensor:
        """Clip the gradients to `max_norm`; their norm before clipping."""
        return nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    def count_skipped(self, optimizer: torch.optim.Optimizer) -> None:
        pass  # every step is taken

    def log_fields(self) -> dict[str, int]:
        return {}  # nothing to add to the step records and the summary

    def state_dict(self) -> dict:
        return {}  # nothing to add to a checkpoint

    def load_state_dict(self, state: dict) -> None:
        pass
