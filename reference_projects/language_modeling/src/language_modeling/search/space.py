"""The search space of a sweep: a YAML file that maps TrainConfig fields to ranges.

    lr: {log: [1.0e-4, 1.0e-2]}        # a float drawn on a log scale
    dropout: {float: [0.0, 0.5]}       # a float drawn uniformly
    layers: {int: [1, 4]}              # an integer, both ends included
    width: {choices: [32, 64, 128]}    # one of these values

Every field and value is checked before a trial starts, with the field's own rules
(config.py): a space a run would refuse is refused in one line.
"""

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from ..config import ConfigError, TrainConfig, load_config

KINDS = ("log", "float", "int", "choices")
# Fields that say where and how a run goes, not what it learns: never searched.
NOT_SEARCHABLE = frozenset(
    {"output_dir", "resume", "resume_changed", "fast_dev_run", "sweep_trial", "cpu", "data_dir"}
)


@dataclass(frozen=True)
class Dimension:
    name: str
    kind: str  # one of KINDS
    values: tuple[Any, ...]  # (low, high), or the choices

    def suggest(self, trial: Any) -> Any:
        """This dimension's value for an Optuna trial."""
        if self.kind == "choices":
            return trial.suggest_categorical(self.name, list(self.values))
        low, high = self.values
        if self.kind == "int":
            return trial.suggest_int(self.name, low, high)
        return trial.suggest_float(self.name, low, high, log=self.kind == "log")

    def describe(self) -> str:
        return f"{self.name}: {self.kind} {list(self.values)}"


def read_space(path: Path, fixed: list[str]) -> list[Dimension]:
    """The dimensions of the space file at `path`, checked against the fields' rules with
    the `fixed` arguments (`--field value`, given to every trial) applied; ConfigError else."""
    try:
        content = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise ConfigError(f"--space {path}: cannot read it ({reason})") from None
    if not isinstance(content, dict) or not content:
        raise ConfigError(f"--space {path}: expected a mapping of fields to their ranges")
    names = {field.name for field in fields(TrainConfig)}
    space = [_dimension(path, name, spec, names) for name, spec in content.items()]
    for dimension in space:
        if dimension.name in fixed_names(fixed):
            raise ConfigError(f"--{dimension.name} is searched ({path}) and fixed: drop one")
        for value in dimension.values:  # a range's ends stand for it, and every choice
            _check_value(path, dimension.name, value, fixed)
    return space


def fixed_names(fixed: list[str]) -> list[str]:
    """The fields that `--field value` or `--field=value` arguments set."""
    return [arg[2:].partition("=")[0] for arg in fixed if arg.startswith("--")]


def as_arguments(params: dict[str, Any]) -> list[str]:
    """A trial's parameters as training's `--field value` arguments."""
    return [arg for name, value in params.items() for arg in (f"--{name}", str(value))]


def _dimension(path: Path, name: Any, spec: Any, names: set[str]) -> Dimension:
    where = f"--space {path}: {name}"
    if name not in names:
        raise ConfigError(f"{where} is not a field of TrainConfig (config.py)")
    if name in NOT_SEARCHABLE:
        raise ConfigError(f"{where} cannot be searched: it says where or how a run goes")
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in KINDS:
        expected = "{log|float|int: [low, high]} or {choices: [...]}"
        raise ConfigError(f"{where}: expected {expected}")
    ((kind, values),) = spec.items()
    if not isinstance(values, list) or not values:
        raise ConfigError(f"{where}: {kind} needs a list of values")
    if kind != "choices":
        numbers = (int,) if kind == "int" else (int, float)
        valid = len(values) == 2 and all(
            isinstance(v, numbers) and not isinstance(v, bool) for v in values
        )
        if not valid or values[0] >= values[1]:
            raise ConfigError(f"{where}: {kind} needs [low, high] with low < high, got {values}")
        if kind == "log" and values[0] <= 0:
            raise ConfigError(f"{where}: log needs low > 0, got {values}")
    return Dimension(name, kind, tuple(values))


def _check_value(path: Path, name: str, value: Any, fixed: list[str]) -> None:
    try:
        load_config([*fixed, f"--{name}", str(value)])
    except ConfigError as error:
        raise ConfigError(f"--space {path}: {name} {value!r} is refused: {error}") from None
