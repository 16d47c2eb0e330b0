"""A pretrained Hugging Face model, from the Hub (a model id, cached after the first download)
or from a local folder in the same format; with HF_HUB_OFFLINE=1 only what is on disk is used.

What image and text fine-tuning share: the model's config read and checked, the network
built with a new head for the data's classes, and the backbone that head sits on.
pretrained.py holds what is the task's own. Only --pretrained runs import this module, and
with it Transformers (the project's `pretrained` extra).
"""

import logging
import os
from pathlib import Path
from typing import Any

from torch import nn

from .config import ConfigError
from .utils.errors import first_line

try:
    import transformers
    from transformers import AutoConfig
except ImportError:
    raise ConfigError(
        "--pretrained needs Hugging Face Transformers: pip install -e '.[pretrained]'"
    ) from None

log = logging.getLogger(__package__)
# Transformers' own report of the weights it loaded (a table naming the new head's weights as
# missing) and its progress bars would interleave with the run's log: one line says it below.
transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()


def read_config(source: str):
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


def build_network(
    auto_model: Any,
    architecture: dict[str, Any],
    class_names: tuple[str, ...],
    weights_from: str | None,
) -> nn.Module:
    """The network of `architecture` (a config.json) with a new head for `class_names`.

    The weights come from `weights_from` when it is set (training), else they are loaded
    afterwards (predict, export). A head the source has for other classes is replaced too
    (ignore_mismatched_sizes).
    """
    config = AutoConfig.for_model(**architecture)
    config.num_labels = len(class_names)
    config.id2label = dict(enumerate(class_names))
    config.label2id = {name: index for index, name in enumerate(class_names)}
    config.problem_type = "single_label_classification"
    if weights_from is None:
        return auto_model.from_config(config)
    network, loading = auto_model.from_pretrained(
        weights_from, config=config, ignore_mismatched_sizes=True, output_loading_info=True
    )
    new = {*loading["missing_keys"], *(key for key, *_ in loading["mismatched_keys"])}
    head = ", ".join(sorted(new)) or "none"
    log.info("fine-tuning '%s'; new weights (the head): %s", weights_from, head)
    return network


class BackboneClassifier(nn.Module):
    """A Transformers classification model: the pretrained backbone (`network.base_model`)
    and a new head sized for the classes. Each task's PretrainedClassifier adds forward."""

    def __init__(self, network: nn.Module):
        super().__init__()
        self.network = network

    def backbone_parameters(self) -> set[nn.Parameter]:
        """The pretrained weights, which learn at backbone_lr_scale times the head's rate."""
        return set(self.network.base_model.parameters())

    def freeze_backbone(self) -> None:
        """For the first freeze_backbone_steps (backbone.thaw_backbone thaws it)."""
        for parameter in self.network.base_model.parameters():
            parameter.requires_grad_(False)
