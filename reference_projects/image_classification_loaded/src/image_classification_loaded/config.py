"""Training configuration: every default lives in TrainConfig, and nowhere else.

    python -m image_classification_loaded.train --config configs/quick.yaml --lr 3e-3

Values resolve in order: TrainConfig defaults < `--config FILE` (YAML) < `--field value`.
A bad field (unknown name, wrong type, out of range) exits with one line naming it; `--help`
lists the fields with the comments beside them below (utils/cli.py reads them from here).
"""

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass
from pathlib import Path

import yaml

from .utils.cli import config_help, read_mapping
from .utils.errors import UserError
from .utils.files import atomic_write


class ConfigError(UserError, ValueError):
    """A configuration value that was not accepted; the message names the field."""


@dataclass
class TrainConfig:
    # --- run
    output_dir: str = "outputs/run"  # config, metrics, checkpoints and model/ go here
    seed: int = 0  # seeds weights, dropout and data order; the validation split is fixed
    resume: str = "auto"  # auto: newest checkpoint in output_dir | none | PATH to a file
    # Resume although fields outside RESUME_FREE_FIELDS changed: the weights and optimizer
    # state continue, but the run is no longer the one the checkpoint came from (not exact).
    resume_changed: bool = False
    cpu: bool = False  # force the CPU even when a GPU is present
    deterministic: bool = False  # bit-exact GPU runs, at a speed cost (see utils/seed.py)
    # Set by sweep.py: the Optuna trial this run reports its evaluations to, which may prune
    # it ("TRIAL_ID@STORAGE_URL"); None: not in a sweep (search/pruning.py)
    sweep_trial: str | None = None
    # A collective that some process never reaches (a bug, a dead node) fails after this long
    # instead of hanging the job; generous, as the first one waits for every process to start.
    dist_timeout_s: int = 600
    # Recompute each block's activations in backward instead of keeping them: less memory for
    # about a third more compute per step; the results are the same (sharding.py)
    activation_checkpointing: bool = False
    compile: bool = True  # torch.compile the model; false runs eagerly, e.g. to debug
    # --- data
    data_dir: str | None = None  # None: embedded digits; else one folder of images per class
    val_fraction: float = 0.2  # share of the data held out for validation, in (0, 1)
    image_size: int = 8  # side in pixels that every image is resized to (digits are 8x8)
    image_channels: int = 1  # 1 = grayscale, 3 = RGB
    skip_bad_files: bool = False  # train without the images that cannot be read, or refuse
    num_workers: int | str = "auto"  # loader processes for data_dir images; auto: by CPU count
    # --- model
    # None: the network below, trained from scratch. A Hugging Face model id or a local folder
    # in its format (e.g. google/vit-base-patch16-224): fine-tune that model, with its own
    # input size and normalisation and a new head, instead (pretrained.py); image_size,
    # image_channels, width and dropout then shape nothing
    pretrained: str | None = None
    backbone_lr_scale: float = 0.01  # with pretrained: the backbone learns at lr x this
    # With pretrained: the backbone is frozen for this many first steps, while the new head
    # learns from the features as they came; 0: it trains from the first step
    freeze_backbone_steps: int = 0
    width: int = 32  # channels of the first stage; each later stage doubles it
    dropout: float = 0.1  # before the classifier, in [0, 1)
    # --- optimisation
    epochs: int = 30  # passes over the training data
    max_steps: int = 0  # stop after this many optimizer steps; 0: run all epochs
    batch_size: int = 64  # samples per micro-batch on each device
    grad_accum_steps: int = 1  # micro-batches per optimizer step
    lr: float = 3e-3  # peak learning rate, reached after warmup
    weight_decay: float = 0.05  # AdamW decay, on weights only (not biases or norms)
    beta2: float = 0.999  # AdamW's decay of squared-gradient averages, in [0, 1)
    warmup_steps: int = 50  # linear warmup (at most a fifth of the run), then cosine decay to 0
    max_grad_norm: float = 1.0  # clip the global gradient norm to this; inf: never clip
    # > 0: evaluate, save and export a moving average of the weights with this decay per
    # step (e.g. 0.999, about the last 1,000 steps); 0: the trained weights themselves
    ema_decay: float = 0.0
    # --- evaluation, logging, checkpoints (intervals in optimizer steps)
    eval_every: int = 0  # 0: at the end of every epoch
    log_every: int = 20  # steps per log line and metrics.jsonl record (mean loss over them)
    checkpoint_every: int = 0  # 0: at the end of every epoch
    keep_checkpoints: int = 2  # newest checkpoints kept, besides the best one
    # Stop after this many evaluations in a row without an improvement of the validation
    # metric by more than early_stopping_min_delta; 0: never stop early
    early_stopping_patience: int = 0
    early_stopping_min_delta: float = 0.0  # in the metric's units; 0: any improvement counts
    # --- export
    export_at_end: bool = True  # export the final model to output_dir/export and verify it
    opset: int = 18  # ONNX operator set, >= 18: the oldest torch.onnx writes without converting
    # --- debugging
    fast_dev_run: bool = False  # a few steps of everything, afresh in output_dir/fast-dev-run
    overfit_batches: int = 0  # > 0: train on this many batches only, to check the model can fit
    detect_anomaly: bool = False  # autograd anomaly detection (about 10x slower)
    profile: bool = False  # write a profiler trace of a few steps to output_dir/profile


# Fields a resumed run may change: they decide when things happen, where they go and how far
# the run goes (max_steps or epochs extend it), never what a step computes. A change to any
# other field, to the data, or to the global batch (batch_size x processes) is refused on
# resume unless --resume_changed true accepts it (resume.py).
RESUME_FREE_FIELDS = frozenset(
    {
        "output_dir",
        "data_dir",  # the data's fingerprint is compared instead: the folder may move
        "resume",
        "resume_changed",
        "sweep_trial",  # a trial the sweep runs again continues its folder as another trial
        "epochs",
        "max_steps",
        "num_workers",
        "eval_every",
        "log_every",
        "checkpoint_every",
        "keep_checkpoints",
        "early_stopping_patience",
        "early_stopping_min_delta",
        "dist_timeout_s",
        "activation_checkpointing",  # recomputes what it would have kept: same results
        "export_at_end",
        "opset",
        "fast_dev_run",  # it sets only fields of this list
        "detect_anomaly",
        "profile",
    }
)

# A field's check after parsing: (test, what is allowed).
_Rule = tuple[typing.Callable[[typing.Any], bool], str]


def _at_least(minimum: int, meaning: str = "") -> _Rule:
    """An integer of at least `minimum`; `meaning` explains its unit or a special value."""
    allowed = f"an integer >= {minimum}" + (f" ({meaning})" if meaning else "")
    return (lambda v: v >= minimum, allowed)


_RULES: dict[str, _Rule] = {
    "seed": (lambda v: 0 <= v < 2**32, "an integer in [0, 2**32)"),
    "dist_timeout_s": _at_least(1, "seconds"),
    "val_fraction": (lambda v: 0 < v < 1, "a number in (0, 1)"),
    "num_workers": (lambda v: v == "auto" or v >= 0, "'auto' or an integer >= 0"),
    "width": _at_least(1),
    "dropout": (lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "beta2": (lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "image_size": (lambda v: 4 <= v <= 1024, "an integer in [4, 1024]"),
    "image_channels": (lambda v: v in (1, 3), "1 (grayscale) or 3 (RGB)"),
    "pretrained": (
        lambda v: v is None or bool(v.strip()),
        "a Hugging Face model id or folder, or none",
    ),
    "backbone_lr_scale": (lambda v: 0 < v < math.inf, "a number > 0"),
    "freeze_backbone_steps": _at_least(0, "steps; 0: never frozen"),
    "epochs": _at_least(1),
    "max_steps": _at_least(0, "0: run all epochs"),
    "batch_size": _at_least(1),
    "grad_accum_steps": _at_least(1),
    "lr": (lambda v: 0 < v < math.inf, "a number > 0"),
    "weight_decay": (lambda v: 0 <= v < math.inf, "a number >= 0"),
    "warmup_steps": _at_least(0),
    "max_grad_norm": (lambda v: v > 0, "a number > 0 (inf: never clip)"),
    "eval_every": _at_least(0, "0: every epoch"),
    "log_every": _at_least(1),
    "checkpoint_every": _at_least(0, "0: every epoch"),
    "keep_checkpoints": _at_least(1),
    "early_stopping_patience": _at_least(0, "evaluations; 0: never stop early"),
    "early_stopping_min_delta": (lambda v: 0 <= v < math.inf, "a number >= 0"),
    "ema_decay": (lambda v: 0 <= v < 1, "a number in [0, 1) (0: no average)"),
    "overfit_batches": _at_least(0),
    "opset": _at_least(18, "older opsets need a converter that may fail"),
}

_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


def load_config(argv: list[str] | None = None, command: str = "train") -> TrainConfig:
    """Parse `[--config FILE] [--field value | --field=value | --flag] ...` into a TrainConfig.

    `--help` (or `-h`) prints `command`'s usage and every field, and exits with 0.
    """
    argv = list(argv or [])
    if "--help" in argv or "-h" in argv:
        print(config_help(command, TrainConfig))
        raise SystemExit(0)
    overrides = _parse_argv(argv)
    values: dict[str, typing.Any] = {}
    config_file = overrides.pop("config", None)
    if config_file is not None:
        values.update(_read_yaml(config_file))
    values.update(overrides)

    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    resolved = {}
    for name, raw in values.items():
        if name not in fields:
            close = difflib.get_close_matches(name, fields, n=1)
            hint = f"; did you mean --{close[0]}?" if close else "; see config.py for the fields"
            raise ConfigError(f"unknown field --{name}{hint}")
        resolved[name] = _coerce(name, raw, fields[name].type)
    cfg = TrainConfig(**resolved)
    _validate(cfg)
    return cfg


FAST_DEV_RUN_DIR = "fast-dev-run"
FAST_DEV_RUN_VAL_BATCHES = 2  # a fast dev run evaluates these first validation batches only


def apply_fast_dev_run(cfg: TrainConfig) -> TrainConfig:
    """A few steps of everything: train, evaluate, checkpoint, export and verify the export.

    It starts afresh in its own folder under output_dir, every step trained each time, and
    never touches the run in output_dir itself (its config, checkpoints, model). It evaluates
    the first FAST_DEV_RUN_VAL_BATCHES validation batches only (data.py).
    """
    return dataclasses.replace(
        cfg,
        output_dir=str(Path(cfg.output_dir) / FAST_DEV_RUN_DIR),
        resume="none",
        epochs=1,
        max_steps=4,
        eval_every=2,
        log_every=1,
        checkpoint_every=2,
        export_at_end=True,
    )


def save_config(cfg: TrainConfig, path: Path) -> None:
    """Atomically: a full disk raises DiskFull and leaves the old file, never an empty one."""
    text = yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False)
    atomic_write(path, lambda file: file.write(text.encode()))


def _parse_argv(argv: list[str]) -> dict[str, typing.Any]:
    overrides: dict[str, typing.Any] = {}
    while argv:
        token = argv.pop(0)
        if not token.startswith("--") or token == "--":
            raise ConfigError(f"unexpected argument '{token}'; expected --field value")
        name, equals, value = token[2:].partition("=")
        name = name.replace("-", "_")
        if not equals:
            # `--flag` alone means true; `--field value` takes the next token.
            value = argv.pop(0) if argv and not argv[0].startswith("--") else "true"
        overrides[name] = value
    return overrides


def _read_yaml(path: str) -> dict[str, typing.Any]:
    try:
        return read_mapping(Path(path))
    except ValueError as error:
        raise ConfigError(f"--config {path}: {error}") from None


def _coerce(name: str, raw: typing.Any, annotation: typing.Any) -> typing.Any:
    """Turn a CLI string or YAML value into the field's type, or raise naming the field."""
    options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else ()
    if type(None) in options and (raw is None or str(raw).lower() in ("none", "null")):
        return None
    if name == "num_workers" and str(raw) == "auto":
        return "auto"
    kind = next((t for t in options if t is not type(None)), annotation)
    text = str(raw).strip().lower()
    if kind is bool:
        if isinstance(raw, bool) or text in _TRUE | _FALSE:
            return raw if isinstance(raw, bool) else text in _TRUE
        raise ConfigError(f"--{name}: got '{raw}', expected true or false")
    if kind is int:
        if isinstance(raw, bool) or not (isinstance(raw, int) or text.lstrip("-").isdigit()):
            allowed = _RULES.get(name, (None, "an integer"))[1]
            raise ConfigError(f"--{name}: got '{raw}', expected {allowed}")
        return int(raw)
    if kind is str and raw is None:
        raise ConfigError(f"--{name}: got null, expected text")
    if kind is float:
        try:
            value = float(raw)
        except (TypeError, ValueError):
            value = math.nan
        if isinstance(raw, bool) or math.isnan(value):
            allowed = _RULES.get(name, (None, "a number"))[1]
            raise ConfigError(f"--{name}: got '{raw}', expected {allowed}")
        return value
    return str(raw)


def _validate(cfg: TrainConfig) -> None:
    for name, (test, allowed) in _RULES.items():
        value = getattr(cfg, name)
        if not test(value):
            raise ConfigError(f"--{name}: got {value!r}, expected {allowed}")
    if not cfg.output_dir.strip():  # "" would write the run into the current folder
        raise ConfigError(f"--output_dir: got '{cfg.output_dir}', expected a folder (outputs/run)")
    if cfg.data_dir is not None and not Path(cfg.data_dir).is_dir():
        raise ConfigError(f"--data_dir: '{cfg.data_dir}' is not a directory")
