"""FSDP2: each process holds a shard of every parameter, of its gradient and of its optimizer
state, so a model too large for one device trains on several.

fully_shard wraps each repeated block of the model (transformer blocks, CNN stages), then
the model itself: a block's parameters are gathered just before its forward and backward
and freed after, so a process holds whole only the block it computes. Gradients are
reduce-scattered, and each process steps the optimizer on its own shard.

Every forward is a collective (the gather), so every process runs as many as the others,
in evaluation too. A run started alone is not sharded: it trains the whole model, and its
checkpoints (storage.py) load into any number of processes.
"""

import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import torch
from accelerate import Accelerator
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.utils.checkpoint import checkpoint

from . import task
from .config import TrainConfig

log = logging.getLogger(__name__)


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks, outermost first: the children of each nn.ModuleList or
    nn.Sequential made of two or more modules of one class (GPT blocks, encoder layers, CNN
    stages). A block is not searched for blocks of its own."""
    children = list(model.children())
    repeated = len(children) >= 2 and len({type(child) for child in children}) == 1
    if repeated and isinstance(model, (nn.ModuleList, nn.Sequential)):
        return children
    return [block for child in children for block in repeated_blocks(child)]


def shard_model(model: nn.Module, cfg: TrainConfig, accelerator: Accelerator) -> nn.Module:
    """`model` sharded in place over the processes, block by block, then what no block holds;
    with its blocks' activations recomputed in backward if cfg.activation_checkpointing.
    Every process starts from rank 0's weights, as DDP's do."""
    blocks = repeated_blocks(model)
    for block in blocks:
        if cfg.activation_checkpointing:
            block.forward = _recomputed(block.forward, block)
        # Block by block, before sharding: a compiled root would break its graph at every
        # gather, and compile nothing.
        if cfg.compile:
            block.compile(dynamic=task.DYNAMIC_SHAPES)
    if accelerator.num_processes == 1:  # started alone: the whole model, nothing to shard
        return model
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            torch.distributed.broadcast(tensor, src=0)
    if not blocks:
        log.warning(
            "the model has no repeated blocks (an nn.ModuleList or nn.Sequential of one block "
            "class): it is sharded as one unit, and gathered whole for every forward"
        )
    for block in blocks:
        fully_shard(block)
    fully_shard(model)
    return model


def _recomputed(forward, block: nn.Module):
    """`block`'s `forward`, keeping no activations for backward, which runs it again: with
    the same random state (dropout draws the same masks), and without updating BatchNorm's
    running statistics a second time."""

    def contexts():  # the forward's, then the recomputation's
        return nullcontext(), _statistics_kept(block)

    def run(*args, **kwargs):
        return checkpoint(forward, *args, use_reentrant=False, context_fn=contexts, **kwargs)

    return run


@contextmanager
def _statistics_kept(block: nn.Module) -> Iterator[None]:
    """While backward recomputes `block`'s forward: BatchNorm normalises with the batch's
    statistics as it did, but keeps its running statistics (momentum 0) and its count."""
    norms = [
        m
        for m in block.modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
    ]
    saved = [(norm.momentum, norm.num_batches_tracked.clone()) for norm in norms]
    for norm in norms:
        norm.momentum = 0.0
    try:
        yield
    finally:
        for norm, (momentum, count) in zip(norms, saved, strict=True):
            norm.momentum = momentum
            norm.num_batches_tracked.copy_(count)
