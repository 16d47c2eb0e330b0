"""Data: the synthetic shapes, your own images and masks, one preprocessing for both."""

import os

import numpy as np
import pytest
import torch
from calls import refusal
from PIL import Image

from semantic_segmentation.config import (
    ConfigError,
    load_config,
)
from semantic_segmentation.data import (
    Preprocess,
    build_datasets,
    synthetic_shapes,
)
from semantic_segmentation.describe import main as data_command
from semantic_segmentation.loaders import build_loaders
from semantic_segmentation.train import main
from semantic_segmentation.tune import main as tune
from semantic_segmentation.utils.seed import seed_worker


def test_shapes_are_drawn_the_same_from_the_fixed_seed():
    images, masks = synthetic_shapes(50)
    again, again_masks = synthetic_shapes(50)
    assert np.array_equal(images, again) and np.array_equal(masks, again_masks)
    assert images.shape == (50, 32, 32, 3) and masks.shape == (50, 32, 32)
    assert set(np.unique(masks)) == {0, 1, 2, 3}  # background, circle, square, triangle
    assert all((mask > 0).any() for mask in masks)  # every image holds a shape


def test_shapes_split_is_fixed_and_masks_are_class_ids(cfg):
    first = build_datasets(cfg)
    again = build_datasets(load_config(["--seed", "7"]))
    assert first.fingerprint == again.fingerprint  # the split does not move with --seed
    assert (len(first.train), len(first.val)) == (1600, 400)
    assert first.preprocess.class_names == ("background", "circle", "square", "triangle")
    assert first.train.targets.dtype == torch.long
    assert first.train.targets.shape == (1600, 32, 32)
    assert set(first.val_targets.unique().tolist()) == {0, 1, 2, 3}


def test_shapes_are_normalised_with_training_statistics(cfg):
    inputs = build_datasets(cfg).train.inputs
    assert torch.allclose(inputs.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-3)
    assert torch.allclose(inputs.std(dim=(0, 2, 3)), torch.ones(3), atol=1e-2)


def test_an_empty_data_dir_argument_means_the_synthetic_shapes():
    assert load_config(["--data_dir", "none"]).data_dir is None


def test_preprocess_round_trips_through_json(tmp_path, cfg):
    preprocess = build_datasets(cfg).preprocess
    preprocess.save(tmp_path / "preprocess.json")
    assert Preprocess.load(tmp_path / "preprocess.json") == preprocess


def test_image_size_must_survive_the_unet_halvings():
    with pytest.raises(ConfigError, match="--image_size: got 20, expected a multiple of 2"):
        load_config(["--image_size", "20", "--depth", "3"])


def test_folder_uses_the_same_preprocessing(tmp_path, make_segmentation_folder):
    root = make_segmentation_folder(tmp_path / "shapes", suffix=".jpg")
    cfg = load_config(["--data_dir", str(root), "--image_size", "16", "--image_channels", "1"])
    data = build_datasets(cfg)
    assert data.preprocess.class_names == ("0", "1", "2", "3")  # inferred from the masks
    image, mask = data.train[0]
    assert image.shape == (1, 16, 16) and mask.shape == (16, 16) and mask.dtype == torch.long
    path = data.train.paths[0]
    with Image.open(path) as decoded:
        assert torch.equal(image, data.preprocess(decoded))
    with Image.open(root / "masks" / f"{path.stem}.png") as decoded:
        assert torch.equal(mask, data.preprocess.mask(decoded).long())
        # Nearest neighbour picks pixels, never blends two classes into a third id.
        assert set(mask.unique().tolist()) <= set(np.unique(np.asarray(decoded)).tolist())


def test_num_classes_can_be_given_for_classes_the_masks_lack(tmp_path, make_segmentation_folder):
    root = make_segmentation_folder(tmp_path / "shapes")
    cfg = load_config(["--data_dir", str(root), "--num_classes", "6"])
    assert len(build_datasets(cfg).preprocess.class_names) == 6


def test_training_on_a_folder(short_run, tmp_path, make_segmentation_folder):
    root = make_segmentation_folder(tmp_path / "shapes")
    fields = ["--data_dir", str(root), "--image_size", "16", "--num_workers", "0"]
    summary = main(short_run(*fields, "--batch_size", "8", "--epochs", "1"))
    assert summary["steps"] == 2  # 19 training images make 2 full batches of 8
    assert 0 <= summary["value"] <= 1


def test_loader_workers_are_seeded_and_persistent(tmp_path, make_segmentation_folder):
    root = make_segmentation_folder(tmp_path / "shapes")
    cfg = load_config(["--data_dir", str(root), "--num_workers", "2", "--batch_size", "8"])
    data_generator = torch.Generator().manual_seed(0)
    train_loader, val_loader = build_loaders(
        cfg, build_datasets(cfg), torch.device("cpu"), data_generator
    )
    assert train_loader.num_workers == 2 and train_loader.persistent_workers
    assert train_loader.worker_init_fn is seed_worker  # tested in test_loaders.py
    assert train_loader.generator is data_generator  # the run's: its seed, and resumed
    assert train_loader.batch_sampler.drop_last and not val_loader.batch_sampler.drop_last


def _break(root, problem):
    """Damage a good folder in one way; return the path the error must name."""
    masks = root / "masks"
    if problem == "missing":
        return root / "no-such-folder"
    if problem == "no_masks_folder":
        for path in masks.iterdir():
            path.unlink()
        masks.rmdir()
        return "masks/"
    if problem == "one_image":
        for path in sorted((root / "images").iterdir())[1:]:
            path.unlink()
        return root / "images"
    if problem == "image_without_mask":
        (masks / "003.png").unlink()
        return root / "images" / "003.png"
    if problem == "mask_of_another_size":
        Image.new("L", (16, 16)).save(masks / "004.png")
        return masks / "004.png"
    if problem == "rgb_mask":
        Image.new("RGB", (32, 32)).save(masks / "005.png")
        return masks / "005.png"
    if problem == "class_out_of_range":
        Image.fromarray(np.full((32, 32), 7, dtype=np.uint8)).save(masks / "006.png")
        return masks / "006.png"
    for path in masks.iterdir():  # only_background
        Image.new("L", (32, 32)).save(path)
    return "class 0 only"


@pytest.mark.parametrize(
    ("problem", "message"),
    [
        ("missing", "is not a directory"),
        ("no_masks_folder", "has no 'masks/' folder"),
        ("one_image", "needs at least 2 images, found 1"),
        ("image_without_mask", "has no mask (expected"),
        ("mask_of_another_size", "is 16x16 pixels but its image is 32x32"),
        ("rgb_mask", "has mode RGB; expected a single-channel PNG"),
        ("class_out_of_range", "holds class id 7, outside 0..3 (--num_classes)"),
        ("only_background", "need at least 2 classes"),
    ],
)
def test_bad_data_dir_is_a_one_line_error_naming_the_file(
    tmp_path, make_segmentation_folder, problem, message
):
    root = make_segmentation_folder(tmp_path / "shapes", count=8)
    named = _break(root, problem)
    argv = ["--data_dir", str(named if problem == "missing" else root), "--num_classes", "4"]
    with pytest.raises(ConfigError) as error:
        build_datasets(load_config(argv))
    text = str(error.value)
    assert text.startswith("--data_dir: ") and "\n" not in text
    assert message in text and str(named) in text


def test_a_name_that_is_not_utf8_is_refused_in_one_line_naming_it(
    tmp_path, make_segmentation_folder, short_run
):
    """An image and its mask named in another encoding (Latin-1's é is the byte 0xe9) once
    stopped training and the data command with "UnicodeEncodeError: surrogates not allowed"."""
    root = make_segmentation_folder(tmp_path / "shapes", count=8)
    name = os.fsdecode(b"caf\xe9.png")
    try:
        for folder in ("images", "masks"):
            (root / folder / "003.png").rename(root / folder / name)
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    args = short_run("--data_dir", str(root), "--num_classes", "4", "--batch_size", "2")
    shown = f"{root}/images/caf\\xe9.png"
    expected = f"error: --data_dir: '{shown}': its name is not UTF-8 (byte 0xe9); rename it"
    for command in (data_command, main):
        assert refusal(command, args).startswith(expected)
    assert not (tmp_path / "run").exists()  # refused before anything is written


@pytest.mark.parametrize("broken", ["images/007.png", "masks/005.png"])
def test_a_file_that_cannot_be_read_is_refused_in_one_line_or_skipped(
    tmp_path, make_segmentation_folder, short_run, capsys, broken
):
    root = make_segmentation_folder(tmp_path / "shapes", count=8)
    path = root / broken
    path.write_bytes(path.read_bytes()[:60])  # cut short, as by an interrupted copy
    fields = ["--data_dir", str(root), "--num_classes", "4", "--batch_size", "2"]
    message = refusal(main, short_run(*fields))
    assert message.startswith(f"error: 1 of 16 files cannot be read as images (the first: '{path}'")
    assert message.endswith("--skip_bad_files true to train without them")
    assert "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # refused before anything is written
    assert main(short_run(*fields, "--skip_bad_files", "true", "--max_steps", "1"))["steps"] == 1
    assert "skipping 1 of 16 files that cannot be read as images" in capsys.readouterr().err


def test_tune_sweeps_batch_size_only_on_the_in_memory_shapes():
    argv = ["--workers", "0,2", "--batch_sizes", "8", "--steps", "2", "--num_images", "40"]
    results = tune([*argv, "--image_size", "16"])
    assert [row["num_workers"] for row in results] == [0]
