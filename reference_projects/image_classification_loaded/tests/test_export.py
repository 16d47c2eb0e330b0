"""Export: the artifact agrees with PyTorch, a wrong one fails the check, and bad input is
one line. test_exported_predictions.py runs the artifact on real data and the README's
example."""

import copy
import json
import re
import shutil
from pathlib import Path

import onnx
import pytest
import torch
from calls import refusal
from huggingface_hub import ModelCard
from run_logs import checkpoint_state
from torch import nn
from unexportable import Unexportable

from image_classification_loaded import export as export_module
from image_classification_loaded import task
from image_classification_loaded.artifact import (
    FILE_NAME,
    ExportError,
    load_artifact,
    save_artifact,
)
from image_classification_loaded.checkpoint import load_checkpoint
from image_classification_loaded.config import load_config
from image_classification_loaded.export import (
    ATOL,
    EXAMPLE_BATCH,
    RTOL,
    main,
    verify,
)
from image_classification_loaded.predict import load_trained
from image_classification_loaded.train import main as train


@pytest.fixture
def run(exported, tmp_path):
    """A copy of the exported run, for tests that export into it."""
    return Path(shutil.copytree(exported, tmp_path / "run"))


def test_training_ends_with_a_verified_export(exported):
    export_dir = exported / "export"
    assert {path.name for path in export_dir.iterdir()} == {FILE_NAME, "model.json"}
    meta = json.loads((export_dir / "model.json").read_text())
    assert meta["file"] == FILE_NAME
    _, preprocess = load_trained(exported / "model")
    signature = task.export_signature(preprocess)
    assert (meta["inputs"], meta["outputs"]) == (signature["inputs"], signature["outputs"])
    assert meta["preprocess"] == json.loads((exported / "model" / "preprocess.json").read_text())
    assert EXAMPLE_BATCH not in meta["verified"]["batch_sizes"]
    assert {"atol": ATOL, "rtol": RTOL}.items() <= meta["verified"].items()
    assert meta["checkpoint"].endswith((exported / "checkpoints" / "latest").read_text().strip())


def test_a_model_that_differs_from_the_artifact_fails_the_check(exported):
    model, preprocess = load_trained(exported / "model")
    with torch.no_grad():
        for parameter in model.parameters():  # the artifact still holds the exported weights
            parameter.add_(0.1)
    with pytest.raises(ExportError, match=r"max abs error .* max rel error .*tolerance"):
        verify(model, load_artifact(exported / "export" / FILE_NAME), preprocess)


class Cancelling(nn.Module):
    """The model's outputs through a sum that float32 rounds (+ 1e4 - 1e4 keeps 3 digits after
    the point; float64 keeps them), as a deep model's layers amplify rounding."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model(inputs) + 1e4 - 1e4


def test_an_artifact_that_differs_by_float32_rounding_alone_passes_the_check(exported):
    model, preprocess = load_trained(exported / "model")
    rounded = Cancelling(model).eval()
    exact = copy.deepcopy(rounded).double()

    def in_float64(inputs: torch.Tensor) -> torch.Tensor:  # a runtime as exact as float64
        return exact(inputs.double() if inputs.is_floating_point() else inputs).float()

    report = verify(rounded, in_float64, preprocess)
    assert report["float32_rounding"] > 1e-4 > report["atol"]


def test_an_artifact_with_a_frozen_batch_size_fails_the_check(exported):
    model, preprocess = load_trained(exported / "model")

    def frozen(inputs: torch.Tensor) -> torch.Tensor:
        if len(inputs) != EXAMPLE_BATCH:
            raise RuntimeError(f"expected a batch of {EXAMPLE_BATCH}, got {len(inputs)}")
        return model(inputs)

    with pytest.raises(ExportError, match="fails on a batch of"):
        verify(model, frozen, preprocess)


def test_a_failed_check_exits_non_zero_and_keeps_the_verified_export(run, monkeypatch):
    verified = (run / "export" / "model.json").read_text()

    def broken(path: Path):
        run_artifact = load_artifact(path)
        return lambda inputs: run_artifact(inputs) + 0.01

    monkeypatch.setattr(export_module, "load_artifact", broken)
    message = refusal(main, ["--output_dir", str(run)])
    assert "max abs error" in message and "max rel error" in message and "tolerance" in message
    assert (run / "export" / "model.json").read_text() == verified
    assert {path.name for path in (run / "export").iterdir()} == {FILE_NAME, "model.json"}


def test_a_model_the_exporter_cannot_take_is_one_line_naming_it(tmp_path):
    inputs = {"inputs": torch.ones(2, 3)}
    batch = ({0: torch.export.Dim("batch")},)
    with pytest.raises(ExportError) as refused:
        model = Unexportable().eval()
        save_artifact(model, inputs, batch, ["out"], tmp_path / FILE_NAME, load_config([]))
    message = str(refused.value)
    assert re.match(r"\S.* (cannot export|neither script nor trace) Unexportable: \S", message)
    assert "\n" not in message and "\x1b" not in message, message


@pytest.mark.parametrize("checkpoint", ["latest", "best", "path"])
def test_exports_the_checkpoint_asked_for(run, checkpoint, capsys):
    checkpoints = run / "checkpoints"
    if checkpoint == "path":
        expected = checkpoints / "step-000002.pt"
        argument = str(expected)
    else:
        expected = checkpoints / (checkpoints / checkpoint).read_text().strip()
        argument = checkpoint
    report = main(["--output_dir", str(run), "--checkpoint", argument])
    assert Path(report["checkpoint"]) == expected
    meta = json.loads((run / "export" / "model.json").read_text())
    step = load_checkpoint(expected)["progress"]["step"]
    assert (meta["checkpoint"], meta["step"]) == (str(expected), step)
    assert "agrees with PyTorch" in capsys.readouterr().out
    # The model card describes the export just made.
    card = ModelCard.load(run / "model" / "README.md").text
    max_abs_error = meta["verified"]["max_abs_error"]
    assert f"from the checkpoint of step {step}, verified" in card
    assert f"max abs error {max_abs_error:.3g}, within the tolerance" in card


def test_opset_can_be_chosen(run):
    report = main(["--output_dir", str(run), "--opset", "20"])
    model = onnx.load(run / "export" / FILE_NAME)
    assert report["opset"] == 20
    assert {o.domain: o.version for o in model.opset_import}[""] == 20


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--checkpoint", "missing.pt"], "missing.pt' does not exist"),
        (["--checkpint", "best"], "unrecognized arguments: --checkpint"),
        (["--opset", "17"], "--opset: got 17, expected an integer >= 18"),
        (["--opset", "99"], "--opset: got 99"),
    ],
)
def test_bad_input_is_a_one_line_error(exported, argv, expected):
    message = refusal(main, ["--output_dir", str(exported), *argv])
    assert expected in message


def test_a_run_without_checkpoints_is_a_one_line_error(tmp_path):
    with pytest.raises(SystemExit, match="no 'latest' checkpoint in") as exit_info:
        main(["--output_dir", str(tmp_path)])
    assert "\n" not in str(exit_info.value.code)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"width": 16}, "does not fit this model"),  # the weights are of another width
        ({"no_such_field": 1}, "is not from this project"),
    ],
)
def test_a_checkpoint_of_another_model_is_a_one_line_error(exported, tmp_path, change, expected):
    state = checkpoint_state(exported / "checkpoints" / "step-000004.pt")
    state["config"].update(change)
    other = tmp_path / "other.pt"
    torch.save(state, other)
    message = refusal(main, ["--output_dir", str(exported), "--checkpoint", str(other)])
    assert expected in message


def add_field(path: Path) -> None:
    path.write_text(json.dumps(json.loads(path.read_text()) | {"no_such_field": 1}))


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("damage", "given", "expected"),
    [
        (lambda run: None, "missing", "'{folder}' is not a folder; pass a training run's"),
        (lambda run: None, "run/model", "'{folder}' is a model folder; pass its training run's"),
        (
            lambda run: (run / "model" / "preprocess.json").write_text("{"),
            "run",
            "'{folder}/model/preprocess.json' is damaged (",
        ),
        (
            lambda run: add_field(run / "model" / "preprocess.json"),
            "run",
            "preprocess.json' is the preprocessing of another task or project",
        ),
    ],
    ids=["missing", "model folder", "damaged preprocessing", "another task's preprocessing"],
)
def test_a_wrong_or_damaged_run_folder_is_one_line_and_nothing_is_written(
    run, damage, given, expected
):
    damage(run)
    before = files_under(run.parent)
    folder = run.parent / given
    message = refusal(main, ["--output_dir", str(folder)])
    assert expected.format(folder=folder, run=run) in message, message
    assert files_under(run.parent) == before


def test_training_skips_the_export_when_asked(short_run, tmp_path):
    train(short_run("--max_steps", "2", "--export_at_end", "false"))
    assert (tmp_path / "run" / "model").is_dir()
    assert not (tmp_path / "run" / "export").exists()
