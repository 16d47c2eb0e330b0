"""Fine-tuning a pretrained Hugging Face model: `--pretrained MODEL` (a Hub id or a folder).

The backbone, its tokenizer and its config come from the source (hub.py reads it). A new
classification head, sized from the data's classes, replaces the model's own. The tokenizer
(tokenizer.json) and the model's config go into model/preprocess.json, so predict and export
rebuild the network without the source.
"""

import json
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from .config import ConfigError, TrainConfig
from .hub import BackboneClassifier, build_network, read_config
from .utils.errors import first_line
from .utils.files import write_json

# isort: split
# Only once hub.py has said in one line that Transformers is missing, if it is.
from tokenizers import Tokenizer
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)


@dataclass(frozen=True)
class PretrainedTokens:
    """Text -> token ids with the pretrained model's own tokenizer: the one tokenization.

    Saved whole (tokenizer.json's content and the model's config.json) into model/, so any
    `tokenizers` library, in Python or not, tokenizes exactly as training did.
    """

    max_length: int  # tokens kept per text, the special ones ([CLS], [SEP]) included
    class_names: tuple[str, ...]
    pad_id: int  # the padding token's id: the model attends to every other token
    tokenizer: dict[str, Any] = field(repr=False)
    architecture: dict[str, Any] = field(repr=False)  # the model's config.json
    # Where the pretrained weights come from; None: the architecture alone (predict and
    # export load trained weights into it). Not saved: model/ does not need the source.
    weights_from: str | None = field(default=None, compare=False)

    @classmethod
    def from_source(cls, source: str, max_length: int, class_names: tuple[str, ...]):
        """The tokenizer and config of `source` (a Hub id or a folder), checked for this task."""
        config = read_config(source)
        _check_kind(config, source)
        positions = getattr(config, "max_position_embeddings", None)
        if positions is not None and max_length > positions:
            raise ConfigError(
                f"--max_length: got {max_length}, but '{source}' reads at most {positions} tokens"
            )
        if max_length < 3:
            raise ConfigError(
                f"--max_length: got {max_length}, expected at least 3 with --pretrained: the "
                "tokenizer adds its own tokens around each text ([CLS] and [SEP] for BERT)"
            )
        missing = (
            f"--pretrained: '{source}' holds no usable tokenizer; a model folder needs the "
            "tokenizer it was trained with (tokenizer.json, or its vocabulary files)"
        )
        try:
            tokenizer = AutoTokenizer.from_pretrained(source)
            backend = tokenizer.backend_tokenizer
        except (OSError, ValueError, TypeError, AttributeError) as error:
            reason = first_line(error, 120)
            raise ConfigError(f"{missing} ({reason})") from None
        # Without its files, Transformers builds a tokenizer of the special tokens alone,
        # which would read every word as unknown.
        if backend.get_vocab_size() <= len(set(tokenizer.all_special_ids)):
            raise ConfigError(missing)
        if tokenizer.pad_token_id is None:
            raise ConfigError(
                f"--pretrained: the tokenizer of '{source}' has no padding token; batches of "
                "texts of different lengths need one (encoder models such as BERT have it)"
            )
        content = json.loads(backend.to_str())
        content["padding"] = content["truncation"] = None  # set per use, not by the source
        return cls(
            max_length,
            class_names,
            tokenizer.pad_token_id,
            content,
            config.to_dict(),
            weights_from=source,
        )

    @cached_property
    def _encoder(self) -> Tokenizer:
        encoder = Tokenizer.from_str(json.dumps(self.tokenizer))
        encoder.enable_truncation(self.max_length)
        return encoder

    @property
    def vocabulary_size(self) -> int:
        return self._encoder.get_vocab_size()

    def __call__(self, text: str) -> list[int]:
        return self._encoder.encode(text).ids

    def truncated(self, texts: list[str]) -> int:
        """How many of `texts` are longer than max_length tokens."""
        return sum(bool(encoding.overflowing) for encoding in self._encoder.encode_batch(texts))

    def save(self, path: Path) -> None:
        content = {k: v for k, v in asdict(self).items() if k != "weights_from"}
        write_json(path, content, allow_nan=False)  # atomically, as the other preprocessing


class PretrainedClassifier(BackboneClassifier):
    """(B, T) token ids, pad_id for padding -> (B, num_classes) logits, from the backbone.

    `network` is a Transformers model for sequence classification: the pretrained backbone
    (`network.base_model`) and a new head sized for the classes.
    """

    def __init__(self, network: nn.Module, pad_id: int):
        super().__init__(network)
        self.pad_id = pad_id

    def forward(self, tokens: Tensor) -> Tensor:
        attention_mask = (tokens != self.pad_id).long()  # one tensor in, as for every model
        return self.network(input_ids=tokens, attention_mask=attention_mask).logits


def build_pretrained(cfg: TrainConfig, preprocess: PretrainedTokens) -> PretrainedClassifier:
    """The pretrained model with a new head for the classes of `preprocess`: its weights from
    `weights_from` when set (training), else loaded afterwards (predict, export)."""
    network = build_network(
        AutoModelForSequenceClassification,
        preprocess.architecture,
        preprocess.class_names,
        preprocess.weights_from,
    )
    return PretrainedClassifier(network, preprocess.pad_id)


def _check_kind(config, source: str) -> None:
    """Refuse what cannot classify texts: an unknown kind of model, or a causal LM."""
    architectures = ", ".join(config.architectures or []) or config.model_type
    # Decoder-only: Transformers has a causal LM of this kind and no masked LM (BERT has both).
    kind = type(config)
    decoder_only = kind in AutoModelForCausalLM._model_mapping and (
        kind not in AutoModelForMaskedLM._model_mapping
    )
    if decoder_only or getattr(config, "is_decoder", False):
        raise ConfigError(
            f"--pretrained: '{source}' is a causal language model ({architectures}); text "
            "classification fine-tunes an encoder (BERT, RoBERTa, MiniLM, DeBERTa, ...)"
        )
    if type(config) not in AutoModelForSequenceClassification._model_mapping:
        raise ConfigError(
            f"--pretrained: '{source}' is a {config.model_type} model ({architectures}), which "
            "Transformers has no sequence classifier for; choose an encoder such as BERT"
        )
