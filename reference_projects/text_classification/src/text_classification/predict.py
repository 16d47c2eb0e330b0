"""Classify texts with a trained model.

    python -m text_classification.predict outputs/run/model "Not bad." [...]
    python -m text_classification.predict outputs/run/model --file texts.txt

Loads model/ as training wrote it: the weights, the config that shaped the network, and the
vocabulary built from the training texts, so inference tokenizes as training did. Prints
one line per text: the label, a tab, the text.
"""

import logging
import sys
from pathlib import Path

import torch
from torch import nn

from .data import Preprocess, pad_batch
from .model_folder import ModelFolderError, load_trained
from .utils.cli import Parser

log = logging.getLogger(__package__)
BATCH_SIZE = 256  # texts per forward pass: bounds memory for a long file


@torch.inference_mode()
def predict(model: nn.Module, preprocess: Preprocess, texts: list[str]) -> list[str]:
    """The label of each text; texts longer than max_length tokens are truncated, as in training."""
    long = preprocess.truncated(texts)
    if long:
        log.warning(
            "truncated %d of %d texts to %d tokens", long, len(texts), preprocess.max_length
        )
    labels = []
    for start in range(0, len(texts), BATCH_SIZE):
        samples = [
            (torch.tensor(preprocess(text), dtype=torch.long), torch.tensor(0))
            for text in texts[start : start + BATCH_SIZE]
        ]
        tokens, _ = pad_batch(samples, preprocess.pad_id)
        labels += [preprocess.class_names[i] for i in model(tokens).argmax(dim=1).tolist()]
    return labels


def main(argv: list[str] | None = None) -> None:
    parser = Parser("predict", "Classify texts with a trained model.")
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="a training run's model/ folder")
    parser.add_argument("texts", metavar="TEXT", nargs="*", help="texts (after --: any text)")
    parser.add_argument("--file", metavar="PATH", help="a UTF-8 file of texts, one a line")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if bool(args.texts) == bool(args.file):
        parser.error("give texts or --file PATH, not both and not neither")
    if args.file:
        try:
            lines = Path(args.file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise SystemExit(f"error: --file '{args.file}': cannot read it ({error})") from None
        texts = [line for line in lines if line.strip()]
    else:
        texts = args.texts
    if not texts or not all(text.strip() for text in texts):
        raise SystemExit("error: every text must have at least one non-space character")
    try:
        model, preprocess = load_trained(args.model_dir)
    except ModelFolderError as error:
        raise SystemExit(f"error: {error}") from None
    for text, label in zip(texts, predict(model, preprocess, texts), strict=True):
        print(f"{label}\t{text}")


if __name__ == "__main__":
    main()
