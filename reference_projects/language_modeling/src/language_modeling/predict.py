"""Score text with a trained model: bits per character, measured as evaluation measures them.

    python -m language_modeling.predict outputs/run/model notes.txt [...]

Loads model/ as training wrote it: the weights, the config that shaped the network and the
preprocessing (bytes, context). Prints each file's bits per character: how many bits a
compressor driven by this model would spend per character of it, lower where the text
resembles the training text. To generate text instead, see sample.py.
"""

import sys
from pathlib import Path

import torch
from torch import nn

from . import task
from .data import Preprocess, windows
from .model_folder import ModelFolderError, load_trained
from .utils.cli import Parser

BATCH = 64  # windows scored per forward pass


@torch.inference_mode()
def predict(model: nn.Module, preprocess: Preprocess, texts: list[str]) -> list[float]:
    """Bits per character of each text, scored as the validation split is: windows of
    `context` bytes that do not overlap, every byte after the first predicted once."""
    scores = []
    for text in texts:
        ids = preprocess.encode(text)
        if len(ids) < 2:
            raise ValueError(f"text of {len(ids)} bytes: scoring needs at least 2")
        data = windows(ids, preprocess.context, stride=preprocess.context, pad=True)
        metrics = task.Metrics(torch.device("cpu"), preprocess)
        for start in range(0, len(data), BATCH):
            batch = slice(start, start + BATCH)
            metrics.update(model(data.inputs[batch]), data.targets[batch])
        scores.append(metrics.compute()[task.METRIC])
    return scores


def main(argv: list[str] | None = None) -> None:
    parser = Parser("predict", "Score text files with a trained model, in bits per character.")
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="a training run's model/ folder")
    parser.add_argument("paths", metavar="FILE", nargs="+", help="UTF-8 text files to score")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        model, preprocess = load_trained(args.model_dir)
    except ModelFolderError as error:
        raise SystemExit(f"error: {error}") from None
    for path in args.paths:
        try:
            (score,) = predict(model, preprocess, [Path(path).read_text(encoding="utf-8")])
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise SystemExit(f"error: {path}: {error}") from None
        print(f"{path}\t{score:.4f} bits/char")


if __name__ == "__main__":
    main()
