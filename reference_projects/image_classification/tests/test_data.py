"""Data: the embedded digits, your own image folders, one preprocessing for both, and the
files in them that cannot be read."""

import gc
import io
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from calls import refusal
from PIL import Image

from image_classification import images
from image_classification.config import (
    ConfigError,
    load_config,
)
from image_classification.data import (
    Preprocess,
    build_datasets,
)
from image_classification.describe import main as data_command
from image_classification.loaders import build_loaders
from image_classification.resume import find_resume_checkpoint
from image_classification.train import main
from image_classification.tune import main as tune
from image_classification.utils.seed import seed_worker


def test_digits_split_is_stratified_and_fixed(cfg):
    first, again = build_datasets(cfg), build_datasets(load_config(["--seed", "7"]))
    assert first.fingerprint == again.fingerprint  # the split does not move with --seed
    assert len(first.train) + len(first.val) == 1797
    val_share = torch.bincount(first.val_targets) / torch.bincount(first.train_targets)
    assert torch.allclose(val_share, torch.full_like(val_share, 0.25), atol=0.03)


def test_digits_are_normalised_with_training_statistics(cfg):
    data = build_datasets(cfg)
    assert abs(data.train.inputs.mean().item()) < 1e-3
    assert abs(data.train.inputs.std().item() - 1.0) < 1e-2


def test_an_empty_data_dir_argument_means_the_embedded_digits():
    assert load_config(["--data_dir", "none"]).data_dir is None


def test_preprocess_round_trips_through_json(tmp_path, cfg):
    preprocess = build_datasets(cfg).preprocess
    preprocess.save(tmp_path / "preprocess.json")
    assert Preprocess.load(tmp_path / "preprocess.json") == preprocess


def test_image_folder_uses_the_same_preprocessing(tmp_path, make_image_folder):
    root = make_image_folder(tmp_path / "shapes")
    cfg = load_config(["--data_dir", str(root), "--image_size", "16", "--image_channels", "3"])
    data = build_datasets(cfg)
    assert data.preprocess.class_names == ("circle", "square")
    image, label = data.train[0]
    assert image.shape == (3, 16, 16)
    path = data.train.paths[0]
    with Image.open(path) as decoded:
        assert torch.equal(image, data.preprocess(decoded))


def test_training_on_an_image_folder(tmp_path, make_image_folder, fast_dev_run):
    root = make_image_folder(tmp_path / "shapes")
    summary = main(
        [
            "--output_dir",
            str(tmp_path / "run"),
            "--data_dir",
            str(root),
            "--image_size",
            "16",
            "--num_workers",
            "0",
            "--batch_size",
            "8",
            *fast_dev_run,
        ]
    )
    assert summary["steps"] == 2  # 19 training images make 2 full batches of 8


def test_loader_workers_are_seeded_and_persistent(tmp_path, make_image_folder):
    root = make_image_folder(tmp_path / "shapes")
    fields = [
        "--data_dir",
        str(root),
        "--image_size",
        "16",
        "--num_workers",
        "2",
        "--batch_size",
        "8",
    ]
    cfg, data_generator = load_config(fields), torch.Generator().manual_seed(0)
    train_loader, val_loader = build_loaders(
        cfg, build_datasets(cfg), torch.device("cpu"), data_generator
    )
    assert train_loader.num_workers == 2 and train_loader.persistent_workers
    assert train_loader.pin_memory is False  # only a CUDA device benefits from pinned memory
    assert train_loader.worker_init_fn is seed_worker  # tested in test_loaders.py
    assert train_loader.generator is data_generator  # the run's: its seed, and resumed
    assert train_loader.batch_sampler.drop_last and not val_loader.batch_sampler.drop_last


@pytest.mark.parametrize("layout", ["missing", "empty", "no_images", "one_class"])
def test_unusable_data_dir_is_refused_before_training(tmp_path, make_image_folder, layout):
    root = tmp_path / "data"
    root.mkdir()
    if layout == "missing":
        root = root / "no-such-folder"
    if layout == "no_images":
        (root / "cats").mkdir()
        (root / "cats" / "notes.txt").write_text("not an image")
    if layout == "one_class":
        make_image_folder(root / "x", classes=("only",))
        root = root / "x"
    with pytest.raises(ConfigError, match="--data_dir"):
        build_datasets(load_config(["--data_dir", str(root)]))


@pytest.mark.parametrize("renamed", ["square/0.png", "square"])
def test_a_name_that_is_not_utf8_is_refused_in_one_line_naming_it(
    tmp_path, make_image_folder, short_run, renamed
):
    """A file or class folder named in another encoding (Latin-1's é is the byte 0xe9) once
    stopped training and the data command with "UnicodeEncodeError: surrogates not allowed"."""
    root = make_image_folder(tmp_path / "shapes")
    old = root / renamed
    new = old.with_name(os.fsdecode(b"caf\xe9" + old.suffix.encode()))
    try:
        old.rename(new)
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    shown = f"{new.parent}/caf\\xe9{old.suffix}"
    expected = f"error: --data_dir: '{shown}': its name is not UTF-8 (byte 0xe9); rename it"
    args = short_run("--data_dir", str(root), "--image_size", "16", "--num_workers", "0")
    for command in (data_command, main):
        assert refusal(command, args).startswith(expected)
    assert not (tmp_path / "run").exists()  # refused before anything is written


def write_broken(path: Path, kind: str) -> None:
    """A file a user's folder may hold that PIL cannot use."""
    if kind == "not-an-image":
        path.write_text("notes, saved with an image's name")
    elif kind == "empty":
        path.write_bytes(b"")
    else:  # a real JPEG cut short, as by an interrupted copy: its header still parses
        photo = Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), np.uint8))
        jpeg = io.BytesIO()
        photo.save(jpeg, "JPEG")
        path.write_bytes(jpeg.getvalue()[:300])


@pytest.mark.parametrize("kind", ["not-an-image", "empty", "truncated"])
def test_an_image_that_cannot_be_read_is_refused_in_one_line(
    tmp_path, make_image_folder, short_run, capsys, kind
):
    root = make_image_folder(tmp_path / "shapes")  # 24 images
    bad = root / "square" / "bad.jpg"
    write_broken(bad, kind)
    args = short_run("--data_dir", str(root), "--image_size", "16", "--num_workers", "0")
    message = refusal(main, args)
    assert message.startswith(f"error: 1 of 25 files cannot be read as images (the first: '{bad}'")
    assert message.endswith("--skip_bad_files true to train without them")
    assert "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_skip_bad_files_trains_without_them_and_counts_them(
    tmp_path, make_image_folder, short_run, capsys
):
    root = make_image_folder(tmp_path / "shapes")
    write_broken(root / "circle" / "cut.jpg", "truncated")
    write_broken(root / "square" / "notes.png", "not-an-image")
    fields = ["--data_dir", str(root), "--image_size", "16", "--skip_bad_files", "true"]
    assert main(short_run(*fields, "--max_steps", "2", "--batch_size", "8"))["steps"] == 2
    assert "skipping 2 of 26 files that cannot be read as images" in capsys.readouterr().err


def test_an_image_that_fails_to_decode_in_training_stops_the_run_in_one_line(
    short_run, user_data, tmp_path, capsys, monkeypatch
):
    """Past FULL_CHECK_IMAGES only headers are read up front: an image that fails to decode
    in a loader worker stops the run with one line naming it, and the checkpoints stay."""
    data_args = user_data(tmp_path / "data")  # decoded by 2 loader workers
    main(short_run(*data_args))  # checkpoints at steps 3 and 6
    image = build_datasets(load_config(data_args)).val.paths[0]
    # Its pixel data zeroed: the header still parses, and the size, and so the data's
    # fingerprint, stay the same.
    content = image.read_bytes()
    pixels_start = content.index(b"IDAT") + 4
    image.write_bytes(content[:pixels_start] + bytes(len(content) - pixels_start))
    monkeypatch.setattr(images, "FULL_CHECK_IMAGES", 0)
    message = refusal(main, short_run("--max_steps", "12", *data_args))  # evaluates at step 9
    assert message.startswith(f"error: '{image}' cannot be decoded (")
    assert "Traceback" not in capsys.readouterr().err
    _, payload = find_resume_checkpoint(tmp_path / "run" / "checkpoints")
    assert payload["progress"]["step"] == 6
    # The failed run's loaders are collected now, not in a later test: after a worker
    # raised, torch waits MP_STATUS_CHECK_INTERVAL (5 s) for each worker before killing it.
    monkeypatch.setattr(torch.utils.data._utils, "MP_STATUS_CHECK_INTERVAL", 0.1)
    gc.collect()


def test_tune_sweeps_workers_and_batch_sizes_on_an_image_folder(
    tmp_path, make_image_folder, capsys
):
    root = make_image_folder(tmp_path / "shapes", per_class=20)
    fields = ["--data_dir", str(root), "--image_size", "16", "--image_channels", "3"]
    results = tune(["--workers", "0,1", "--batch_sizes", "4,8", "--steps", "3", *fields])
    assert {(row["num_workers"], row["batch_size"]) for row in results} == {
        (0, 4),
        (1, 4),
        (0, 8),
        (1, 8),
    }
    assert all(row["samples_per_s"] > 0 for row in results)
    assert "best: --num_workers" in capsys.readouterr().out


def test_tune_sweeps_batch_size_only_on_the_in_memory_digits():
    results = tune(["--workers", "0,2", "--batch_sizes", "16", "--steps", "2"])
    assert [row["num_workers"] for row in results] == [0]
