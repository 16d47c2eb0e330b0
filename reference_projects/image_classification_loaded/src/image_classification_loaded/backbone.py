"""A pretrained backbone's share of the optimizer: frozen for the first
freeze_backbone_steps, while the new head learns from the backbone as it came, then trained
at backbone_lr_scale times the head's learning rate.

optim.py builds its groups and thaws the backbone with these; train.py freezes it. Every run
imports this module, so it holds no Transformers code (pretrained.py does).
"""

from torch import nn
from torch.optim import Optimizer

from .config import TrainConfig


def optimizer_groups(
    model: nn.Module, trainable: list[nn.Parameter], cfg: TrainConfig
) -> list[dict]:
    """AdamW's groups of `trainable`: the new head's at the scheduled rate, a pretrained
    backbone's (while not frozen) at backbone_lr_scale times it."""
    backbone = model.backbone_parameters() if cfg.pretrained is not None else set()
    groups = parameter_groups([p for p in trainable if p not in backbone], cfg, 1.0)
    unfrozen = [p for p in trainable if p in backbone]
    return groups + (parameter_groups(unfrozen, cfg, cfg.backbone_lr_scale) if unfrozen else [])


def parameter_groups(params: list[nn.Parameter], cfg: TrainConfig, lr_scale: float) -> list[dict]:
    """Two AdamW groups of `params`: weights decay, biases and norm weights (1-D) do not.
    Each group's lr_scale multiplies the scheduled learning rate (optim.TrainStep)."""
    decay, no_decay = [p for p in params if p.ndim >= 2], [p for p in params if p.ndim < 2]
    return [
        {"params": decay, "weight_decay": cfg.weight_decay, "lr_scale": lr_scale},
        {"params": no_decay, "weight_decay": 0.0, "lr_scale": lr_scale},
    ]


def backbone_frozen(cfg: TrainConfig, step: int) -> bool:
    """Whether a pretrained backbone is frozen when `step` steps are done: the first
    freeze_backbone_steps."""
    return cfg.pretrained is not None and step < cfg.freeze_backbone_steps


def thaw_when_due(
    model: nn.Module, optimizer: Optimizer, cfg: TrainConfig, steps_done: int
) -> nn.Module:
    """The model to train after `steps_done` steps: at the end of freeze_backbone_steps, the
    backbone that train.py froze thawed (thaw_backbone); at any other step, `model` as it is.
    A run resumed at or after that step was never frozen (backbone_frozen)."""
    if cfg.pretrained is None or steps_done != cfg.freeze_backbone_steps:
        return model
    return thaw_backbone(model, optimizer, cfg)


def thaw_backbone(model: nn.Module, optimizer: Optimizer, cfg: TrainConfig) -> nn.Module:
    """The end of freeze_backbone_steps: the backbone requires gradients again and joins the
    optimizer, in the groups optimizer_groups gives it when it is not frozen. Returns the
    model to train from now on."""
    frozen = [p for p in model.parameters() if not p.requires_grad]
    for parameter in frozen:
        parameter.requires_grad_(True)
    for param_group in parameter_groups(frozen, cfg, cfg.backbone_lr_scale):
        optimizer.add_param_group(param_group)
    return model
