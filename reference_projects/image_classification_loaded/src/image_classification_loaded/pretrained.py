"""Fine-tuning a pretrained Hugging Face model: `--pretrained MODEL` (a Hub id or a folder).

The backbone, its image processor and its config come from the source (hub.py reads it). A
new classification head, sized from the data's classes, replaces the model's own. The image
processor gives the input size, channels, mean and std, with which preprocess.py prepares
every image; they and the model's config go into model/preprocess.json, so predict and
export rebuild the network without the source.
"""

from torch import Tensor

from .config import ConfigError, TrainConfig
from .hub import BackboneClassifier, build_network, read_config
from .preprocess import PretrainedImages
from .utils.errors import first_line

# isort: split
# Only once hub.py has said in one line that Transformers is missing, if it is.
from transformers import AutoImageProcessor, AutoModelForImageClassification


def pretrained_preprocess(source: str, class_names: tuple[str, ...]) -> PretrainedImages:
    """The image processor and config of `source` (a Hub id or a folder), checked."""
    config = read_config(source)
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
    architecture = config.to_dict()
    return PretrainedImages(
        side, channels, mean, std, class_names, architecture, weights_from=source
    )


class PretrainedClassifier(BackboneClassifier):
    """(B, C, H, W) preprocessed images -> (B, num_classes) logits, from the backbone.

    `network` is a Transformers model for image classification: the pretrained backbone
    (`network.base_model`) and a new head sized for the classes.
    """

    def forward(self, images: Tensor) -> Tensor:
        return self.network(pixel_values=images).logits


def build_pretrained(cfg: TrainConfig, preprocess: PretrainedImages) -> PretrainedClassifier:
    """The pretrained model with a new head for the classes of `preprocess`: its weights from
    `weights_from` when set (training), else loaded afterwards (predict, export)."""
    network = build_network(
        AutoModelForImageClassification,
        preprocess.architecture,
        preprocess.class_names,
        preprocess.weights_from,
    )
    return PretrainedClassifier(network)


def _check_kind(config, source: str) -> None:
    """Refuse what Transformers cannot classify images with."""
    if type(config) not in AutoModelForImageClassification._model_mapping:
        architectures = ", ".join(config.architectures or []) or config.model_type
        raise ConfigError(
            f"--pretrained: '{source}' is a {config.model_type} model ({architectures}), which "
            "Transformers has no image classifier for; choose one such as ViT, ResNet or ConvNeXt"
        )
