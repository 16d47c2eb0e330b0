"""A model folder that is missing, a run's folder, of another task or damaged is refused by
every command that reads one in one line naming the file and the fix, and nothing is written."""

import json
import shutil
from pathlib import Path

import pytest
import yaml
from calls import refusal
from data_fixtures import FOREIGN_FIELD, MODEL_FOLDER_COMMANDS


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def add_field(path: Path, name: str) -> None:
    """A field this project does not have, in config.yaml or preprocess.json."""
    if path.suffix == ".json":
        path.write_text(json.dumps(json.loads(path.read_text()) | {name: 1}))
    else:
        path.write_text(yaml.safe_dump(yaml.safe_load(path.read_text()) | {name: 1}))


# How a model folder is given wrongly or damaged: (what is done to a copy of a run whose
# model folder is run/model, the folder then given, what the one line must say).
DAMAGES = {
    "missing": (lambda run: None, "missing", "'{folder}' does not exist; expected a training"),
    "run folder": (lambda run: None, "run", "is a training run's folder; pass its model folder, "),
    "another task": (
        lambda run: add_field(run / "model" / "config.yaml", FOREIGN_FIELD),
        "run/model",
        f"holds a model of another task or project: its config.yaml has fields {FOREIGN_FIELD},",
    ),
    "another task's preprocessing": (
        lambda run: add_field(run / "model" / "preprocess.json", "unknown"),
        "run/model",
        "preprocess.json' is the preprocessing of another task or project",
    ),
    "truncated weights": (
        lambda run: truncate(run / "model" / "model.safetensors"),
        "run/model",
        "model.safetensors' is damaged (",
    ),
    "damaged preprocessing": (
        lambda run: (run / "model" / "preprocess.json").write_text("{"),
        "run/model",
        "preprocess.json' is damaged (",
    ),
    "no weights": (
        lambda run: (run / "model" / "model.safetensors").unlink(),
        "run/model",
        "has no model.safetensors; expected a training run's model/ folder",
    ),
}


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("command", MODEL_FOLDER_COMMANDS)
@pytest.mark.parametrize("damage", DAMAGES)
def test_a_wrong_or_damaged_model_folder_is_one_line_and_nothing_is_written(
    command, damage, checkpointed_run, tmp_path, monkeypatch
):
    run = tmp_path / "run"
    shutil.copytree(checkpointed_run / "model", run / "model")
    (run / "config.yaml").write_bytes((checkpointed_run / "config.yaml").read_bytes())
    change, given, expected = DAMAGES[damage]
    change(run)
    folder = tmp_path / given
    before = files_under(tmp_path)
    monkeypatch.chdir(tmp_path)  # where predict writes by default (segmentation masks)

    message = refusal(MODEL_FOLDER_COMMANDS[command], folder)
    assert message.startswith("error: ") and expected.format(folder=folder) in message, message
    assert files_under(tmp_path) == before
