"""Inference from the exported artifact: it agrees with PyTorch on real inputs in another
batch size, the README's example reproduces the training preprocessing, and the
preprocessing of another run is refused."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from run_logs import checkpoint_state
from sklearn.datasets import load_digits

from image_classification_loaded.artifact import (
    FILE_NAME,
    load_artifact,
)
from image_classification_loaded.data import stratified_split
from image_classification_loaded.export import (
    ATOL,
    CHECK_BATCHES,
    EXAMPLE_BATCH,
    RTOL,
)
from image_classification_loaded.export import main as export
from image_classification_loaded.predict import (
    load_trained,
    predict,
)

README = Path(__file__).resolve().parents[1] / "README.md"


def test_artifact_agrees_with_pytorch_on_real_images_in_another_batch_size(exported):
    model, preprocess = load_trained(exported / "model")
    digits = load_digits()
    _, val_idx = stratified_split(digits.target, val_fraction=0.2)
    images = [Image.fromarray(np.uint8(digits.images[i] * 255 / 16)) for i in val_idx[:7]]
    batch = torch.stack([preprocess(image) for image in images])
    assert len(batch) not in (EXAMPLE_BATCH, *CHECK_BATCHES)
    with torch.inference_mode():
        expected = model(batch)
        actual = load_artifact(exported / "export" / FILE_NAME)(batch)
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)
    assert actual.argmax(dim=1).tolist() == expected.argmax(dim=1).tolist()


def as_users_bring(image: Image.Image, kind: str) -> Image.Image:
    """`image` in another size, or mode: grey, RGBA with a varying alpha, a palette."""
    rgb = image.convert("RGB")
    if kind == "grey":
        return image.convert("L")
    if kind == "rgba":
        alpha = Image.linear_gradient("L").resize(rgb.size)
        return Image.merge("RGBA", (*rgb.split(), alpha))
    if kind == "palette":
        return rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    return rgb.resize((1200, 900) if kind == "large" else (20, 20))  # large: not square


@pytest.mark.parametrize("kind", ["rgb", "grey", "rgba", "palette", "large"])
def test_readme_inference_example_reproduces_predict(exported, monkeypatch, capsys, kind):
    """The README's example imports nothing of this project: export/ and its model.json
    alone must give predict's input, logits and label, on images as users bring them."""
    readme = README.read_text()
    example = readme.split("## Export", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(exported.parents[1])  # the example reads outputs/run/export
    digit = Image.fromarray(np.uint8(load_digits().images[0] * 255 / 16))
    as_users_bring(digit, kind).save("digit.png")

    namespace: dict = {}
    exec(compile(example, str(README), "exec"), namespace)

    model, preprocess = load_trained(exported / "model")
    with Image.open("digit.png") as image:
        expected_batch = preprocess(image)[None]
        (label,) = predict(model, preprocess, [image])
    assert torch.equal(torch.from_numpy(namespace["batch"]), expected_batch)
    with torch.inference_mode():
        logits = model(expected_batch)
    torch.testing.assert_close(torch.from_numpy(namespace["logits"]), logits, atol=ATOL, rtol=RTOL)
    assert capsys.readouterr().out.strip() == label


def test_preprocessing_of_another_run_is_refused(exported, tmp_path):
    state = checkpoint_state(exported / "checkpoints" / "step-000004.pt")
    state["config"]["image_size"] = 16  # preprocess.json of this run says 8
    torch.save(state, tmp_path / "other.pt")
    with pytest.raises(SystemExit, match="image_size=16.*come from different runs"):
        export(["--output_dir", str(exported), "--checkpoint", str(tmp_path / "other.pt")])
