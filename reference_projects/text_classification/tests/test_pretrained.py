"""Fine-tuning a pretrained model (--pretrained): its weights and tokenizer are the ones
used, the backbone learns at its own rate, and the run resumes, predicts as any
other; a source that cannot be fine-tuned is refused in one line."""

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from calls import refusal
from run_logs import assert_same_end, checkpoint_state, logged
from safetensors.torch import load_file

from text_classification.config import load_config
from text_classification.data import build_datasets
from text_classification.model import build_model
from text_classification.optim import build_optimizer
from text_classification.predict import load_trained, predict
from text_classification.train import main as train

# The module that imports Transformers, and is only imported by --pretrained runs.
PRETRAINED = "text_classification.pretrained"
# hub.py imports Transformers for pretrained.py, before pretrained.py does
HUB = "text_classification.hub"


@pytest.fixture
def fine_tune(short_run, pretrained_folder):
    """short_run's arguments, fine-tuning the tests' small pretrained model."""
    return lambda *extra, **where: short_run(
        "--pretrained", str(pretrained_folder), *extra, **where
    )


def test_the_backbone_starts_from_the_pretrained_weights_under_a_new_head(pretrained_folder):
    cfg = load_config(["--pretrained", str(pretrained_folder)])
    preprocess = build_datasets(cfg).preprocess
    model = build_model(cfg, preprocess)
    pretrained = load_file(pretrained_folder / "model.safetensors")
    backbone = model.network.base_model.state_dict()
    assert pretrained.keys() <= backbone.keys()
    assert all(torch.equal(backbone[name], value) for name, value in pretrained.items())
    assert model.network.config.id2label == dict(enumerate(preprocess.class_names))
    with torch.inference_mode():
        logits = model.eval()(torch.tensor([preprocess("A great film, I loved it.")]))
    assert logits.shape == (1, len(preprocess.class_names))


def test_the_backbone_learns_at_its_scale_of_the_rate_and_norms_and_biases_never_decay(
    fine_tune, pretrained_folder, tmp_path
):
    train(fine_tune("--backbone_lr_scale", "0.1", "--weight_decay", "0.05"))
    cfg = load_config(["--pretrained", str(pretrained_folder), "--backbone_lr_scale", "0.1"])
    model = build_model(cfg, build_datasets(cfg).preprocess)
    groups = build_optimizer(model, cfg).param_groups
    backbone = model.backbone_parameters()
    assert [g["lr_scale"] for g in groups] == [1.0, 1.0, 0.1, 0.1]
    assert not backbone & {p for g in groups[:2] for p in g["params"]}
    assert {p for g in groups[2:] for p in g["params"]} == backbone
    assert [g["weight_decay"] for g in groups] == [0.05, 0.0, 0.05, 0.0]
    assert all(p.ndim < 2 for g in groups[1::2] for p in g["params"])
    saved = checkpoint_state(tmp_path / "run" / "checkpoints" / "step-000006.pt")
    head_lr, backbone_lr = (saved["optimizer"]["param_groups"][i]["lr"] for i in (0, 2))
    assert head_lr > 0 and backbone_lr == pytest.approx(0.1 * head_lr, rel=1e-12)


def test_a_fine_tuning_run_killed_and_rerun_ends_exactly_as_an_unkilled_one(
    fine_tune, interrupt, tmp_path
):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    train(fine_tune(output_dir=whole))
    args = fine_tune(output_dir=resumed)
    assert interrupt(args, resumed, 4, signal.SIGKILL) == -signal.SIGKILL
    train(args)  # resume auto, from step 3's checkpoint
    assert logged(resumed) == logged(whole)
    assert_same_end(resumed, whole, 6)


@pytest.mark.parametrize("frozen_steps", [3, 4], ids=["thawed-by-the-checkpoint", "thawed-after"])
def test_a_frozen_backbone_stays_as_it_came_then_learns_and_the_run_resumes_exactly(
    fine_tune, interrupt, pretrained_folder, tmp_path, frozen_steps
):
    freeze = ("--freeze_backbone_steps", str(frozen_steps))
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    train(fine_tune(*freeze, output_dir=whole))
    pretrained = load_file(pretrained_folder / "model.safetensors")

    def backbone(step: int) -> dict[str, torch.Tensor]:
        state = checkpoint_state(whole / "checkpoints" / f"step-{step:06d}.pt")["model"]
        return {name: state[f"network.bert.{name}"] for name in pretrained}

    def groups(step: int) -> list[float]:
        state = checkpoint_state(whole / "checkpoints" / f"step-{step:06d}.pt")
        return [group["lr_scale"] for group in state["optimizer"]["param_groups"]]

    assert all(torch.equal(value, pretrained[name]) for name, value in backbone(3).items())
    assert groups(3) == [1.0, 1.0] + [0.01, 0.01] * (frozen_steps == 3)  # thawed after step 3
    assert not all(torch.equal(value, pretrained[name]) for name, value in backbone(6).items())
    assert groups(6) == [1.0, 1.0, 0.01, 0.01]
    # Killed at step 5, the run resumes from step 3's checkpoint, frozen or not as it was.
    args = fine_tune(*freeze, output_dir=resumed)
    assert interrupt(args, resumed, 5, signal.SIGKILL) == -signal.SIGKILL
    train(args)
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
    shutil.rmtree(source)  # model/ holds the tokenizer and the architecture
    model, preprocess = load_trained(tmp_path / "run" / "model")
    val = build_datasets(load_config(["--pretrained", str(pretrained_folder)])).val
    labels = predict(model, preprocess, val.texts)
    names = [preprocess.class_names[i] for i in val.targets.tolist()]
    accuracy = sum(a == b for a, b in zip(labels, names, strict=True)) / len(names)
    assert accuracy == pytest.approx(summary["value"], abs=1e-12)


@pytest.fixture(scope="module")
def unusable_sources(tmp_path_factory, pretrained_folder):
    """Folders that --pretrained must refuse, by what is wrong with them."""
    from transformers import GPT2Config

    root = tmp_path_factory.mktemp("unusable")
    (root / "empty").mkdir()
    GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64).save_pretrained(root / "causal")
    (root / "untokenized").mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(pretrained_folder / name, root / "untokenized" / name)
    return root


@pytest.mark.parametrize(
    ("source", "extra", "expected"),
    [
        ("missing", [], "--pretrained: folder '.*missing' does not exist"),
        ("empty", [], "--pretrained: '.*empty' has no config.json"),
        ("causal", [], "--pretrained: '.*causal' is a causal language model"),
        ("untokenized", [], "--pretrained: '.*untokenized' holds no usable tokenizer"),
        ("good", ["--max_length", "500"], "--max_length: got 500, but .* reads at most 128"),
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


def test_a_hub_id_that_is_not_on_disk_is_refused_offline_with_how_to_fetch_it(tmp_path):
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "cache")}
    environment["PYTHONPATH"] = str(Path(__file__).resolve().parents[1] / "src")
    command = [sys.executable, "-m", "text_classification.train"]
    run = subprocess.run(
        [*command, "--pretrained", "someone/absent-model"],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
    )
    assert run.returncode != 0
    assert run.stderr.strip().splitlines()[-1] == (
        "error: --pretrained: 'someone/absent-model' is not a local model folder nor in the "
        "Hugging Face cache, and HF_HUB_OFFLINE is set; fetch it once with network (`hf "
        "download someone/absent-model`) or pass a folder"
    )
    assert not (tmp_path / "outputs").exists()


def test_without_transformers_a_fine_tuning_run_names_the_extra_to_install(monkeypatch, fine_tune):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails
    for module in (PRETRAINED, HUB):  # imported again
        monkeypatch.delitem(sys.modules, module, raising=False)
    message = refusal(train, fine_tune())
    assert message == (
        "error: --pretrained needs Hugging Face Transformers: pip install -e '.[pretrained]'"
    )
