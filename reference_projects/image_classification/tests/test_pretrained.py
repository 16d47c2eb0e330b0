"""Fine-tuning a pretrained model (--pretrained): its weights and image processor are the ones
used, the backbone learns at its own rate, and the run resumes, predicts as any
other; a source that cannot be fine-tuned is refused in one line."""

import re
import shutil
import signal
import sys

import numpy as np
import pytest
import torch
from calls import refusal
from PIL import Image
from run_logs import assert_same_end, checkpoint_state, logged
from sklearn.datasets import load_digits

from image_classification.config import load_config
from image_classification.data import build_datasets, stratified_split
from image_classification.model import build_model
from image_classification.predict import load_trained, predict
from image_classification.train import main as train

# The module that imports Transformers, and is only imported by --pretrained runs.
PRETRAINED = "image_classification.pretrained"
# hub.py imports Transformers for pretrained.py, before pretrained.py does
HUB = "image_classification.hub"


@pytest.fixture
def fine_tune(short_run, pretrained_folder):
    """short_run's arguments, fine-tuning the tests' small pretrained model."""
    return lambda *extra, **where: short_run(
        "--pretrained", str(pretrained_folder), *extra, **where
    )


def pretrained_weights(folder) -> dict[str, torch.Tensor]:
    """The backbone's weights as Transformers reads them from the folder (it may rename them
    from the names saved there): a ViT without the pooler a classifier does not use."""
    from transformers import ViTModel

    return ViTModel.from_pretrained(folder, add_pooling_layer=False).state_dict()


def test_the_backbone_starts_from_the_pretrained_weights_under_a_new_head(pretrained_folder):
    cfg = load_config(["--pretrained", str(pretrained_folder)])
    preprocess = build_datasets(cfg).preprocess
    # The model's input size and normalisation, not the configured ones (8x8 grayscale).
    assert (preprocess.image_size, preprocess.image_channels) == (16, 3)
    assert preprocess.mean == preprocess.std == (0.5, 0.5, 0.5)
    model = build_model(cfg, preprocess)
    pretrained = pretrained_weights(pretrained_folder)
    backbone = model.network.base_model.state_dict()
    assert pretrained.keys() == backbone.keys()
    assert all(torch.equal(backbone[name], value) for name, value in pretrained.items())
    assert model.network.config.id2label == dict(enumerate(preprocess.class_names))
    with torch.inference_mode():
        logits = model.eval()(torch.zeros(2, 3, 16, 16))
    assert logits.shape == (2, len(preprocess.class_names))


@pytest.mark.parametrize("frozen_steps", [0, 3], ids=["learning", "frozen-for-3"])
def test_a_fine_tuning_run_killed_and_rerun_ends_exactly_as_an_unkilled_one(
    fine_tune, interrupt, pretrained_folder, tmp_path, frozen_steps
):
    freeze = ("--freeze_backbone_steps", str(frozen_steps))
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    train(fine_tune(*freeze, output_dir=whole))
    pretrained = pretrained_weights(pretrained_folder)
    step_3 = checkpoint_state(whole / "checkpoints" / "step-000003.pt")
    backbone = {name: step_3["model"][f"network.vit.{name}"] for name in pretrained}
    unchanged = all(torch.equal(value, pretrained[name]) for name, value in backbone.items())
    assert unchanged == (frozen_steps == 3)
    scales = [group["lr_scale"] for group in step_3["optimizer"]["param_groups"]]
    assert scales == [1.0, 1.0, 0.01, 0.01]  # a backbone frozen for 3 steps thawed by then
    args = fine_tune(*freeze, output_dir=resumed)
    assert interrupt(args, resumed, 5, signal.SIGKILL) == -signal.SIGKILL
    train(args)  # resume auto, from step 3's checkpoint
    assert logged(resumed) == logged(whole)
    assert_same_end(resumed, whole, 6)


def test_a_resume_with_another_source_of_weights_is_refused_and_writes_nothing(
    fine_tune, short_run, tmp_path
):
    train(fine_tune("--max_steps", "2"))
    files = {path: path.read_bytes() for path in (tmp_path / "run").rglob("*") if path.is_file()}
    message = refusal(train, short_run("--max_steps", "4"))  # the same run, from scratch
    assert "pretrained " in message and "--resume_changed true" in message, message
    assert {path: path.read_bytes() for path in files} == files
    assert {path for path in (tmp_path / "run").rglob("*") if path.is_file()} == files.keys()


def test_predictions_from_model_dir_alone_reproduce_the_evaluation(
    fine_tune, pretrained_folder, tmp_path
):
    source = shutil.copytree(pretrained_folder, tmp_path / "source")
    summary = train(fine_tune("--pretrained", str(source)))
    shutil.rmtree(source)  # model/ holds the preprocessing and the architecture
    model, preprocess = load_trained(tmp_path / "run" / "model")
    digits = load_digits()
    _, val_idx = stratified_split(digits.target, val_fraction=0.2)
    images = [Image.fromarray(np.uint8(digits.images[i] * 255 / 16)) for i in val_idx]
    labels = predict(model, preprocess, images)
    hits = [int(label) == digits.target[i] for label, i in zip(labels, val_idx, strict=True)]
    assert np.mean(hits) == pytest.approx(summary["value"], abs=1e-12)


@pytest.fixture(scope="module")
def unusable_sources(tmp_path_factory, pretrained_folder):
    """Folders that --pretrained must refuse, by what is wrong with them."""
    from transformers import BertConfig

    root = tmp_path_factory.mktemp("unusable")
    (root / "empty").mkdir()
    BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2).save_pretrained(
        root / "text"
    )
    (root / "unprocessed").mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(pretrained_folder / name, root / "unprocessed" / name)
    return root


@pytest.mark.parametrize(
    ("source", "extra", "expected"),
    [
        ("missing", [], "--pretrained: folder '.*missing' does not exist"),
        ("empty", [], "--pretrained: '.*empty' has no config.json"),
        ("text", [], "--pretrained: '.*text' is a bert model .*no image classifier"),
        ("unprocessed", [], "--pretrained: '.*unprocessed' holds no usable image processor"),
        ("good", ["--backbone_lr_scale", "0"], "--backbone_lr_scale: got 0.0, expected a number"),
        ("good", ["--freeze_backbone_steps", "-1"], "--freeze_backbone_steps: got -1, expected"),
    ],
)
def test_a_source_that_cannot_be_fine_tuned_is_refused_in_one_line(
    source, extra, expected, unusable_sources, pretrained_folder, short_run
):
    folder = pretrained_folder if source == "good" else unusable_sources / source
    message = refusal(train, short_run("--pretrained", str(folder), *extra))
    assert re.match(f"error: {expected}", message), message


def test_without_transformers_a_fine_tuning_run_names_the_extra_to_install(monkeypatch, fine_tune):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails
    for module in (PRETRAINED, HUB):  # imported again
        monkeypatch.delitem(sys.modules, module, raising=False)
    message = refusal(train, fine_tune())
    assert message == (
        "error: --pretrained needs Hugging Face Transformers: pip install -e '.[pretrained]'"
    )
