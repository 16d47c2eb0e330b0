"""The shared loaders: the in-memory loader copies an epoch's indices to the device once,
and `num_workers auto` takes half the CPUs, at most 4."""

import os
import random

import numpy as np
import pytest
import torch

from tabular_regression.loaders import (
    SHUFFLE_BEFORE_FORMAT_5,
    EpochBatchSampler,
    InMemoryLoader,
    TensorData,
    resolve_num_workers,
)
from tabular_regression.utils.seed import seed_worker


@pytest.fixture
def copies_to(monkeypatch):
    """The devices Tensor.to copied to, in order, while the test runs."""
    seen = []
    to = torch.Tensor.to

    def counting(tensor, *args, **kwargs):
        seen.append(args[0] if args else kwargs.get("device"))
        return to(tensor, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", counting)
    return seen


def test_an_epoch_copies_its_indices_to_the_device_once(copies_to):
    # "meta" stands in for a GPU: tensors there have shapes but no data, and any copy to it
    # would show; a step must not make one (a blocking host-to-device copy per micro-batch).
    data = TensorData(torch.zeros(10, 3), torch.arange(10))
    sampler = EpochBatchSampler(10, batch_size=3, shuffle=True, drop_last=False, seed=0)
    loader = InMemoryLoader(data, sampler, torch.device("meta"))
    copies_to.clear()  # the dataset itself goes to the device once, when the loader is made
    batches = list(loader)
    assert [len(targets) for _, targets in batches] == [3, 3, 3, 1]
    assert all(targets.device.type == "meta" for _, targets in batches)
    assert len(copies_to) == 1


def test_the_batches_are_the_samplers_from_any_batch_on():
    data = TensorData(torch.arange(20.0)[:, None], torch.arange(20))
    sampler = EpochBatchSampler(20, batch_size=4, shuffle=True, drop_last=False, seed=3)
    loader = InMemoryLoader(data, sampler, torch.device("cpu"))
    sampler.set_epoch(2)
    order = [indices.tolist() for indices in sampler]
    assert [targets.tolist() for _, targets in loader] == order
    sampler.set_epoch(2, start_batch=3)  # as a run resumed inside the epoch
    assert [targets.tolist() for _, targets in loader] == order[3:]
    sampler.set_epoch(2, start_batch=len(sampler))  # resumed at the epoch's end
    assert list(loader) == []


def test_no_seed_repeats_the_order_of_another_seed_an_epoch_later():
    """Each epoch's shuffle is seeded from the pair (seed, epoch): a sweep over seeds sees
    other orders, not the same ones shifted by an epoch, as seed + epoch gave (which
    checkpoints before format 5 keep)."""

    def order(seed: int, epoch: int, *seeding: str) -> list[int]:
        sampler = EpochBatchSampler(50, batch_size=50, shuffle=True, drop_last=True, seed=seed)
        sampler.set_epoch(epoch, 0, *seeding)
        return next(iter(sampler)).tolist()

    pairs = [(seed, epoch) for seed in range(4) for epoch in range(4)]
    assert len({tuple(order(seed, epoch)) for seed, epoch in pairs}) == len(pairs)
    assert order(2, 3) == order(2, 3)
    old = SHUFFLE_BEFORE_FORMAT_5
    assert all(order(s, e + 1, old) == order(s + 1, e, old) for s, e in pairs)


@pytest.mark.parametrize(("cpus", "workers"), [(16, 4), (6, 3), (2, 1), (1, 0)])
def test_auto_workers_take_half_the_cpus_at_most_4(monkeypatch, cpus, workers):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    assert resolve_num_workers("auto") == workers
    assert resolve_num_workers(3) == 3  # a number is taken as given


class RandomDraws(torch.utils.data.Dataset):
    """Each sample: what an augmentation in a loader worker would draw from Python's, NumPy's
    and torch's generators."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> list[float]:
        return [random.random(), float(np.random.rand()), torch.rand(()).item()]


def worker_draws(seed: int) -> list[float]:
    """An epoch of RandomDraws in 2 workers seeded as the project's loaders seed theirs: by
    seed_worker, from the run's data generator."""
    loader = torch.utils.data.DataLoader(
        RandomDraws(),
        batch_size=2,
        num_workers=2,
        worker_init_fn=seed_worker,
        generator=torch.Generator().manual_seed(seed),
    )
    return [value for batch in loader for column in batch for value in column.tolist()]


def test_loader_workers_draw_from_the_runs_seed_each_its_own_numbers():
    """Each worker draws its own numbers from Python's, NumPy's and torch's generators (not
    copies of the parent's, which would repeat augmentations), and an epoch's draws follow
    the run's seed: the same seed, the same augmentations."""
    draws = worker_draws(0)
    assert draws == worker_draws(0) and draws != worker_draws(1)
    assert len(set(draws)) == len(draws)  # no worker repeats another's numbers
