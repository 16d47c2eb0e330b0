"""Inference from model/: predictions on image files agree with evaluation."""

import numpy as np
from calls import refusal
from PIL import Image
from sklearn.datasets import load_digits

from image_classification.data import stratified_split
from image_classification.predict import (
    load_trained,
    main,
    predict,
)
from image_classification.train import main as train


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
    assert accuracy == summary["value"]

    path = tmp_path / "digit.png"
    images[0].save(path)
    main([str(model_dir), str(path)])
    assert capsys.readouterr().out.strip() == f"{path}\t{labels[0]}"
    notes = tmp_path / "notes.png"
    notes.write_text("not an image")
    message = refusal(main, [str(model_dir), str(path), str(notes)])
    assert message.startswith(f"error: '{notes}' cannot be decoded (")
