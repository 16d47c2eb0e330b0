"""Data: scikit-learn's digits, or your own images in one folder per class.

The embedded dataset is scikit-learn's copy of the UCI handwritten digits (1,797 grayscale
8x8 images, 10 classes), installed with scikit-learn, so nothing is downloaded. With
`--data_dir DIR`, DIR holds one sub-folder per class (DIR/cat/*.png, DIR/dog/*.jpg).
Both go through the same `Preprocess` (preprocess.py), which is saved with the model for
inference.
"""

from pathlib import Path

import numpy as np
import torch
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import Dataset

from .config import FAST_DEV_RUN_VAL_BATCHES, ConfigError, TrainConfig
from .images import describe_files, load_image, readable, refuse_names_not_utf8
from .loaders import (
    SPLIT_SEED,
    Datasets,
    TensorData,
    class_table,
    fingerprint,
    first_batches_only,
    first_validation_batches,
)
from .preprocess import Preprocess

IMAGE_SUFFIXES = {".bmp", ".gif", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp"}
# Images decoded to estimate the normalisation constants of a folder dataset.
STATS_SAMPLE = 512


class ImageFolderData(Dataset):
    """Images decoded on demand (in loader workers), for datasets too large to preload."""

    def __init__(self, paths: list[Path], targets: list[int], preprocess: Preprocess):
        self.paths, self.targets, self.preprocess = paths, targets, preprocess

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.preprocess(load_image(self.paths[index])), self.targets[index]

    def first(self, size: int) -> "ImageFolderData":
        return ImageFolderData(self.paths[:size], self.targets[:size], self.preprocess)


def build_datasets(cfg: TrainConfig) -> Datasets:
    datasets = _digits(cfg) if cfg.data_dir is None else _image_folder(cfg, Path(cfg.data_dir))
    if cfg.overfit_batches:
        datasets = first_batches_only(datasets, cfg.overfit_batches * cfg.batch_size)
    if cfg.fast_dev_run:
        datasets = first_validation_batches(datasets, FAST_DEV_RUN_VAL_BATCHES, cfg.batch_size)
    return datasets


def describe(datasets: Datasets) -> list[str]:
    """The data command's lines on this data: class balance, and the files of a folder."""
    names = datasets.preprocess.class_names
    lines = class_table(names, datasets.train_targets, datasets.val_targets, "images")
    if isinstance(datasets.train, ImageFolderData):
        lines += describe_files([*datasets.train.paths, *datasets.val.paths])
    return lines


def _digits(cfg: TrainConfig) -> Datasets:
    digits = load_digits()
    # Pixel values are 0..16; as 8-bit images they take the same path as user images.
    images = [Image.fromarray(np.uint8(im * 255 / 16)) for im in digits.images]
    labels = digits.target.astype(np.int64)
    train_idx, val_idx = stratified_split(labels, cfg.val_fraction)
    names = tuple(str(name) for name in digits.target_names)
    preprocess = _preprocess(cfg, names, (images[i] for i in train_idx))
    inputs = torch.stack([preprocess(image) for image in images])
    targets = torch.from_numpy(labels)
    return Datasets(
        train=TensorData(inputs[train_idx], targets[train_idx]),
        val=TensorData(inputs[val_idx], targets[val_idx]),
        preprocess=preprocess,
        train_targets=targets[train_idx],
        val_targets=targets[val_idx],
        fingerprint=fingerprint(inputs.numpy().tobytes(), train_idx, val_idx),
    )


def _image_folder(cfg: TrainConfig, root: Path) -> Datasets:
    class_dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    paths, labels = [], []
    for label, class_dir in enumerate(class_dirs):
        for path in sorted(class_dir.rglob("*")):
            if path.suffix.lower() in IMAGE_SUFFIXES:
                paths.append(path)
                labels.append(label)
    refuse_names_not_utf8(root, [*class_dirs, *paths])
    suffixes = ", ".join(sorted(IMAGE_SUFFIXES))
    if not paths:
        raise ConfigError(
            f"--data_dir: '{root}' holds no images; expected one sub-folder per class "
            f"with files ending in {suffixes}"
        )
    kept = readable(paths, cfg.skip_bad_files)
    paths, labels = [paths[i] for i in kept], [labels[i] for i in kept]
    counts = np.bincount(labels, minlength=len(class_dirs))
    if len(class_dirs) < 2 or counts.min() < 2:
        raise ConfigError(
            f"--data_dir: '{root}' needs at least 2 class folders with at least 2 images "
            f"each; found {dict(zip((d.name for d in class_dirs), counts.tolist(), strict=True))}"
        )
    labels_np = np.asarray(labels, dtype=np.int64)
    train_idx, val_idx = stratified_split(labels_np, cfg.val_fraction)
    names = tuple(d.name for d in class_dirs)
    sample = (load_image(paths[i]) for i in train_idx[:STATS_SAMPLE])
    preprocess = _preprocess(cfg, names, sample)
    listing = "\n".join(f"{p.relative_to(root)}:{p.stat().st_size}" for p in paths)
    return Datasets(
        train=ImageFolderData(
            [paths[i] for i in train_idx], labels_np[train_idx].tolist(), preprocess
        ),
        val=ImageFolderData([paths[i] for i in val_idx], labels_np[val_idx].tolist(), preprocess),
        preprocess=preprocess,
        train_targets=torch.from_numpy(labels_np[train_idx]),
        val_targets=torch.from_numpy(labels_np[val_idx]),
        fingerprint=fingerprint(listing.encode(), train_idx, val_idx),
    )


def stratified_split(labels: np.ndarray, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    indices = np.arange(len(labels))
    train_idx, val_idx = train_test_split(
        indices, test_size=val_fraction, stratify=labels, random_state=SPLIT_SEED
    )
    return np.sort(train_idx), np.sort(val_idx)


def _preprocess(cfg: TrainConfig, names: tuple[str, ...], training_images) -> Preprocess:
    """With --pretrained, the model's own input size and normalisation (pretrained.py); else
    the configured size, normalised with the statistics of `training_images` (an iterable,
    only read here)."""
    if cfg.pretrained is not None:
        from .pretrained import pretrained_preprocess  # imports Transformers: only when used

        return pretrained_preprocess(cfg.pretrained, names)
    plain = Preprocess(cfg.image_size, cfg.image_channels, class_names=names)
    pixels = torch.stack([plain.to_unit_range(image) for image in training_images])
    return _fit_normalisation(plain, pixels)


def _fit_normalisation(plain: Preprocess, pixels: torch.Tensor) -> Preprocess:
    """Per-channel mean and std of training pixels (N, C, H, W), never of validation ones."""
    mean = pixels.mean(dim=(0, 2, 3))
    std = pixels.std(dim=(0, 2, 3)).clamp_min(1e-6)
    return Preprocess(
        plain.image_size,
        plain.image_channels,
        mean=tuple(round(v, 6) for v in mean.tolist()),
        std=tuple(round(v, 6) for v in std.tolist()),
        class_names=plain.class_names,
    )


if __name__ == "__main__":  # the data command: see describe.py
    from .describe import main

    main()
