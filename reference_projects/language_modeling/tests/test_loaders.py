"""The shared loaders: the in-memory loader copies an epoch's indices to the device once,
and `num_workers auto` takes half the CPUs, at most 4; then what every task's data shares:
the debugging subsets, the class table, the data errors."""

import os
import random

import numpy as np
import pytest
import torch

from language_modeling.config import ConfigError, TrainConfig
from language_modeling.loaders import (
    SHUFFLE_BEFORE_FORMAT_5,
    DataError,
    Datasets,
    EpochBatchSampler,
    InMemoryLoader,
    TensorData,
    build_loaders,
    class_table,
    fingerprint,
    first_batches_only,
    first_validation_batches,
    resolve_num_workers,
    shuffle_seed,
)
from language_modeling.utils.seed import seed_worker


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
    assert all(x.device.type == "meta" for batch in batches for x in batch)
    assert copies_to == [torch.device("meta")]


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


@pytest.mark.parametrize(
    ("size", "drop_last", "sizes"),
    [(12, False, [4, 4, 4]), (12, True, [4, 4, 4]), (10, False, [4, 4, 2]), (10, True, [4, 4])],
)
def test_an_epoch_has_a_batch_per_full_batch_and_one_for_a_kept_ragged_end(size, drop_last, sizes):
    sampler = EpochBatchSampler(size, batch_size=4, shuffle=True, drop_last=drop_last, seed=0)
    assert len(sampler) == len(sizes)
    assert [len(indices) for indices in sampler] == sizes  # never an empty last batch


def test_a_new_sampler_starts_at_the_first_batch_of_epoch_0():
    sampler = EpochBatchSampler(20, batch_size=4, shuffle=True, drop_last=True, seed=5)
    first = [indices.tolist() for indices in sampler]
    sampler.set_epoch(0)
    assert [indices.tolist() for indices in sampler] == first


def test_each_epochs_shuffle_seed_is_pinned():
    """A checkpoint names the way its run seeded each epoch's order, and a resumed run must
    draw the same orders from it: the seeds each way gives never change. SeedSequence's
    64-bit words (not 32) keep (seed, epoch) pairs from sharing a permutation by chance."""
    assert shuffle_seed(0, 0) == 15793235383387715774
    assert shuffle_seed(1, 2) == 15529898885419721899
    assert shuffle_seed(1, 2, SHUFFLE_BEFORE_FORMAT_5) == 3


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


def in_memory(size: int) -> TensorData:
    """`size` samples whose inputs and targets are their own index."""
    return TensorData(torch.arange(float(size))[:, None], torch.arange(size))


def datasets_of(train, val, **fields) -> Datasets:
    return Datasets(
        train=train,
        val=val,
        preprocess=None,
        train_targets=torch.arange(len(train)),
        val_targets=torch.arange(len(val)),
        fingerprint="",
        **fields,
    )


def test_training_drops_the_ragged_batch_and_evaluation_keeps_every_sample_in_order():
    cfg = TrainConfig(batch_size=4)
    datasets = datasets_of(in_memory(10), in_memory(7))
    train_loader, val_loader = build_loaders(cfg, datasets, torch.device("cpu"), torch.Generator())
    train_batches = [targets.tolist() for _, targets in train_loader]
    assert [len(batch) for batch in train_batches] == [4, 4]
    assert len({i for batch in train_batches for i in batch}) == 8  # each sample once at most
    assert [targets.tolist() for _, targets in val_loader] == [[0, 1, 2, 3], [4, 5, 6]]


def test_in_memory_splits_are_loaded_onto_the_training_device():
    datasets = datasets_of(in_memory(8), in_memory(4))
    cfg = TrainConfig(batch_size=4)
    loaders = build_loaders(cfg, datasets, torch.device("meta"), torch.Generator())
    for loader in loaders:
        assert all(x.device.type == "meta" for batch in loader for x in batch)


def test_a_batch_larger_than_the_training_split_is_refused_naming_both():
    datasets = datasets_of(in_memory(5), in_memory(5))
    with pytest.raises(ConfigError, match=r"--batch_size: got 8.* only 5 samples"):
        build_loaders(TrainConfig(batch_size=8), datasets, torch.device("cpu"), torch.Generator())


class Indices(torch.utils.data.Dataset):
    """A dataset not held in memory: its sample `i` is `i`."""

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        return index


def join(samples: list[int]) -> tuple[str, list[int]]:
    return "joined", samples


def test_a_dataset_not_in_memory_loads_through_dataloaders_with_the_runs_options():
    datasets = datasets_of(Indices(10), Indices(7), collate_fn=join)
    generator = torch.Generator()
    cfg = TrainConfig(batch_size=4, num_workers=0)
    train_loader, val_loader = build_loaders(cfg, datasets, torch.device("cpu"), generator)
    train_batches = [samples for _, samples in train_loader]
    assert [len(batch) for batch in train_batches] == [4, 4]
    assert len({i for batch in train_batches for i in batch}) == 8
    assert list(val_loader) == [("joined", [0, 1, 2, 3]), ("joined", [4, 5, 6])]
    for loader in (train_loader, val_loader):
        assert loader.num_workers == 0 and not loader.persistent_workers
        assert loader.worker_init_fn is seed_worker and loader.generator is generator
        assert not loader.pin_memory  # page-locked memory only helps copies to a GPU


def test_loader_workers_persist_and_prefetch_and_batches_are_pinned_for_a_gpu():
    # Nothing is loaded, so no worker starts and the CUDA device need not exist.
    datasets = datasets_of(Indices(10), Indices(7))
    cfg = TrainConfig(batch_size=4, num_workers=1)
    for loader in build_loaders(cfg, datasets, torch.device("cuda"), torch.Generator()):
        assert loader.num_workers == 1 and loader.persistent_workers
        assert loader.prefetch_factor == 4 and loader.pin_memory


@pytest.mark.parametrize(("cpus", "workers"), [(16, 4), (6, 3), (2, 1), (1, 0)])
def test_auto_workers_take_half_the_cpus_at_most_4(monkeypatch, cpus, workers):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    assert resolve_num_workers("auto") == workers
    assert resolve_num_workers(3) == 3  # a number is taken as given


def test_auto_workers_count_only_the_cpus_this_process_may_use(monkeypatch):
    # A scheduler's job (Slurm, taskset) may use 4 of the machine's 64 CPUs.
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert resolve_num_workers("auto") == 2


@pytest.mark.parametrize(("cpus", "workers"), [(6, 3), (None, 0)])
def test_auto_workers_without_cpu_affinity_count_the_machines_cpus(monkeypatch, cpus, workers):
    # macOS and Windows have no sched_getaffinity; cpu_count is None when it cannot tell.
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    assert resolve_num_workers("auto") == workers


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


def test_overfit_batches_train_and_evaluate_on_the_same_first_samples():
    datasets = datasets_of(in_memory(10), in_memory(6))
    subset = first_batches_only(datasets, 4)
    for split in (subset.train, subset.val):
        assert split.targets.tolist() == [0, 1, 2, 3]
    assert subset.train_targets.tolist() == subset.val_targets.tolist() == [0, 1, 2, 3]


def test_a_fast_dev_run_evaluates_the_first_batches_and_the_baseline_on_their_targets():
    datasets = datasets_of(in_memory(20), in_memory(10))
    datasets.val_targets = torch.arange(20)  # 2 targets a sample, as a text's bytes
    subset = first_validation_batches(datasets, batches=2, batch_size=3)
    assert subset.val.targets.tolist() == list(range(6))
    assert subset.val_targets.tolist() == list(range(12))
    assert first_validation_batches(datasets, batches=4, batch_size=3) is datasets  # all of it


def test_the_fingerprint_is_16_hex_digits_of_the_data_and_its_split():
    prints = {
        fingerprint(b"rows", np.arange(3), np.arange(3, 5)),
        fingerprint(b"Rows", np.arange(3), np.arange(3, 5)),
        fingerprint(b"rows", np.array([0, 1, 3]), np.array([2, 4])),  # sample 2 moved
        fingerprint(b"rows", np.array([0, 1, 2]), np.array([4, 3])),
    }
    assert len(prints) == 4
    assert all(len(p) == 16 and set(p) <= set("0123456789abcdef") for p in prints)


def test_the_class_table_counts_each_class_in_both_splits():
    # A split may have any shape (a mask's pixels each count); a class may be absent.
    train, val = torch.tensor([[0, 0], [1, 0]]), torch.tensor([1])
    assert class_table(("cat", "dog", "bird"), train, val, "pixels") == [
        "pixels per class (train / validation, share of train):",
        "  cat           3 / 0          75.0%",
        "  dog           1 / 1          25.0%",
        "  bird          0 / 0           0.0%",
    ]


def test_the_class_table_refuses_a_class_index_beyond_the_names():
    # Rather than leave the samples of a class with no name out of the table.
    with pytest.raises(ValueError):
        class_table(("cat", "dog"), torch.tensor([0, 2]), torch.tensor([1]), "images")


class UndecodableFiles(torch.utils.data.Dataset):
    """A sample whose files fail in turn, the second error chained to the first."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int):
        try:
            raise DataError("'a.png' cannot be decoded")
        except DataError as error:
            raise DataError("'b.png' cannot be decoded either: remove both") from error


def test_a_data_error_from_a_loader_worker_keeps_only_its_own_message():
    """A worker's DataError reaches the training process re-created from the worker's whole
    traceback (torch.utils.data re-raises it so), whose end is the error raised last."""
    loader = torch.utils.data.DataLoader(UndecodableFiles(), num_workers=1)
    with pytest.raises(DataError) as raised:
        next(iter(loader))
    assert str(raised.value) == "'b.png' cannot be decoded either: remove both"
