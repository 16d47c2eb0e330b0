"""Fine-tuning a pretrained Hugging Face model: `--pretrained MODEL` (a Hub id or a folder).

The backbone, its image processor and its config come from the Hugging Face Hub (a model id
such as google/vit-base-patch16-224, cached after the first download) or from a local folder
in the same format; with HF_HUB_OFFLINE=1 only what is on disk is used. A new classification
head, sized from the data's classes, replaces the model's own. The image processor gives the
input size, channels, mean and std, with which data.py's Preprocess prepares every image; they
and the model's config go into model/preprocess.json, so predict and export rebuild the
network without the source. Only --pretrained runs import this module, and with it
Transformers (the project's `pretrained` extra).
"""

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from .config import ConfigError, TrainConfig
from .data import Preprocess
from .utils.errors import first_line

try:
    import transformers
    from transformers import AutoConfig, AutoImageProcessor, AutoModelForImageClassification
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
class PretrainedImages(Preprocess):
    """data.py's Preprocess with the pretrained model's input size, channels, mean and std,
    from its image processor (images are resized to the square size, scaled to [0, 1] and
    normalised), and the model's config: saved together into model/preprocess.json."""

    architecture: dict[str, Any] = field(default_factory=dict, repr=False)  # config.json
    # Where the pretrained weights come from; None: the architecture alone (predict and
    # export load trained weights into it). Not saved: model/ does not need the source.
    weights_from: str | None = field(default=None, compare=False)

    @classmethod
    def from_source(cls, source: str, class_names: tuple[str, ...]):
        """The image processor and config of `source` (a Hub id or a folder), checked."""
        config = _config(source)
        _check_kind(config, source)
        try:
            processor = AutoImageProcessor.from_pretrained(source)
        except (OSError, ValueError, TypeError, KeyError) as error:
            reason = first_line(error, 120)
            raise ConfigError(
                f"--pretrained: '{source}' holds no usable image processor "
                f"(preprocessor_config.json): {reason}"
            ) from None
        size = getattr(processor, "size", None) or {}
        side = size.get("height") or size.get("shortest_edge")
        channels = getattr(config, "num_channels", 3)
        if not side or channels not in (1, 3):
            raise ConfigError(
                f"--pretrained: the image processor of '{source}' gives no square input size "
                f"of 1 or 3 channels (size {dict(size)}, {channels} channels)"
            )
        normalise = getattr(processor, "do_normalize", False)
        mean = tuple(processor.image_mean) if normalise else (0.0,) * channels
        std = tuple(processor.image_std) if normalise else (1.0,) * channels
        return cls(side, channels, mean, std, class_names, config.to_dict(), weights_from=source)

    def save(self, path: Path) -> None:
        content = {k: v for k, v in asdict(self).items() if k != "weights_from"}
        path.write_text(json.dumps(content, indent=1) + "\n")


class PretrainedClassifier(nn.Module):
    """(B, C, H, W) preprocessed images -> (B, num_classes) logits, from the backbone.

    `network` is a Transformers model for image classification: the pretrained backbone
    (`network.base_model`) and a new head sized for the classes.
    """

    def __init__(self, network: nn.Module):
        super().__init__()
        self.network = network

    def forward(self, images: Tensor) -> Tensor:
        return self.network(pixel_values=images).logits

    def backbone_parameters(self) -> set[nn.Parameter]:
        """The pretrained weights, which learn at backbone_lr_scale times the head's rate."""
        return set(self.network.base_model.parameters())

    def freeze_backbone(self) -> None:
        """For the first freeze_backbone_steps (optim.TrainStep thaws it)."""
        for parameter in self.network.base_model.parameters():
            parameter.requires_grad_(False)


AUTO_MODEL = AutoModelForImageClassification


def build_pretrained(cfg: TrainConfig, preprocess: PretrainedImages) -> PretrainedClassifier:
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
    return PretrainedClassifier(network)


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
    """Refuse what Transformers cannot classify images with."""
    if type(config) not in AutoModelForImageClassification._model_mapping:
        architectures = ", ".join(config.architectures or []) or config.model_type
        raise ConfigError(
            f"--pretrained: '{source}' is a {config.model_type} model ({architectures}), which "
            "Transformers has no image classifier for; choose one such as ViT, ResNet or ConvNeXt"
        )
