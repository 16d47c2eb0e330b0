"""Data: synthetic shapes drawn from a fixed seed, or your own images with their masks.

The embedded dataset is generated, never downloaded: `synthetic_shapes` draws 32x32 RGB
images of noisy backgrounds holding circles, squares and triangles of random size, position
and colour, and a mask that labels every pixel background (0), circle (1), square (2) or
triangle (3). The same seed draws the same images on every machine, so runs are comparable
and resume exactly. With `--data_dir DIR`, DIR holds `images/` and `masks/`: each mask a
single-channel PNG of class ids with the stem of its image (images/a.jpg -> masks/a.png).
Both go through the same `Preprocess`, which is saved with the model for inference.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
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
from .utils.files import write_json

SHAPE_CLASSES = ("background", "circle", "square", "triangle")
SHAPES_SEED = 0  # part of the dataset's definition, like the split: it does not move with --seed
SHAPES_SIZE = 32  # side in pixels of the generated images; Preprocess resizes to image_size
IMAGE_SUFFIXES = {".bmp", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp"}
# Images decoded to estimate the normalisation constants of a folder dataset.
STATS_SAMPLE = 512

# How an image becomes the network's input (model.json names both for code without ours).
RESAMPLE = Image.Resampling.BILINEAR
PIXEL_MAX = 255.0  # 8-bit pixels to [0, 1]


@dataclass(frozen=True)
class Preprocess:
    """PIL image -> normalised float tensor (C, H, W), PIL mask -> class ids (H, W): the one
    definition of preprocessing, shared by training, prediction and export."""

    image_size: int
    image_channels: int
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    class_names: tuple[str, ...] = SHAPE_CLASSES  # class id -> name; its length sizes the model

    def __call__(self, image: Image.Image) -> torch.Tensor:
        pixels = self.to_unit_range(image)
        mean = torch.tensor(self.mean).view(-1, 1, 1)
        std = torch.tensor(self.std).view(-1, 1, 1)
        return (pixels - mean) / std

    @property
    def mode(self) -> str:
        """The PIL mode every image is converted to (an alpha channel is dropped, a palette
        looked up, grey repeated or colours weighted into grey)."""
        return "L" if self.image_channels == 1 else "RGB"

    def to_unit_range(self, image: Image.Image) -> torch.Tensor:
        image = image.convert(self.mode)
        size = (self.image_size, self.image_size)
        if image.size != size:
            image = image.resize(size, RESAMPLE)  # the whole image: no crop, aspect not kept
        array = np.asarray(image, dtype=np.float32) / PIXEL_MAX  # (H, W) or (H, W, C)
        return torch.from_numpy(array).reshape(*size, self.image_channels).permute(2, 0, 1)

    def mask(self, mask: Image.Image) -> torch.Tensor:
        """Class ids (H, W) as uint8; nearest-neighbour resizing never invents a class."""
        size = (self.image_size, self.image_size)
        if mask.size != size:
            mask = mask.resize(size, Image.Resampling.NEAREST)
        return torch.from_numpy(np.array(mask, dtype=np.uint8))

    def save(self, path: Path) -> None:
        # allow_nan=False: strict JSON, never Infinity or NaN, which other readers refuse.
        write_json(path, asdict(self), allow_nan=False)  # atomically

    @classmethod
    def load(cls, path: Path) -> "Preprocess":
        fields = json.loads(path.read_text())
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})


class SegmentationFolderData(Dataset):
    """Images decoded on demand (in loader workers); masks were read and checked up front."""

    def __init__(self, paths: list[Path], masks: torch.Tensor, preprocess: Preprocess):
        self.paths, self.masks, self.preprocess = paths, masks, preprocess

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.preprocess(load_image(self.paths[index])), self.masks[index].long()

    def first(self, size: int) -> "SegmentationFolderData":
        return SegmentationFolderData(self.paths[:size], self.masks[:size], self.preprocess)


def build_datasets(cfg: TrainConfig) -> Datasets:
    if cfg.data_dir is None:
        datasets = _shapes(cfg)
    else:
        datasets = _segmentation_folder(cfg, Path(cfg.data_dir))
    if cfg.overfit_batches:
        datasets = first_batches_only(datasets, cfg.overfit_batches * cfg.batch_size)
    if cfg.fast_dev_run:
        datasets = first_validation_batches(datasets, FAST_DEV_RUN_VAL_BATCHES, cfg.batch_size)
    return datasets


def describe(datasets: Datasets) -> list[str]:
    """The data command's lines on this data: pixels per class, and the files of a folder."""
    names = datasets.preprocess.class_names
    lines = class_table(names, datasets.train_targets, datasets.val_targets, "pixels")
    if isinstance(datasets.train, SegmentationFolderData):
        lines += describe_files([*datasets.train.paths, *datasets.val.paths])
    return lines


# --- the embedded dataset


def synthetic_shapes(count: int, seed: int = SHAPES_SEED) -> tuple[np.ndarray, np.ndarray]:
    """`count` images (N, 32, 32, 3) uint8 and their masks (N, 32, 32) uint8 of class ids.

    Each image has a background of one random colour plus Gaussian noise, and 1 to 3 shapes
    of a random class, size, position and colour; a later shape covers an earlier one, in the
    mask as in the image. Colour says nothing about the class: only the outline does.
    """
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:SHAPES_SIZE, :SHAPES_SIZE].astype(np.float32) + 0.5  # pixel centres
    images = np.empty((count, SHAPES_SIZE, SHAPES_SIZE, 3), dtype=np.uint8)
    masks = np.zeros((count, SHAPES_SIZE, SHAPES_SIZE), dtype=np.uint8)
    for index in range(count):
        background = rng.uniform(0, 255, 3)
        canvas = np.broadcast_to(background, (SHAPES_SIZE, SHAPES_SIZE, 3)).copy()
        for _ in range(rng.integers(1, 4)):
            label = int(rng.integers(1, len(SHAPE_CLASSES)))
            radius = rng.uniform(5, 10)
            cy, cx = rng.uniform(radius, SHAPES_SIZE - radius, 2)
            inside = _shape(label, y - cy, x - cx, radius)
            colour = rng.uniform(0, 255, 3)
            while np.abs(colour - background).max() < 60:  # visible against the background
                colour = rng.uniform(0, 255, 3)
            canvas[inside] = colour
            masks[index][inside] = label
        canvas += rng.normal(0, 12, canvas.shape)
        images[index] = np.clip(canvas, 0, 255).round().astype(np.uint8)
    return images, masks


def _shape(label: int, dy: np.ndarray, dx: np.ndarray, radius: float) -> np.ndarray:
    """Pixels inside a circle (1), square (2) or upright triangle (3) of this radius."""
    if label == 1:
        return dy**2 + dx**2 <= radius**2
    if label == 2:
        half = radius * 0.85  # about the circle's area
        return (np.abs(dy) <= half) & (np.abs(dx) <= half)
    # Equilateral, apex up, inscribed in a circle 1.25 times wider (to match the others'
    # areas): the pixels below each of its three edges' lines.
    r = radius * 1.25
    return (dy <= r / 2) & (np.sqrt(3) * dx - dy <= r) & (-np.sqrt(3) * dx - dy <= r)


def _shapes(cfg: TrainConfig) -> Datasets:
    pixels, labels = synthetic_shapes(cfg.num_images)
    images = [Image.fromarray(array) for array in pixels]
    train_idx, val_idx = split(len(images), cfg.val_fraction)
    plain = Preprocess(cfg.image_size, cfg.image_channels)
    unit = torch.stack([plain.to_unit_range(image) for image in images])
    preprocess = _fit_normalisation(plain, unit[train_idx])
    inputs = torch.stack([preprocess(image) for image in images])
    targets = torch.stack([preprocess.mask(Image.fromarray(mask)) for mask in labels]).long()
    return Datasets(
        train=TensorData(inputs[train_idx], targets[train_idx]),
        val=TensorData(inputs[val_idx], targets[val_idx]),
        preprocess=preprocess,
        train_targets=targets[train_idx],
        val_targets=targets[val_idx],
        fingerprint=fingerprint(inputs.numpy().tobytes(), train_idx, val_idx),
    )


# --- your own data


def _segmentation_folder(cfg: TrainConfig, root: Path) -> Datasets:
    paths = _readable_pairs(_pair_images_with_masks(root), cfg.skip_bad_files)
    plain = Preprocess(cfg.image_size, cfg.image_channels)
    masks, num_classes = _read_masks(paths, cfg.num_classes, plain)
    train_idx, val_idx = split(len(paths), cfg.val_fraction)
    names = tuple(str(i) for i in range(num_classes))
    plain = Preprocess(cfg.image_size, cfg.image_channels, class_names=names)
    sample = train_idx[:STATS_SAMPLE]
    pixels = torch.stack([plain.to_unit_range(load_image(paths[i][0])) for i in sample])
    preprocess = _fit_normalisation(plain, pixels)
    images = [image for image, _ in paths]
    listing = "\n".join(f"{p.relative_to(root)}:{p.stat().st_size}" for pair in paths for p in pair)
    return Datasets(
        train=SegmentationFolderData([images[i] for i in train_idx], masks[train_idx], preprocess),
        val=SegmentationFolderData([images[i] for i in val_idx], masks[val_idx], preprocess),
        preprocess=preprocess,
        train_targets=masks[train_idx].long(),
        val_targets=masks[val_idx].long(),
        fingerprint=fingerprint(listing.encode(), train_idx, val_idx),
    )


def _pair_images_with_masks(root: Path) -> list[tuple[Path, Path]]:
    """(image, mask) paths, matched by file stem; any image without a mask is an error."""
    image_dir, mask_dir = root / "images", root / "masks"
    for folder in (image_dir, mask_dir):
        if not folder.is_dir():
            raise ConfigError(
                f"--data_dir: '{root}' has no '{folder.name}/' folder; expected images/ "
                "and masks/ (single-channel PNGs of class ids, named like their images)"
            )
    images = sorted(p for p in image_dir.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    masks = {p.stem: p for p in mask_dir.iterdir() if p.suffix.lower() == ".png"}
    refuse_names_not_utf8(root, images)  # a mask's name is its image's, and .png
    if len(images) < 2:
        raise ConfigError(f"--data_dir: '{image_dir}' needs at least 2 images, found {len(images)}")
    pairs = []
    for image in images:
        if image.stem not in masks:
            expected = mask_dir / f"{image.stem}.png"
            raise ConfigError(f"--data_dir: image '{image}' has no mask (expected '{expected}')")
        pairs.append((image, masks[image.stem]))
    return pairs


def _readable_pairs(pairs: list[tuple[Path, Path]], skip: bool) -> list[tuple[Path, Path]]:
    """The pairs whose image and mask PIL can read (images.readable)."""
    kept = set(readable([path for pair in pairs for path in pair], skip))
    pairs = [pair for index, pair in enumerate(pairs) if {2 * index, 2 * index + 1} <= kept]
    if len(pairs) < 2:
        raise ConfigError(f"--data_dir: {len(pairs)} readable image and mask pairs; need 2")
    return pairs


def _read_masks(
    paths: list[tuple[Path, Path]], num_classes: int, plain: Preprocess
) -> tuple[torch.Tensor, int]:
    """Every mask checked against its image and resized: (N, H, W) uint8, and the class count.

    `num_classes` 0 infers it as the largest class id in any mask + 1.
    """
    masks, largest = [], 0
    for image_path, mask_path in paths:
        with Image.open(image_path) as image:
            image_size = image.size  # read from the header: nothing is decoded
        mask = load_image(mask_path)
        if mask.mode not in ("1", "L", "P", "I;16", "I"):
            raise ConfigError(
                f"--data_dir: mask '{mask_path}' has mode {mask.mode}; expected a "
                "single-channel PNG of class ids (mode L or P)"
            )
        ids = np.asarray(mask)
        if ids.shape[::-1] != image_size:
            raise ConfigError(
                f"--data_dir: mask '{mask_path}' is {ids.shape[1]}x{ids.shape[0]} pixels but "
                f"its image is {image_size[0]}x{image_size[1]}"
            )
        top = int(ids.max()) if ids.min() >= 0 else int(ids.min())  # the id that is wrong
        if not 0 <= top <= 255 or (num_classes and top >= num_classes):
            allowed = num_classes or 256
            raise ConfigError(
                f"--data_dir: mask '{mask_path}' holds class id {top}, outside 0..{allowed - 1}"
                + (" (--num_classes)" if num_classes else "")
            )
        largest = max(largest, top)
        masks.append(plain.mask(Image.fromarray(ids.astype(np.uint8))))
    if largest == 0:
        raise ConfigError("--data_dir: every mask holds class 0 only; need at least 2 classes")
    return torch.stack(masks), num_classes or largest + 1


def split(count: int, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Train and validation indices, fixed by SPLIT_SEED whatever --seed is."""
    train_idx, val_idx = train_test_split(
        np.arange(count), test_size=val_fraction, random_state=SPLIT_SEED
    )
    return np.sort(train_idx), np.sort(val_idx)


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
