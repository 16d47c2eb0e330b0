"""A trained model's folder, a training run's model/, read for inference (predict, sample,
reference): the config that shaped the network, the preprocessing and the weights. A folder
that is missing, incomplete, damaged or of another task or project is refused with one
ModelFolderError that names the file and what to pass instead, never a library's traceback;
nothing is written.
"""

import json
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml
from safetensors import SafetensorError
from torch import nn

from .checkpoint import CheckpointError, load_weights
from .config import TrainConfig
from .data import Preprocess
from .model import build_model
from .utils.errors import UserError, first_line

FILES = ("config.yaml", "preprocess.json", "model.safetensors")  # what training writes there
EXPECTED = f"a training run's model/ folder (with {', '.join(FILES)})"
_AGAIN = "copy the model folder again, or train again"


class ModelFolderError(UserError, ValueError):
    """A model folder that cannot be used; the message names the file and the fix."""


def load_trained(model_dir: str | Path) -> tuple[nn.Module, Preprocess]:
    """The trained model in eval mode on the CPU, and the preprocessing it was trained with."""
    model_dir = Path(model_dir)
    check_model_folder(model_dir)
    cfg = read_config(model_dir)
    preprocess = read_preprocess(model_dir / "preprocess.json")
    model = build_model(cfg, preprocess)
    path = model_dir / "model.safetensors"
    try:
        load_weights(model, model_dir)
    except SafetensorError as error:  # truncated or overwritten
        raise ModelFolderError(f"'{path}' is damaged ({first_line(error)}); {_AGAIN}") from None
    except CheckpointError as error:  # weights of another model of this task
        raise ModelFolderError(f"{error}; its files come from different runs") from None
    return model.eval(), preprocess


def check_model_folder(model_dir: Path) -> None:
    """The folder exists and holds every file training writes to model/."""
    if not model_dir.is_dir():
        state = "is not a folder" if model_dir.exists() else "does not exist"
        raise ModelFolderError(f"'{model_dir}' {state}; expected {EXPECTED}")
    missing = [name for name in FILES if not (model_dir / name).is_file()]
    if missing and (model_dir / "model").is_dir():
        raise ModelFolderError(
            f"'{model_dir}' is a training run's folder; pass its model folder, "
            f"'{model_dir / 'model'}'"
        )
    if missing:
        raise ModelFolderError(f"'{model_dir}' has no {' or '.join(missing)}; expected {EXPECTED}")


def read_config(model_dir: Path) -> TrainConfig:
    """The config model/ was trained with; refused when it has fields this project lacks."""
    path = model_dir / "config.yaml"
    values = _read(path, yaml.safe_load, yaml.YAMLError)
    if not isinstance(values, dict):
        raise ModelFolderError(f"'{path}' is damaged (not a mapping of field: value); {_AGAIN}")
    unknown = sorted(values.keys() - {field.name for field in fields(TrainConfig)})
    if unknown:
        raise ModelFolderError(
            f"'{model_dir}' holds a model of another task or project: its config.yaml has "
            f"fields {', '.join(map(str, unknown[:4]))}, which this project's TrainConfig lacks"
        )
    return TrainConfig(**values)


def read_preprocess(path: Path) -> Preprocess:
    """The preprocessing saved with a model (model/preprocess.json), or a one-line refusal."""
    values = _read(path, json.loads, ValueError)
    if not isinstance(values, dict):
        raise ModelFolderError(f"'{path}' is damaged (not a JSON object); {_AGAIN}")
    try:
        return Preprocess.load(path)
    except (TypeError, ValueError) as error:  # fields of another task's preprocessing
        raise ModelFolderError(
            f"'{path}' is the preprocessing of another task or project ({first_line(error)})"
        ) from None


def _read(path: Path, parse: Callable[[str], Any], damaged: type[Exception]) -> Any:
    """`path`'s UTF-8 text, parsed; a file that cannot be read or parsed is one line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ModelFolderError(f"'{path}' cannot be read ({error.strerror})") from None
    except UnicodeDecodeError:
        raise ModelFolderError(f"'{path}' is damaged (not UTF-8 text); {_AGAIN}") from None
    try:
        return parse(text)
    except damaged as error:
        raise ModelFolderError(f"'{path}' is damaged ({first_line(error)}); {_AGAIN}") from None
