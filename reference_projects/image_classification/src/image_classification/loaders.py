"""What every task's data shares: the datasets record, batch order, and the loaders.

A task's data.py builds `Datasets` (its train and validation splits, the preprocessing saved
with the model, and the targets its baseline needs); `build_loaders` turns them into batches
the same way for every task, so the training loop never depends on the task.
"""

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from .config import ConfigError, TrainConfig
from .utils.errors import UserError
from .utils.seed import seed_worker

# The validation split is part of the dataset's definition: it does not move with --seed,
# so metrics of runs with different seeds are measured on the same samples.
SPLIT_SEED = 0


class DataError(UserError, ValueError):
    """A data file that cannot be used: the message names it and says what to do.

    Raised in a loader worker, it reaches the training process re-created from the worker's
    traceback (torch.utils.data re-raises it so); only its own message is kept, one line.
    """

    def __init__(self, message: str):
        super().__init__(message.rstrip().rpartition("DataError: ")[2])


@dataclass
class TensorData:
    """A dataset that fits in memory as two tensors (inputs, targets)."""

    inputs: torch.Tensor
    targets: torch.Tensor

    def __len__(self) -> int:
        return len(self.targets)

    def first(self, size: int) -> "TensorData":
        return TensorData(self.inputs[:size], self.targets[:size])


@dataclass
class Datasets:
    train: Dataset | TensorData
    val: Dataset | TensorData
    preprocess: Any  # the task's Preprocess: saved to model/preprocess.json, shapes the model
    train_targets: torch.Tensor  # targets of each split, for the trivial baseline
    val_targets: torch.Tensor
    fingerprint: str  # identifies the exact data and split, recorded in run.json
    collate_fn: Callable | None = None  # joins samples of a Dataset into a batch (None: stack)


def first_batches_only(datasets: Datasets, size: int) -> Datasets:
    """--overfit_batches: train and evaluate on the same first `size` training samples, which
    a model without a bug fits (each kind of training split has `first(size)`)."""
    subset, targets = datasets.train.first(size), datasets.train_targets[:size]
    return replace(datasets, train=subset, val=subset, train_targets=targets, val_targets=targets)


def first_validation_batches(datasets: Datasets, batches: int, batch_size: int) -> Datasets:
    """--fast_dev_run: evaluate the first `batches` validation batches only (as Lightning's
    fast dev run does), so that it takes seconds whatever the data's size; the baseline is
    measured on the same samples (each of which may hold several targets: a text's bytes)."""
    size = batches * batch_size
    if len(datasets.val) <= size:
        return datasets
    targets_per_sample = len(datasets.val_targets) // len(datasets.val)
    targets = datasets.val_targets[: size * targets_per_sample]
    return replace(datasets, val=datasets.val.first(size), val_targets=targets)


def class_table(
    names: tuple[str, ...], train: torch.Tensor, val: torch.Tensor, unit: str
) -> list[str]:
    """The data command's lines on class balance: each class's count of `unit` (samples,
    pixels) in each split, and its share of the training split."""
    train_counts = torch.bincount(train.flatten(), minlength=len(names)).tolist()
    val_counts = torch.bincount(val.flatten(), minlength=len(names)).tolist()
    total, width = sum(train_counts), max(len(name) for name in names)
    lines = [f"{unit} per class (train / validation, share of train):"]
    for name, in_train, in_val in zip(names, train_counts, val_counts, strict=True):
        lines.append(f"  {name:<{width}}  {in_train:>9} / {in_val:<9} {in_train / total:6.1%}")
    return lines


def fingerprint(content: bytes, train_idx: np.ndarray, val_idx: np.ndarray) -> str:
    """A short hash of the data and of which samples went to which split."""
    digest = hashlib.sha256(content)
    digest.update(train_idx.tobytes())
    digest.update(val_idx.tobytes())
    return digest.hexdigest()[:16]


# How each epoch's permutation is seeded; a checkpoint records it, and its run keeps it.
# From the pair, no two (seed, epoch) share an order: with the seed + epoch of checkpoints
# before format 5, seed s at epoch e + 1 repeated the order of seed s + 1 at epoch e.
SHUFFLE = "SeedSequence([seed, epoch])"
SHUFFLE_BEFORE_FORMAT_5 = "seed + epoch"


def shuffle_seed(seed: int, epoch: int, seeding: str = SHUFFLE) -> int:
    """The seed of epoch `epoch`'s permutation in a run seeded with `seed`, seeded the
    `seeding` way (SHUFFLE or SHUFFLE_BEFORE_FORMAT_5)."""
    if seeding == SHUFFLE_BEFORE_FORMAT_5:
        return seed + epoch
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1, np.uint64)[0])


class EpochBatchSampler:
    """Batches of indices in an order fixed by (seed, epoch), resumable at any batch.

    Each epoch draws its own permutation from the pair (seed, epoch) (`shuffle_seed`), so
    epoch e has the same order in every run with this seed, and a run resumed at (epoch,
    batch) sees exactly the batches the uninterrupted run would have seen next.
    """

    def __init__(self, size: int, batch_size: int, shuffle: bool, drop_last: bool, seed: int):
        self.size, self.batch_size = size, batch_size
        self.shuffle, self.drop_last, self.seed = shuffle, drop_last, seed
        self.epoch, self.start_batch, self.seeding = 0, 0, SHUFFLE

    def set_epoch(self, epoch: int, start_batch: int = 0, seeding: str = SHUFFLE) -> None:
        """The next iteration: epoch `epoch` from batch `start_batch`, its order seeded the
        `seeding` way (a resumed run keeps its checkpoint's: Progress.shuffle)."""
        self.epoch, self.start_batch, self.seeding = epoch, start_batch, seeding

    def __len__(self) -> int:
        full, rest = divmod(self.size, self.batch_size)
        return full if self.drop_last or rest == 0 else full + 1

    def __iter__(self) -> Iterator[torch.Tensor]:
        if self.shuffle:
            seed = shuffle_seed(self.seed, self.epoch, self.seeding)
            generator = torch.Generator().manual_seed(seed)
            order = torch.randperm(self.size, generator=generator)
        else:
            order = torch.arange(self.size)
        for batch in range(self.start_batch, len(self)):
            yield order[batch * self.batch_size : (batch + 1) * self.batch_size]


class InMemoryLoader:
    """Indexes whole batches out of device-resident tensors: no per-sample work, no collate.

    The embedded dataset is a few hundred KB, so it lives on the training device and a step
    copies nothing from the host.
    """

    def __init__(self, data: TensorData, batch_sampler: EpochBatchSampler, device: torch.device):
        self.inputs = data.inputs.to(device)
        self.targets = data.targets.to(device)
        self.batch_sampler = batch_sampler

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        batches = list(self.batch_sampler)  # the rest of the epoch, as index tensors
        if not batches:
            return
        # The epoch's indices go to the device in one copy: a copy each step would block the
        # host until the device caught up, and it could not queue the next step ahead.
        indices = torch.cat(batches).to(self.inputs.device, non_blocking=True)
        for batch in indices.split([len(batch) for batch in batches]):
            yield self.inputs[batch], self.targets[batch]


# What the loop iterates: whole batches of device tensors, or a DataLoader's workers.
Loader = InMemoryLoader | DataLoader


def resolve_num_workers(num_workers: int | str) -> int:
    """`auto`: half the CPUs this process may use, at most 4; past that workers only contend."""
    if num_workers != "auto":
        return int(num_workers)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return min(4, (cpus or 1) // 2)


def build_loaders(
    cfg: TrainConfig, datasets: Datasets, device: torch.device, generator: torch.Generator
) -> tuple[Loader, Loader]:
    """Training batches reshuffle every epoch and drop the ragged last batch (fixed shapes for
    compile and BatchNorm); evaluation batches keep order and every sample, counted once."""
    train_sampler = EpochBatchSampler(
        len(datasets.train), cfg.batch_size, shuffle=True, drop_last=True, seed=cfg.seed
    )
    if len(train_sampler) == 0:
        raise ConfigError(
            f"--batch_size: got {cfg.batch_size}, but the training split has only "
            f"{len(datasets.train)} samples; use a smaller batch"
        )
    val_sampler = EpochBatchSampler(
        len(datasets.val), cfg.batch_size, shuffle=False, drop_last=False, seed=cfg.seed
    )
    if isinstance(datasets.train, TensorData):
        return (
            InMemoryLoader(datasets.train, train_sampler, device),
            InMemoryLoader(datasets.val, val_sampler, device),
        )
    workers = resolve_num_workers(cfg.num_workers)
    options = {
        "num_workers": workers,
        "pin_memory": device.type == "cuda",  # page-locked memory only helps host-to-GPU copies
        "worker_init_fn": seed_worker,
        "generator": generator,
        "collate_fn": datasets.collate_fn,
    }
    if workers > 0:  # both are errors without worker processes
        options |= {"persistent_workers": True, "prefetch_factor": 4}
    return (
        DataLoader(datasets.train, batch_sampler=train_sampler, **options),
        DataLoader(datasets.val, batch_sampler=val_sampler, **options),
    )
