"""What the checkpoint functions write, refuse and say, called on small states without a
training run: the best checkpoint kept, a full disk, unreadable or foreign files, formats
never written, weights that do not fit, and the random states of every process and device."""

import argparse
import re
from types import SimpleNamespace

import pytest
import torch
from accelerate.state import PartialState

from image_classification import checkpoint
from image_classification.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
)
from image_classification.loaders import SHUFFLE_BEFORE_FORMAT_5
from image_classification.utils.files import DiskFull


def tiny_states() -> dict:
    """What save_checkpoint needs of a run's states, without training one."""
    return {"model": {"w": torch.arange(4.0)}, "rng": []}


def test_the_best_checkpoint_is_kept_however_old(tmp_path):
    """Read back from the `best` marker on disk; the folder is made with its parents."""
    directory = tmp_path / "run" / "checkpoints"
    for step in (1, 2, 3):
        progress = checkpoint.Progress(step=step)
        checkpoint.save_checkpoint(directory, progress, tiny_states(), 1, is_best=step == 1)
    kept = [path.name for path in list_checkpoints(directory)]
    assert kept == ["step-000001.pt", "step-000003.pt"]


def test_a_full_disk_names_the_newest_complete_checkpoint_if_there_is_one(tmp_path, monkeypatch):
    directory = tmp_path / "checkpoints"

    def save(step: int) -> None:
        progress = checkpoint.Progress(step=step)
        checkpoint.save_checkpoint(directory, progress, tiny_states(), 5, is_best=False)

    def full(path, write):
        raise DiskFull(f"no space left writing '{path}'")

    def error_on_a_full_disk(step: int) -> str:
        with monkeypatch.context() as patch, pytest.raises(DiskFull) as raised:
            patch.setattr(checkpoint, "atomic_write", full)
            save(step)
        return str(raised.value)

    first = directory / "step-000001.pt"
    assert error_on_a_full_disk(1) == f"no space left writing '{first}'"  # nothing to resume
    for step in (1, 2, 3):
        save(step)
    newest, failed = directory / "step-000003.pt", directory / "step-000004.pt"
    message = f"no space left writing '{failed}' to resume from '{newest}'"
    assert error_on_a_full_disk(4) == message


@pytest.mark.parametrize("stage", ["archive", "load"])
def test_an_unreadable_checkpoint_is_named_with_the_first_line_of_the_reason(
    tmp_path, monkeypatch, stage
):
    """Whichever read fails, its reason is quoted in one line of at most 120 characters."""
    path = checkpoint.save_checkpoint(tmp_path, checkpoint.Progress(), tiny_states(), 1, False)

    def unreadable(*args, **kwargs):
        raise OSError("x" * 200 + "\nsecond line")

    target = {"archive": (checkpoint, "archive_damage"), "load": (torch, "load")}[stage]
    monkeypatch.setattr(*target, unreadable)
    with pytest.raises(CheckpointError) as raised:
        load_checkpoint(path)
    assert str(raised.value) == f"checkpoint '{path}' is unreadable ({'x' * 120})"


def test_a_file_that_is_no_archive_is_unreadable(tmp_path):
    path = tmp_path / "step-000001.pt"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError) as raised:
        load_checkpoint(path)
    assert str(raised.value) == f"checkpoint '{path}' is unreadable (File is not a zip file)"


def test_a_checkpoint_holding_a_pickled_object_is_refused(tmp_path, monkeypatch):
    """Unpickling an object runs its code: refused even where torch's default would load it,
    as before torch 2.6 or with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD set."""
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    path = tmp_path / "step-000001.pt"
    torch.save({**tiny_states(), "progress": {}, "config": argparse.Namespace(lr=0.1)}, path)
    refused = rf"^checkpoint '{re.escape(str(path))}' is unreadable \(\w"
    with pytest.raises(CheckpointError, match=refused):
        load_checkpoint(path)


@pytest.mark.parametrize(
    "content",
    [
        [torch.ones(2)],
        {"weights": torch.ones(2)},
        {"model": {}, "rng": []},
        {"model": {}, "progress": {}},  # no random states
        {"model": {}, "progress": {}, "rng": {}},  # one process's, without the loader's
    ],
)
def test_a_file_that_is_no_training_checkpoint_is_refused(tmp_path, content):
    path = tmp_path / "step-000001.pt"
    torch.save(content, path)
    with pytest.raises(CheckpointError) as raised:
        load_checkpoint(path)
    assert str(raised.value) == f"checkpoint '{path}' is not a training checkpoint of this project"


def test_a_first_format_checkpoint_of_several_processes_loads_in_this_layout(tmp_path):
    """Version 1 of several processes held the model, the progress and a list of random
    states, nothing more: it loads, its epochs shuffled as they were then."""
    path = tmp_path / "step-000001.pt"
    torch.save({"model": {}, "progress": {"step": 1}, "rng": [{}, {}]}, path)
    loaded = load_checkpoint(path)
    assert loaded[checkpoint.FORMAT] == checkpoint.FORMAT_VERSION
    assert loaded["progress"] == {"step": 1, "shuffle": SHUFFLE_BEFORE_FORMAT_5}


@pytest.mark.parametrize("version", [0, checkpoint.FORMAT_VERSION + 1])
def test_a_format_this_project_never_wrote_is_refused(tmp_path, version):
    path = tmp_path / "step-000001.pt"
    torch.save({**tiny_states(), "progress": {}, "format": version}, path)
    with pytest.raises(checkpoint.CheckpointRefused, match=f"format version {version}; "):
        load_checkpoint(path)


def test_a_checkpoint_from_before_the_average_evaluates_its_own_weights():
    """Checkpoints before format 3 kept no average of the weights."""
    weights = {"w": torch.ones(2)}
    assert checkpoint.inference_weights({"model": weights}) is weights


@pytest.mark.parametrize(
    "state, fit",
    [
        ({"2.weight": torch.zeros(2, 2)}, "missing: 0.bias, 0.weight, 1.bias, 1.weight ..."),
        (
            {"0.weight": torch.zeros(3, 2), "0.bias": torch.zeros(2), "extra": torch.zeros(1)},
            "missing: 1.bias, 1.weight, 2.bias, 2.weight; unexpected: extra; "
            "shape: 0.weight (3, 2) vs (2, 2)",
        ),
        (None, "unexpected: extra"),
    ],
)
def test_weights_that_do_not_fit_are_named_four_at_most_per_kind(state, fit):
    # Six keys, sorted: 0.bias, 0.weight, 1.bias, 1.weight, 2.bias, 2.weight
    model = torch.nn.Sequential(*(torch.nn.Linear(2, 2) for _ in range(3)))
    state = state or {**model.state_dict(), "extra": torch.zeros(1)}
    with pytest.raises(CheckpointError) as raised:
        checkpoint.load_model_state(model, state, "step-000001.pt")
    assert str(raised.value) == f"checkpoint 'step-000001.pt' does not fit this model ({fit})"


def test_saved_weights_load_into_their_model_and_name_their_file_in_another(tmp_path):
    model = torch.nn.Linear(2, 2)
    path = checkpoint.save_weights(model.state_dict(), tmp_path / "run" / "model")
    loaded = checkpoint.load_weights(torch.nn.Linear(2, 2), path.parent)
    assert torch.equal(loaded.weight, model.weight) and torch.equal(loaded.bias, model.bias)
    with pytest.raises(CheckpointError, match=rf"^checkpoint '{re.escape(str(path))}' does not"):
        checkpoint.load_weights(torch.nn.Linear(3, 2), path.parent)


def test_a_process_the_checkpoint_has_no_states_for_keeps_its_own():
    """The second process of a run resumed on two from a checkpoint one process wrote."""
    generator = torch.Generator().manual_seed(1)
    states = checkpoint.gather_rng_states(generator)
    torch.manual_seed(2)
    generator.manual_seed(2)
    own = torch.get_rng_state(), generator.get_state()
    second = SimpleNamespace(process_index=1)
    checkpoint.restore_rng_states(states, second, generator)
    assert torch.equal(torch.get_rng_state(), own[0])
    assert torch.equal(generator.get_state(), own[1])


def test_every_cuda_devices_random_state_is_kept_and_restored(tmp_path, monkeypatch):
    """With stand-ins for two devices' generators, so that a machine without CUDA checks it."""
    accelerator = PartialState()  # before the stand-ins: it would pin a CUDA device
    devices = [torch.full((8,), device, dtype=torch.uint8) for device in (1, 2)]
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: devices)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.append)
    generator = torch.Generator()
    states = {"model": {}, "rng": checkpoint.gather_rng_states(generator)}
    path = checkpoint.save_checkpoint(tmp_path, checkpoint.Progress(), states, 1, False)
    checkpoint.restore_rng_states(load_checkpoint(path)["rng"], accelerator, generator)
    (states,) = restored
    assert len(states) == 2 and all(map(torch.equal, states, devices))
