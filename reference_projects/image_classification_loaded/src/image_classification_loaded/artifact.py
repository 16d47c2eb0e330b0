"""The ONNX artifact: written by torch.onnx, checked by onnx.checker, run by onnxruntime.

`torch.onnx.export(dynamo=True)` captures the model with torch.export and translates it with
onnxscript's function library. That is the exporter PyTorch develops (the default since 2.9);
the older one (dynamo=False) is deprecated. The batch dimension is declared dynamic, so the
graph takes any batch size.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import onnxruntime
import torch
from torch import Tensor, nn

from .config import TrainConfig
from .utils.errors import UserError, first_line, root_cause

FORMAT = "onnx"
FILE_NAME = "model.onnx"


class ExportError(UserError, RuntimeError):
    """An artifact that cannot be written, or that disagrees with the PyTorch model."""


def save_artifact(
    model: nn.Module,
    inputs: dict[str, Tensor],
    dynamic_shapes: tuple[dict[int, Any], ...],
    outputs: list[str],
    path: Path,
    cfg: TrainConfig,
) -> dict[str, Any]:
    """Export `model` called on `inputs` (name -> example) as one .onnx file; `dynamic_shapes`
    holds, for each input, the torch.export.Dim of each dimension that varies."""
    newest = onnx.defs.onnx_opset_version()
    if cfg.opset > newest:
        raise ExportError(
            f"--opset: got {cfg.opset}, but the installed onnx {onnx.__version__} knows "
            f"opsets up to {newest}"
        )
    try:
        program = torch.onnx.export(
            model,
            tuple(inputs.values()),
            dynamo=True,  # explicit: older PyTorch defaults to the deprecated exporter
            input_names=list(inputs),
            output_names=outputs,
            opset_version=cfg.opset,
            dynamic_shapes=dynamic_shapes,
            verbose=False,
        )
    except Exception as error:  # torch.export's and the translation's many error types
        # The exporter's own message is generic ("failed to export"); its cause says why.
        raise ExportError(
            f"torch.onnx cannot export {type(model).__name__}: {first_line(root_cause(error))}"
        ) from None
    # Weights inside the one file (ONNX's protobuf limit: 2 GB), so the artifact is one file.
    program.save(str(path), external_data=False)
    try:
        onnx.checker.check_model(str(path), full_check=True)  # full: shape inference too
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
        raise ExportError(f"onnx.checker rejects '{path}': {first_line(error)}") from None
    # Opsets the exporter does not implement are converted after writing, and when that
    # fails it keeps the opset it wrote: a silent difference, checked here.
    opsets = {o.domain: o.version for o in onnx.load(str(path)).opset_import}
    written = opsets.get("", opsets.get("ai.onnx"))
    if written != cfg.opset:
        raise ExportError(
            f"--opset: torch {torch.__version__} cannot write opset {cfg.opset} for this "
            f"model (it wrote {written}); choose another"
        )
    return {"opset": written, "onnxruntime": onnxruntime.__version__}


def load_artifact(path: Path) -> Callable[[Tensor], Tensor]:
    """The artifact as a function of a CPU batch, run by onnxruntime's CPU provider."""
    try:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime raises its own types (Fail, InvalidGraph, ...)
        raise ExportError(
            f"onnxruntime {onnxruntime.__version__} cannot load '{path}': {first_line(error)}"
        ) from None
    name = session.get_inputs()[0].name

    def run(inputs: Tensor) -> Tensor:
        (logits,) = session.run(None, {name: inputs.numpy()})
        return torch.from_numpy(logits)

    return run
