"""Fine-tuning a pretrained Hugging Face model: `--pretrained MODEL` (a Hub id or a folder).

The backbone, its tokenizer and its config come from the Hugging Face Hub (a model id such as
sentence-transformers/all-MiniLM-L6-v2, cached after the first download) or from a local
folder in the same format; with HF_HUB_OFFLINE=1 only what is on disk is used. A new
classification head, sized from the data's classes, replaces the model's own. The tokenizer
(tokenizer.json) and the model's config go into model/preprocess.json, so predict and export
rebuild the network without the source. Only --pretrained runs import this module, and with
it Transformers (the project's `pretrained` extra).
"""

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from .config import ConfigError, TrainConfig
from .utils.errors import first_line

try:
    import transformers
    from tokenizers import Tokenizer
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForMaskedLM,
        AutoModelForSequenceClassification,
        AutoTokenizer,
    )
except ImportError:
    raise ConfigError(
        "--pretrained needs Hugging Face Transformers: pip install -e '.[pretrained]'"
    ) from None

log = logging.getLogger(__package__)
# Transformers' own report of the weights it loaded (a table naming the new head's weights as
# missing) and its progress bars would interleave with the run's log: one line says it below.
transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()


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
        config = _config(source)
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
        path.write_text(json.dumps(content, indent=1) + "\n")


class PretrainedClassifier(nn.Module):
    """(B, T) token ids, pad_id for padding -> (B, num_classes) logits, from the backbone.

    `network` is a Transformers model for sequence classification: the pretrained backbone
    (`network.base_model`) and a new head sized for the classes.
    """

    def __init__(self, network: nn.Module, pad_id: int):
        super().__init__()
        self.network, self.pad_id = network, pad_id

    def forward(self, tokens: Tensor) -> Tensor:
        attention_mask = (tokens != self.pad_id).long()  # one tensor in, as for every model
        return self.network(input_ids=tokens, attention_mask=attention_mask).logits

    def backbone_parameters(self) -> set[nn.Parameter]:
        """The pretrained weights, which learn at backbone_lr_scale times the head's rate."""
        return set(self.network.base_model.parameters())

    def freeze_backbone(self) -> None:
        """For the first freeze_backbone_steps (optim.TrainStep thaws it)."""
        for parameter in self.network.base_model.parameters():
            parameter.requires_grad_(False)


AUTO_MODEL = AutoModelForSequenceClassification


def build_pretrained(cfg: TrainConfig, preprocess: PretrainedTokens) -> PretrainedClassifier:
    """The pretrained model with a new head for the classes of `preprocess`.

    The network is built from the saved config; the weights come from `weights_from` when it
    is set (training), else they are loaded afterwards (predict, export). A head the source
    has for other classes is replaced too (ignore_mismatched_sizes).
    """
    config = AutoConfig.for_model(**preprocess.architecture)
    config.num_labels = len(preprocess.class_names)
    config.id2label = dict(enumerate(preprocess.class_names))
    config.label2id = {name: index for index, name in enumerate(preprocess.class_names)}
    config.problem_type = "single_label_classification"
    if preprocess.weights_from is None:
        network = AUTO_MODEL.from_config(config)
    else:
        network, loading = AUTO_MODEL.from_pretrained(
            preprocess.weights_from,
            config=config,
            ignore_mismatched_sizes=True,
            output_loading_info=True,
        )
        new = {*loading["missing_keys"], *(key for key, *_ in loading["mismatched_keys"])}
        head = ", ".join(sorted(new)) or "none"
        log.info("fine-tuning '%s'; new weights (the head): %s", preprocess.weights_from, head)
    return PretrainedClassifier(network, preprocess.pad_id)


def _config(source: str):
    """The model's config.json, or one line saying why `source` has none."""
    folder = Path(source).expanduser()
    if source.startswith(("/", ".", "~")) and not folder.exists():  # a path, not a Hub id
        raise ConfigError(f"--pretrained: folder '{source}' does not exist")
    if folder.exists():
        if not (folder / "config.json").is_file():
            raise ConfigError(
                f"--pretrained: '{source}' has no config.json; expected a Hugging Face model "
                "folder (as save_pretrained writes it) or a model id on the Hub"
            )
        source = str(folder)
    try:
        return AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as error:
        if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
            raise ConfigError(
                f"--pretrained: '{source}' is not a local model folder nor in the Hugging Face "
                f"cache, and HF_HUB_OFFLINE is set; fetch it once with network (`hf download "
                f"{source}`) or pass a folder"
            ) from None
        reason = first_line(error, 160)
        raise ConfigError(
            f"--pretrained: '{source}' is not a local model folder nor a model id the Hugging "
            f"Face Hub could serve ({reason})"
        ) from None


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
