"""Generate text with a trained model.

    python -m language_modeling.sample outputs/run/model [--prompt TEXT]
        [--length N] [--temperature T] [--top_k K] [--seed S]

Feeds the prompt's bytes to the model and draws one byte at a time from its prediction,
each drawn byte appended to the input; the model sees the last `context` bytes. Prints
the prompt followed by what was generated.
"""

import logging
import sys

import torch
from torch import nn

from .data import Preprocess
from .model_folder import ModelFolderError, load_trained
from .utils.cli import Parser, at_least

log = logging.getLogger(__name__)


@torch.inference_mode()
def generate(
    model: nn.Module,
    preprocess: Preprocess,
    prompt: str,
    length: int,
    temperature: float = 1.0,
    top_k: int = 0,
    generator: torch.Generator | None = None,
) -> str:
    """`length` bytes that follow `prompt`, decoded (a character cut at the end shows as
    U+FFFD). temperature 0 takes the most likely byte; top_k > 0 draws among the k likeliest."""
    ids = preprocess.encode(prompt)
    if len(ids) > preprocess.context:
        log.warning(
            "the prompt is %d bytes, longer than the model's context: its first %d are cut",
            len(ids),
            len(ids) - preprocess.context,
        )
    ids = ids[-preprocess.context :][None]  # (1, T)
    new = []
    for _ in range(length):
        logits = model(ids)[0, -1].float()  # (vocab_size,): the byte after the last
        if temperature == 0:
            byte = logits.argmax(dim=0, keepdim=True)
        else:
            logits = logits / temperature
            if top_k:
                kth = logits.topk(min(top_k, len(logits))).values[-1]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            byte = torch.multinomial(logits.softmax(dim=0), 1, generator=generator)
        new.append(byte.item())
        ids = torch.cat([ids, byte[None]], dim=1)[:, -preprocess.context :]
    return preprocess.decode(new)


def main(argv: list[str] | None = None) -> str:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if not args.prompt:
        raise SystemExit("error: --prompt: got '', expected text for the model to continue")
    try:
        model, preprocess = load_trained(args.model_dir)
    except ModelFolderError as error:
        raise SystemExit(f"error: {error}") from None
    generator = torch.Generator().manual_seed(args.seed)
    text = generate(
        model, preprocess, args.prompt, args.length, args.temperature, args.top_k, generator
    )
    print(args.prompt + text)
    return text


def _parser() -> Parser:
    parser = Parser("sample", "Generate text with a trained model.")
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="model/ of a training run")
    parser.add_argument(
        "--prompt", default="\n", help="text to continue; non-empty (default: a newline)"
    )
    parser.add_argument(
        "--length", type=at_least(1, int), default=500, help="bytes to generate (default: 500)"
    )
    parser.add_argument(
        "--temperature",
        type=at_least(0, float),
        default=0.8,
        help="divides the logits: < 1 safer, > 1 more varied, 0 always the likeliest byte "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--top_k",
        type=at_least(0, int),
        default=0,
        help="draw among the k likeliest bytes only; 0: all (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=at_least(0, int), default=0, help="seeds the draws (default: 0)"
    )
    return parser


if __name__ == "__main__":
    main()
