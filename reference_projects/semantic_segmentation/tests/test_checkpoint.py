"""Checkpoints: complete, atomic, loadable with weights_only, in step order at any step,
versioned, verified against their checksum, and checked on resume; a full disk said in one
line."""

import contextlib
import io
import os
import re
import zipfile

import pytest
import torch
from calls import refusal
from run_logs import checkpoint_state
from safetensors.torch import load_file
from training_children import full_disk_run

from semantic_segmentation import checkpoint
from semantic_segmentation.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
)
from semantic_segmentation.loaders import (
    SHUFFLE,
    SHUFFLE_BEFORE_FORMAT_5,
    EpochBatchSampler,
)
from semantic_segmentation.resume import find_resume_checkpoint
from semantic_segmentation.train import main
from semantic_segmentation.utils.files import atomic_write


def test_checkpoint_holds_the_whole_training_state(trained):
    payload = checkpoint_state(trained / "checkpoints" / "step-000006.pt")
    assert {"model", "optimizer", "progress", "rng", "config", "data_fingerprint"} <= payload.keys()
    assert payload["format"] == checkpoint.FORMAT_VERSION
    assert payload["progress"]["step"] == 6
    assert payload["progress"]["shuffle"] == SHUFFLE
    assert len(payload["rng"]) == 1  # one entry per process, whatever the render
    # The learning rate is a function of the step, so the step restores the schedule.
    assert payload["optimizer"]["param_groups"][0]["lr"] > 0
    assert torch.load(trained / "checkpoints" / "step-000006.pt", weights_only=True)


def test_keeps_the_newest_and_the_best(short_run, tmp_path):
    main(short_run("--max_steps", "12", "--keep_checkpoints", "1"))
    directory = tmp_path / "run" / "checkpoints"
    kept = {path.name for path in list_checkpoints(directory)}
    best = (directory / "best").read_text().strip()
    assert kept == {"step-000012.pt", best}
    # what a pruned checkpoint kept beside its file goes with it (sharded training's shards)
    assert {path.name for path in directory.iterdir()} <= kept | {"latest", "best"} | {
        name.replace(".pt", ".shards") for name in kept
    }


def test_corrupt_newest_checkpoint_falls_back_to_the_previous(trained, caplog):
    newest = trained / "checkpoints" / "step-000006.pt"
    newest.write_bytes(newest.read_bytes()[:1000])  # truncated, as by a full disk
    path, payload = find_resume_checkpoint(trained / "checkpoints")
    assert path.name == "step-000003.pt" and payload["progress"]["step"] == 3
    assert any(
        message.startswith(f"checkpoint '{newest}' is ")
        and message.endswith("; trying the previous one")
        for message in caplog.messages
    ), caplog.messages


def test_a_checkpoint_damaged_in_the_middle_resumes_from_the_previous_one(
    trained, checkpointed_run, short_run, capsys
):
    """4 KiB flipped in the middle of the newest checkpoint, as by a bad disk: the file is
    whole and its zip archive reads, but a tensor's bytes changed. The resume says so in one
    line and continues from step 3, to the weights of the run that was never damaged."""
    newest = trained / "checkpoints" / "step-000006.pt"
    content = bytearray(newest.read_bytes())
    middle = len(content) // 2
    content[middle - 2048 : middle + 2048] = bytes(
        b ^ 0xFF for b in content[middle - 2048 : middle + 2048]
    )
    newest.write_bytes(content)
    assert main(short_run())["steps"] == 6
    err = capsys.readouterr().err
    assert f"checkpoint '{newest}' is corrupt (checksum of " in err
    assert "does not match); trying the previous one" in err
    assert "step-000003.pt at step 3" in err
    whole, resumed = (
        load_file(run / "model" / "model.safetensors") for run in (checkpointed_run, trained)
    )
    assert all(torch.equal(whole[key], resumed[key]) for key in whole)


def test_every_damaged_byte_is_detected_or_changes_nothing_loaded(tmp_path):
    """Each byte of a small checkpoint flipped in turn: the load refuses it, or what it loads
    is what was saved. The records' own CRC-32s leave the zip's directory unchecked, where
    a flipped byte made torch.load read a tensor from the wrong place; the file's checksum
    covers it."""
    payload = {"model": {"w": torch.arange(6.0), "b": torch.ones(2)}, "rng": []}
    path = checkpoint.save_checkpoint(tmp_path, checkpoint.Progress(step=3), payload, 1, False)
    saved, content = load_checkpoint(path), path.read_bytes()
    with open(path, "r+b") as file:
        for index, byte in enumerate(content):
            overwrite(file, index, byte ^ 0xFF)
            with contextlib.suppress(CheckpointError):
                assert equal(load_checkpoint(path), saved), index
            overwrite(file, index, byte)


def overwrite(file, index: int, byte: int) -> None:
    file.seek(index)
    file.write(bytes([byte]))
    file.flush()


def equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(equal, a, b))
    return a == b


def test_a_checkpoint_without_a_checksum_has_its_records_checked(trained):
    """As written before format 5 (or by torch.save directly): each record's CRC-32."""
    path = trained / "checkpoints" / "step-000006.pt"
    torch.save(load_checkpoint(path), path)
    # A byte in the middle of the largest record (a tensor), not in the padding between them
    with zipfile.ZipFile(path) as archive:
        record = max(archive.infolist(), key=lambda info: info.file_size)
    content = bytearray(path.read_bytes())
    start = record.header_offset  # the local header: 30 bytes, then the name and extra field
    name_length, extra_length = (
        int.from_bytes(content[i : i + 2], "little") for i in (start + 26, start + 28)
    )
    content[start + 30 + name_length + extra_length + record.file_size // 2] ^= 0xFF
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=r"is corrupt \(checksum of .* does not match"):
        load_checkpoint(path)


def test_resume_from_a_missing_or_corrupt_path_is_a_one_line_error(trained, short_run):
    corrupt = trained / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint")
    for path in (trained / "missing.pt", corrupt):
        assert str(path) in refusal(main, short_run("--resume", str(path)))


def test_a_crash_before_the_rename_keeps_the_previous_checkpoint(trained, monkeypatch):
    def crash(*args):
        raise OSError("simulated power cut")

    monkeypatch.setattr(os, "replace", crash)
    payload = load_checkpoint(trained / "checkpoints" / "step-000006.pt")
    progress = checkpoint.Progress(**{**payload["progress"], "step": 7})
    with pytest.raises(OSError, match="power cut"):
        checkpoint.save_checkpoint(trained / "checkpoints", progress, payload, 2, False)
    monkeypatch.undo()
    assert (trained / "checkpoints" / "latest").read_text().strip() == "step-000006.pt"
    path, _ = find_resume_checkpoint(trained / "checkpoints")
    assert path.name == "step-000006.pt"


def test_an_interrupted_write_leaves_no_temporary_file(tmp_path):
    """Whatever stops a write, the old file stays and the temporary one goes: Ctrl-C inside
    torch.save is raised as itself, not as the RuntimeError ("unexpected pos") torch makes
    of an error in the file's write."""
    path = tmp_path / "state.pt"
    path.write_bytes(b"old")

    class Interrupted(io.RawIOBase):
        def writable(self):
            return True

        def write(self, data):
            raise KeyboardInterrupt

    def interrupted(file):
        file.write(b"partial")
        torch.save({"x": torch.ones(3)}, Interrupted())

    for write, stop in [(interrupted, KeyboardInterrupt), (lambda file: 1 / 0, ZeroDivisionError)]:
        with pytest.raises(stop):
            atomic_write(path, write)
        assert path.read_bytes() == b"old"
        assert list(tmp_path.iterdir()) == [path]


def test_a_full_disk_at_a_checkpoint_is_one_line_and_the_run_resumes(
    trainers, trained, short_run, tmp_path
):
    """The error names the file and the checkpoint a second run resumes from; no temporary
    file is left, the older checkpoints are intact, and once there is room the same command
    resumes."""
    directory = trained / "checkpoints"
    before = {path: path.read_bytes() for path in list_checkpoints(directory)}
    longer = short_run("--max_steps", "9", "--checkpoint_every", "1")
    exitcode, lines = full_disk_run(trainers, longer, tmp_path, "state:save_checkpoint")
    assert exitcode == 1
    assert not any("Traceback" in line for line in lines), lines
    errors = [line for line in lines if line.startswith("error: ")]
    assert errors == [
        f"error: no space left writing '{directory / 'step-000007.pt'}' (File too large): free "
        f"space and run the same command again to resume from '{directory / 'step-000006.pt'}'"
    ]
    assert list(trained.rglob("*.tmp")) == []
    assert {path: path.read_bytes() for path in list_checkpoints(directory)} == before
    assert main(longer)["steps"] == 9


def test_a_full_disk_at_the_start_leaves_no_empty_config(trainers, short_run, tmp_path):
    run = tmp_path / "run"
    save_config = "run_folder.records:save_config"
    exitcode, lines = full_disk_run(trainers, short_run(), tmp_path, save_config)
    assert exitcode == 1
    assert [line for line in lines if line.startswith("error: ")] == [
        f"error: no space left writing '{run / 'config.yaml'}' (File too large): free space "
        "and run the same command again"
    ]
    assert not (run / "config.yaml").exists()
    assert list(run.rglob("*.tmp")) == []


def test_a_full_disk_at_the_end_keeps_the_checkpoints_and_the_rerun_saves_the_model(
    trainers, short_run, tmp_path
):
    run = tmp_path / "run"
    save_weights = "run_folder.records:save_weights"
    exitcode, lines = full_disk_run(trainers, short_run(), tmp_path, save_weights)
    assert exitcode == 1 and not any("Traceback" in line for line in lines), lines
    assert [line for line in lines if line.startswith("error: ")] == [
        f"error: no space left writing '{run / 'model' / 'model.safetensors'}' (File too "
        "large): free space and run the same command again"
    ]
    assert not (run / "model" / "model.safetensors").exists()
    assert list(run.rglob("*.tmp")) == []
    assert main(short_run())["steps"] == 6  # the last checkpoint, evaluated and saved
    assert (run / "model" / "model.safetensors").is_file()


def test_checkpoint_of_another_model_names_the_mismatched_keys(trained, short_run):
    accepted = ("--resume_changed", "true")  # past the resume guard, which refuses it first
    newest = re.escape(str(find_resume_checkpoint(trained / "checkpoints")[0]))
    with pytest.raises(SystemExit, match=f"checkpoint '{newest}' does not fit this model.*shape"):
        main(short_run("--width", "16", "--max_steps", "9", *accepted))


def relabel(run_dir, step: int) -> None:
    """Make the run's newest checkpoint the only one, as if taken at `step`."""
    directory = run_dir / "checkpoints"
    newest = list_checkpoints(directory)[-1]
    payload = load_checkpoint(newest)
    for path in list_checkpoints(directory):
        path.unlink()
    relabelled = checkpoint.checkpoint_path(directory, step).stem
    for beside in directory.glob(f"{newest.stem}.*"):  # what storage.py keeps beside the file
        beside.rename(beside.with_name(relabelled + beside.name.removeprefix(newest.stem)))
    if checkpoint.SHARDS in payload:  # the folder's name, as the file records it
        suffix = payload[checkpoint.SHARDS].removeprefix(newest.stem)
        payload[checkpoint.SHARDS] = relabelled + suffix
    progress = checkpoint.Progress(**{**payload["progress"], "step": step})
    checkpoint.save_checkpoint(directory, progress, payload, keep=2, is_best=True)


@pytest.mark.parametrize("step", [999_999, 10**9 - 1])
def test_checkpoints_stay_in_step_order_past_a_million_steps(trained, short_run, step):
    """Names gain a digit at 10**6 (step-1000000.pt sorts before step-999999.pt as text):
    resume, keep-N and the latest marker order by the step number."""
    relabel(trained, step)
    longer = ("--max_steps", str(step + 3), "--epochs", str(step), "--checkpoint_every", "1")
    summary = main(short_run(*longer, "--keep_checkpoints", "2"))
    assert summary["steps"] == step + 3
    kept = list_checkpoints(trained / "checkpoints")
    steps = [load_checkpoint(path)["progress"]["step"] for path in kept]
    assert steps[-2:] == [step + 2, step + 3]  # the newest two kept, in step order
    latest = (trained / "checkpoints" / "latest").read_text().strip()
    assert latest == f"step-{step + 3:06d}.pt"
    path, _ = find_resume_checkpoint(trained / "checkpoints")
    assert path.name == latest
    assert main(short_run(*longer))["steps"] == step + 3  # resumes at the end: nothing to train


def test_a_checkpoint_of_a_newer_format_is_refused_in_one_line(trained, short_run):
    newest = trained / "checkpoints" / "step-000006.pt"
    payload = load_checkpoint(newest)
    torch.save({**payload, "format": checkpoint.FORMAT_VERSION + 1}, newest)
    message = refusal(main, short_run("--max_steps", "9"))
    assert f"format version {checkpoint.FORMAT_VERSION + 1}" in message
    assert f"1 to {checkpoint.FORMAT_VERSION}" in message
    # Not skipped for the older one, whose run would prune the newer checkpoint.
    assert {p.name for p in list_checkpoints(trained / "checkpoints")} == {
        "step-000003.pt",
        "step-000006.pt",
    }


def as_version_4(payload: dict) -> dict:
    """The layout before progress said how the shuffle is seeded (seed + epoch)."""
    progress = {k: v for k, v in payload["progress"].items() if k != "shuffle"}
    return payload | {"format": 4, "progress": progress}


def as_version_1(payload: dict) -> dict:
    """The layout before checkpoints had a format: no version, data fingerprint, schedule
    total or shuffle; one process kept its RNG states as a dict, the loader generator's
    beside them."""
    old = {k: v for k, v in payload.items() if k not in ("format", "data_fingerprint", "rng")}
    old["progress"] = {
        k: v for k, v in payload["progress"].items() if k not in ("total_steps", "shuffle")
    }
    rng = dict(payload["rng"][0])
    old["data_generator"] = rng.pop("data_generator")
    old["rng"] = rng
    return old


@pytest.fixture
def shuffles(monkeypatch):
    """Each training epoch the sampler starts, and the batches it yields."""
    started, iterate = [], EpochBatchSampler.__iter__

    def recorded(sampler):
        batches = list(iterate(sampler))
        if sampler.shuffle:
            started.append((vars(sampler).copy(), batches))
        return iter(batches)

    monkeypatch.setattr(EpochBatchSampler, "__iter__", recorded)
    return started


def test_a_checkpoint_of_format_4_resumes_in_its_shuffle_order(
    trained, short_run, tmp_path, shuffles
):
    """Format 4 seeded each epoch's shuffle with seed + epoch: its run goes on in that order,
    and so do the checkpoints it writes from there; version 1's layout resumes the same."""
    step_3 = checkpoint_state(trained / "checkpoints" / "step-000003.pt")
    resumed = resume_as(as_version_4, step_3, short_run, tmp_path / "version-4")
    (sampler, batches), *_ = shuffles
    assert sampler["seeding"] == SHUFFLE_BEFORE_FORMAT_5
    seed, epoch, start, size = (sampler[k] for k in ("seed", "epoch", "start_batch", "size"))
    order = torch.randperm(size, generator=torch.Generator().manual_seed(seed + epoch))
    assert (epoch, start) == (0, 3)
    assert torch.equal(batches[0], order[3 * len(batches[0]) : 4 * len(batches[0])])
    newest = load_checkpoint(tmp_path / "version-4" / "checkpoints" / "step-000006.pt")
    assert newest["progress"]["shuffle"] == SHUFFLE_BEFORE_FORMAT_5
    other = load_file(trained / "model" / "model.safetensors")
    assert not all(torch.equal(other[key], resumed[key]) for key in other)  # another order
    from_version_1 = resume_as(as_version_1, step_3, short_run, tmp_path / "version-1")
    assert all(torch.equal(resumed[key], from_version_1[key]) for key in resumed)


def resume_as(earlier, payload: dict, short_run, output_dir) -> dict[str, torch.Tensor]:
    """The final weights of a run resumed from `payload` made `earlier` (its layout)."""
    old = output_dir.parent / f"{output_dir.name}.pt"
    torch.save(earlier(payload), old)
    main(short_run("--resume", str(old), output_dir=output_dir))
    return load_file(output_dir / "model" / "model.safetensors")
