"""Data: the documentation that ships with Python, or your own plain text, as UTF-8 bytes.

The embedded corpus is `pydoc_data.topics`, the pages that `help("topics")` shows: about
466 KB of English prose and code from the Python documentation (Python 3.11; other versions
differ a little, and the data fingerprint in run.json tells them apart). It is part of
every CPython installation, so nothing is downloaded. Its licence is that of the Python
documentation (the PSF License Agreement; https://docs.python.org/3/license.html).

With `--data_dir DIR`, the text is every `.txt` file under DIR (UTF-8, searched recursively,
read in sorted order). The model reads bytes: a vocabulary of 256 that needs
no tokenizer and covers any text. The last `val_fraction` of the text is the validation
split, a fixed contiguous region, so no validation sentence leaks into training.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from pydoc_data.topics import topics

import numpy as np
import torch
from torch import Tensor

from .config import FAST_DEV_RUN_VAL_BATCHES, ConfigError, TrainConfig
from .loaders import (
    Datasets,
    TensorData,
    fingerprint,
    first_batches_only,
    first_validation_batches,
)
from .utils.files import write_json

# Targets past the end of the text: F.cross_entropy's ignore_index, never scored.
IGNORE = -100


@dataclass(frozen=True)
class Preprocess:
    """Text <-> byte ids, and the longest sequence the model was built for."""

    context: int  # positions the model sees; longer input keeps its last `context` bytes
    vocab_size: int = 256  # every byte value

    def encode(self, text: str) -> Tensor:
        """(N,) int64 ids: the UTF-8 bytes of `text`."""
        return torch.tensor(list(text.encode("utf-8")), dtype=torch.int64)

    def decode(self, ids: Tensor | list[int]) -> str:
        """Bytes back to text; a sequence cut inside a character shows U+FFFD for it."""
        values = ids.tolist() if isinstance(ids, Tensor) else ids
        return bytes(values).decode("utf-8", errors="replace")

    def save(self, path: Path) -> None:
        # allow_nan=False: strict JSON, never Infinity or NaN, which other readers refuse.
        write_json(path, asdict(self), allow_nan=False)  # atomically

    @classmethod
    def load(cls, path: Path) -> "Preprocess":
        return cls(**json.loads(path.read_text()))


def embedded_text() -> str:
    """The Python documentation topics, joined in sorted key order (a fixed order)."""
    return "\n".join(topics[key] for key in sorted(topics))


def build_datasets(cfg: TrainConfig) -> Datasets:
    if cfg.data_dir is None:
        text, source = embedded_text(), "the embedded corpus"
    else:
        text, source = read_text(Path(cfg.data_dir)), f"'{cfg.data_dir}'"
    preprocess = Preprocess(cfg.context)
    ids = preprocess.encode(text)
    if cfg.corpus_bytes:
        ids = ids[: cfg.corpus_bytes]
    train_ids, val_ids = split(ids, cfg.val_fraction)
    if len(train_ids) < cfg.context + 1 or len(val_ids) < 2:
        field = "--data_dir" if cfg.data_dir is not None else "--corpus_bytes"
        raise ConfigError(
            f"{field}: {source} gives {len(ids)} bytes of text, too few for --context "
            f"{cfg.context}: the training split needs at least {cfg.context + 1} bytes and "
            "the validation split at least 2"
        )
    # Training windows overlap by half: twice the windows of a non-overlapping cut, and
    # every byte is seen with two different amounts of context before it. The stride is
    # fixed, so the batch order alone (EpochBatchSampler) makes an epoch's data.
    train = windows(train_ids, cfg.context, stride=max(1, cfg.context // 2))
    # Validation windows do not overlap and the last one is padded: every byte after the
    # first is scored exactly once.
    val = windows(val_ids, cfg.context, stride=cfg.context, pad=True)
    boundaries = np.array([0, len(train_ids)]), np.array([len(train_ids), len(ids)])
    datasets = Datasets(
        train=train,
        val=val,
        preprocess=preprocess,
        train_targets=train_ids,  # the unigram baseline counts bytes of the training text
        val_targets=val.targets.flatten(),  # and scores exactly what evaluation scores
        fingerprint=fingerprint(ids.numpy().astype(np.uint8).tobytes(), *boundaries),
    )
    if cfg.overfit_batches:
        datasets = first_batches_only(datasets, cfg.overfit_batches * cfg.batch_size)
        # The unigram baseline counts the bytes those windows predict.
        datasets.train_targets = datasets.val_targets = datasets.train.targets.flatten()
    if cfg.fast_dev_run:
        datasets = first_validation_batches(datasets, FAST_DEV_RUN_VAL_BATCHES, cfg.batch_size)
    return datasets


def describe(datasets: Datasets) -> list[str]:
    """The data command's lines on this data: bytes and characters of each split's text."""
    lines = []
    for split_name, ids in (("train", datasets.train_targets), ("val", datasets.val_targets)):
        ids = ids[ids != IGNORE]  # the padding of the last validation window
        chars = len(ids) - int(is_continuation(ids).sum())
        lines.append(f"{split_name} text: {len(ids)} bytes, {chars} characters")
    return lines


def split(ids: Tensor, val_fraction: float) -> tuple[Tensor, Tensor]:
    """The text before and after a fixed point: the last val_fraction is for validation.

    The cut moves forward to the start of a character, so no character is split in two.
    """
    cut = int(len(ids) * (1 - val_fraction))
    while cut < len(ids) and is_continuation(ids[cut]):
        cut += 1
    return ids[:cut], ids[cut:]


def is_continuation(ids: Tensor) -> Tensor:
    """True for UTF-8 continuation bytes (0b10xxxxxx): every other byte starts a character."""
    return (ids >= 0) & (ids & 0xC0 == 0x80)


def windows(ids: Tensor, context: int, stride: int, pad: bool = False) -> TensorData:
    """Windows of context + 1 bytes every `stride` bytes: inputs window[:-1], targets
    window[1:], each (N, context). Without `pad` a ragged end is dropped; with it, the last
    window is filled up with IGNORE targets (and byte 0 inputs, which nothing attends to
    that is scored: attention is causal)."""
    if pad:
        count = -(-(len(ids) - 1) // stride)  # windows that cover every target
        fill = torch.full(((count - 1) * stride + context + 1 - len(ids),), IGNORE)
        ids = torch.cat([ids, fill])
    cut = ids.unfold(0, context + 1, stride)  # (N, context + 1), a view
    return TensorData(cut[:, :-1].clamp_min(0).contiguous(), cut[:, 1:].contiguous())


def read_text(folder: Path) -> str:
    """Every .txt file under `folder`, in sorted order, joined by newlines."""
    found = sorted(folder.rglob("*.txt"))
    for path in found:
        if not path.is_file() and not path.is_dir():  # a folder named *.txt is searched too
            problem = (
                "a symbolic link that leads to no file (a loop, or its target is missing)"
                if path.is_symlink()
                else "not a regular file"
            )
            raise ConfigError(
                f"--data_dir: '{path}' is {problem}; every .txt file under --data_dir is read "
                "as training text: replace it with the file, or remove it"
            )
    files = [path for path in found if path.is_file()]
    if not files:
        raise ConfigError(f"--data_dir: '{folder}' holds no .txt files")
    texts = []
    for file in files:
        try:
            raw = file.read_bytes()
        except OSError as error:
            raise ConfigError(f"--data_dir: cannot read '{file}' ({error.strerror})") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ConfigError(
                f"--data_dir: '{file}' is not UTF-8 text (byte 0x{raw[error.start]:02x} at "
                f"offset {error.start}); convert it, e.g. iconv -f latin1 -t utf-8"
            ) from None
        if not text.strip():
            raise ConfigError(f"--data_dir: '{file}' holds no text (it is empty or blank)")
        texts.append(text)
    return "\n".join(texts)


if __name__ == "__main__":  # the data command: see describe.py
    from .describe import main

    main()
