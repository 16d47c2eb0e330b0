"""The shared loaders: the in-memory loader copies an epoch's indices to the device once,
and `num_workers auto` takes half the CPUs, at most 4."""

import os

import pytest
import torch

from semantic_segmentation.loaders import (
    EpochBatchSampler,
    InMemoryLoader,
    TensorData,
    resolve_num_workers,
)


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


@pytest.mark.parametrize(("cpus", "workers"), [(16, 4), (6, 3), (2, 1), (1, 0)])
def test_auto_workers_take_half_the_cpus_at_most_4(monkeypatch, cpus, workers):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    assert resolve_num_workers("auto") == workers
    assert resolve_num_workers(3) == 3  # a number is taken as given
