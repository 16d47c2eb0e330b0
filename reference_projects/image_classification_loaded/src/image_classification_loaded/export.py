"""Export the trained model to ONNX and verify it against PyTorch in onnxruntime.

    python -m image_classification_loaded.export [--output_dir DIR]
        [--checkpoint best|latest|PATH] [--opset N]

Loads a checkpoint of the run in `output_dir` (weights_only) into a freshly built, uncompiled
model in eval mode and exports it, with a dynamic batch dimension, into `output_dir/export/`:
the artifact, and `model.json` beside it (inputs, outputs and the preprocessing), so
inference can reproduce what training saw. Then the artifact and the PyTorch model run on
the same random batches, of sizes other than the one used to export, and must agree within
the tolerance below. An artifact that disagrees is an error (exit code 1), and it never
replaces an export that was verified.
"""

import copy
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from . import task
from .artifact import FILE_NAME, FORMAT, ExportError, load_artifact, save_artifact
from .checkpoint import CONFIG, PROGRESS, CheckpointError, load_checkpoint
from .config import ConfigError, TrainConfig, load_config
from .data import Preprocess
from .model import build_model
from .model_folder import ModelFolderError, read_preprocess
from .run_folder.model_card import write_model_card
from .storage import load_inference_weights
from .utils.cli import Parser
from .utils.errors import first_line

# Exported with a batch of 2: torch.export treats sizes 0 and 1 as constants. Verified with
# other sizes, so an artifact whose batch size was frozen at the example's cannot pass.
EXAMPLE_BATCH = 2
CHECK_BATCHES = (1, 5)
# Element-wise |artifact - pytorch| <= atol + RTOL * |pytorch| (numpy.allclose), with ATOL and
# RTOL the bounds PyTorch's export tutorial checks with. Runtimes sum fp32 products in different
# orders, which moves logits by about 1e-6 relative; but a deep model amplifies rounding (a
# small language model's logits move by 5e-5 between float32 and float64), and two float32
# runtimes may each be that far from the exact result: atol adds twice the largest
# |float32 - float64| of the model's outputs on the batches checked. A wrong mode, weight or
# operator moves them by far more.
ATOL, RTOL = 1e-5, 1e-3


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command-line entry point: returns the report; bad input exits with one line."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    overrides = {
        name: value
        for name, value in vars(args).items()
        if name not in ("output_dir", "checkpoint") and value is not None
    }
    try:
        report = export_run(Path(args.output_dir), args.checkpoint, overrides)
    except (CheckpointError, ConfigError, ExportError, ModelFolderError) as error:
        raise SystemExit(f"error: {error}") from None
    print(describe(report))
    return report


def export_run(
    output_dir: Path, checkpoint: str = "latest", overrides: dict[str, str] | None = None
) -> dict[str, Any]:
    """Export a checkpoint of the run in `output_dir` into output_dir/export, verified.

    `checkpoint` is best, latest or a path; `overrides` (field -> text, as on the command
    line) change the checkpoint's config for the export, parsed and checked as training does.
    """
    check_run_folder(output_dir)
    path = resolve_checkpoint(output_dir / "checkpoints", checkpoint)
    state = load_checkpoint(path)
    cfg = _with_overrides(_checkpoint_config(state, path), overrides or {})
    preprocess_path = output_dir / "model" / "preprocess.json"
    if not preprocess_path.is_file():
        raise ExportError(
            f"'{preprocess_path}' is missing: export needs the preprocessing that a finished "
            "training run writes there"
        )
    preprocess = read_preprocess(preprocess_path)
    # Preprocessing fields that are also config fields were set from the config in training.
    taken = asdict(preprocess)
    if cfg.pretrained is not None:  # but a pretrained model's input size and channels
        taken = {k: v for k, v in taken.items() if k not in ("image_size", "image_channels")}
    for name, value in taken.items():
        if name in asdict(cfg) and getattr(cfg, name) != value:
            raise ExportError(
                f"checkpoint '{path}' was trained with {name}={getattr(cfg, name)}, but "
                f"'{preprocess_path}' has {name}={value}: they come from different runs"
            )
    model = build_model(cfg, preprocess)
    # The weights' average where the run kept one; strict: a one-line error names misfits.
    load_inference_weights(model, state, path)
    source = {"checkpoint": str(path), "step": state[PROGRESS]["step"]}
    report = export_model(model.eval(), preprocess, cfg, output_dir / "export", source)
    write_model_card(output_dir)  # its export section, from export/model.json
    return report


def export_model(
    model: nn.Module,
    preprocess: Preprocess,
    cfg: TrainConfig,
    export_dir: Path,
    source: dict[str, Any],
) -> dict[str, Any]:
    """Export `model` (eval mode, CPU), verify the artifact, then move it into export_dir.

    Everything is written to a staging folder first and replaces the previous export only
    once verified, so export_dir never holds an artifact that failed its check.
    """
    signature = task.export_signature(preprocess)
    (input_spec,) = signature["inputs"]
    example = task.example_inputs(preprocess, EXAMPLE_BATCH, torch.Generator().manual_seed(0))
    # Dimensions named in the signature ("batch", "sequence") vary; the others are fixed. A
    # bounded one is a dict: {"name": "sequence", "max": 128} (a position table's rows).
    dynamic = {
        i: torch.export.Dim(d) if isinstance(d, str) else torch.export.Dim(**d)
        for i, d in enumerate(input_spec["shape"])
        if not isinstance(d, int)
    }
    export_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=export_dir, prefix=".staging-") as staging:
        artifact = Path(staging) / FILE_NAME
        outputs = [spec["name"] for spec in signature["outputs"]]
        inputs = {input_spec["name"]: example}
        details = save_artifact(model, inputs, (dynamic,), outputs, artifact, cfg)
        parity = verify(model, load_artifact(artifact), preprocess)
        description = {
            "format": FORMAT,
            "file": FILE_NAME,
            **details,
            **signature,
            "preprocess": asdict(preprocess),  # what data.py's Preprocess does, as numbers
            **source,
            "torch": torch.__version__,
            "verified": parity,
        }
        (Path(staging) / "model.json").write_text(json.dumps(description, indent=2) + "\n")
        for name in (FILE_NAME, "model.json"):
            os.replace(Path(staging) / name, export_dir / name)
    return {"artifact": str(export_dir / FILE_NAME), **source, **details, **parity}


def verify(
    model: nn.Module, run_artifact: Callable[[Tensor], Tensor], preprocess: Preprocess
) -> dict[str, Any]:
    """Run the artifact and `model` on the same random batches; ExportError if they differ."""
    generator = torch.Generator().manual_seed(1)
    exact = _in_float64(model)
    max_abs = max_rel = rounding = 0.0
    for batch_size in CHECK_BATCHES:
        inputs = task.example_inputs(preprocess, batch_size, generator)
        with torch.inference_mode():
            expected = model(inputs)
            rounding = max(rounding, _float32_rounding(expected, exact, inputs))
            try:
                actual = run_artifact(inputs)
            except Exception as error:  # each runtime raises its own types
                reason = first_line(error)
                raise ExportError(
                    f"{FILE_NAME} fails on a batch of {batch_size} ({reason}); the batch "
                    "dimension must be dynamic"
                ) from None
        if actual.shape != expected.shape:
            raise ExportError(
                f"{FILE_NAME} returns shape {tuple(actual.shape)} for a batch of {batch_size}, "
                f"PyTorch {tuple(expected.shape)}"
            )
        error = (actual - expected).abs()
        max_abs = max(max_abs, error.max().item())
        max_rel = max(max_rel, (error / expected.abs().clamp_min(1e-12)).max().item())
        if not (error <= ATOL + 2 * rounding + RTOL * expected.abs()).all():
            raise ExportError(
                f"{FILE_NAME} disagrees with PyTorch on a batch of {batch_size}: max abs error "
                f"{max_abs:.3g}, max rel error {max_rel:.3g}; tolerance |difference| <= "
                f"{ATOL:g} + 2 x {rounding:.2g} (float32 rounding) + {RTOL:g} x |PyTorch| "
                "element-wise"
            )
    return {
        "batch_sizes": list(CHECK_BATCHES),
        "max_abs_error": max_abs,
        "max_rel_error": max_rel,
        "atol": ATOL,
        "rtol": RTOL,
        "float32_rounding": rounding,
    }


def _in_float64(model: nn.Module) -> Callable[[Tensor], Tensor]:
    """A float64 copy of `model`, as a function of the float32 model's inputs."""
    exact = copy.deepcopy(model).double()
    return lambda inputs: exact(inputs.double() if inputs.is_floating_point() else inputs)


def _float32_rounding(expected: Tensor, exact: Callable[[Tensor], Tensor], inputs: Tensor) -> float:
    """The largest |float32 - float64| of the model's outputs on `inputs`; 0 for a model that
    cannot run in float64 (one that fixes a float32 dtype inside), checked as before then."""
    try:
        return (expected.double() - exact(inputs)).abs().max().item()
    except RuntimeError:  # "expected scalar type Double but found Float" and its kin
        return 0.0


def check_exportable(cfg: TrainConfig, preprocess: Preprocess, resumed_from: Path | None) -> None:
    """Export a new --pretrained run's model as built to a scratch folder, verified: an
    architecture the export cannot take is refused before the run writes anything, not
    after training. A resumed run passed it when it started; --export_at_end false skips it.

    Building the model draws its new head's weights: on a fork of the random state, so that
    the run trains as it would without the check.
    """
    if resumed_from is not None or cfg.pretrained is None or not cfg.export_at_end:
        return
    scratch_folder = tempfile.TemporaryDirectory(prefix="export-check-")
    with torch.random.fork_rng(devices=[]), scratch_folder as scratch:
        model = build_model(cfg, preprocess).eval()
        try:
            export_model(model, preprocess, cfg, Path(scratch), {"checkpoint": None, "step": 0})
        except ExportError as error:
            raise ConfigError(
                f"--pretrained: '{cfg.pretrained}' cannot be exported at the end of training "
                f"({error}); pass --export_at_end false, or choose another model"
            ) from None


def describe(report: dict[str, Any]) -> str:
    """One line for the log: what was written, from where, and how closely it agrees."""
    sizes = " and ".join(str(size) for size in report["batch_sizes"])
    return (
        f"exported {report['artifact']} from {report['checkpoint']}: agrees with PyTorch on "
        f"batches of {sizes} (max abs error {report['max_abs_error']:.2g}, max rel error "
        f"{report['max_rel_error']:.2g}; tolerance {report['atol']:g} + 2 x "
        f"{report['float32_rounding']:.2g} (float32 rounding) + {report['rtol']:g} x |PyTorch|)"
    )


def check_run_folder(output_dir: Path) -> None:
    """A training run's folder: neither a folder that does not exist nor the run's model/."""
    if not output_dir.is_dir():
        raise ExportError(
            f"--output_dir '{output_dir}' is not a folder; pass a training run's folder, whose "
            "checkpoints/ and model/ export reads"
        )
    if (output_dir / "model.safetensors").is_file() and not (output_dir / "model").is_dir():
        raise ExportError(
            f"--output_dir '{output_dir}' is a model folder; pass its training run's folder, "
            f"'{output_dir.parent}', whose checkpoints/ and model/ export reads"
        )


def resolve_checkpoint(checkpoint_dir: Path, checkpoint: str) -> Path:
    """`best` or `latest`: the file that marker names in checkpoint_dir; otherwise a path."""
    if checkpoint not in ("best", "latest"):
        return Path(checkpoint)
    marker = checkpoint_dir / checkpoint
    if not marker.is_file():
        raise CheckpointError(
            f"no '{checkpoint}' checkpoint in '{checkpoint_dir}'; train first, or pass "
            "--output_dir DIR or --checkpoint PATH"
        )
    return checkpoint_dir / marker.read_text().strip()


def _checkpoint_config(state: dict[str, Any], path: Path) -> TrainConfig:
    """The config the checkpoint was trained with: it decides the model's shape."""
    if CONFIG not in state:
        raise CheckpointError(f"checkpoint '{path}' holds no config to build its model from")
    unknown = sorted(state[CONFIG].keys() - {field.name for field in fields(TrainConfig)})
    if unknown:
        raise CheckpointError(
            f"checkpoint '{path}' is not from this project: its config has fields "
            f"{', '.join(unknown[:4])}, which TrainConfig does not"
        )
    return TrainConfig(**state[CONFIG])


def _with_overrides(cfg: TrainConfig, overrides: dict[str, str]) -> TrainConfig:
    """Fields given on the command line, parsed and checked exactly as training does."""
    parsed = load_config([f"--{name}={value}" for name, value in overrides.items()])
    return replace(cfg, **{name: getattr(parsed, name) for name in overrides})


def _parser() -> Parser:
    parser = Parser("export", "Export a checkpoint and verify the artifact against PyTorch.")
    parser.add_argument(
        "--output_dir",
        default=TrainConfig.output_dir,
        metavar="DIR",
        help="the training run: checkpoints/ and model/ are read, export/ is written "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--checkpoint",
        default="latest",
        metavar="best|latest|PATH",
        help="which weights: the best or latest checkpoint of the run, or a file "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--opset",
        metavar="N",
        help=f"ONNX operator set (default: the run's, {TrainConfig.opset} unless configured)",
    )
    return parser


if __name__ == "__main__":
    main()
