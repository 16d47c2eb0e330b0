"""Inference from model/: predictions on image files agree with evaluation."""

import numpy as np
import pytest
from calls import refusal
from PIL import Image
from sklearn.datasets import load_digits

from image_classification_loaded.data import stratified_split
from image_classification_loaded.predict import (
    load_trained,
    main,
    predict,
)
from image_classification_loaded.train import main as train


def test_predictions_from_image_files_reproduce_the_evaluation(tmp_path, capsys, short_run):
    summary = train(short_run())
    model_dir = tmp_path / "run" / "model"
    digits = load_digits()
    _, val_idx = stratified_split(digits.target, val_fraction=0.2)
    images = [Image.fromarray(np.uint8(digits.images[i] * 255 / 16)) for i in val_idx]

    model, preprocess = load_trained(model_dir)
    labels = predict(model, preprocess, images)
    accuracy = np.mean(
        [int(label) == digits.target[i] for label, i in zip(labels, val_idx, strict=True)]
    )
    # Evaluation runs under bf16 autocast, as training does; predict runs in
    # float32, as the exported model does. Rounding flips the
    # predictions of the few samples nearest a decision boundary: within 1% of the samples.
    assert accuracy == pytest.approx(summary["value"], abs=0.01)

    path = tmp_path / "digit.png"
    images[0].save(path)
    main([str(model_dir), str(path)])
    assert capsys.readouterr().out.strip() == f"{path}\t{labels[0]}"
    notes = tmp_path / "notes.png"
    notes.write_text("not an image")
    message = refusal(main, [str(model_dir), str(path), str(notes)])
    assert message.startswith(f"error: '{notes}' cannot be decoded (")
