"""Inference from model/: masks predicted from image files agree with evaluation."""

import numpy as np
import torch
from calls import refusal
from PIL import Image

from semantic_segmentation import task
from semantic_segmentation.data import (
    split,
    synthetic_shapes,
)
from semantic_segmentation.predict import (
    load_trained,
    main,
    predict,
)
from semantic_segmentation.train import main as train


def validation_shapes(num_images: int) -> tuple[list[Image.Image], torch.Tensor]:
    """The validation split of the synthetic shapes, as image files would hold them."""
    pixels, masks = synthetic_shapes(num_images)
    _, val_idx = split(num_images, val_fraction=0.2)
    images = [Image.fromarray(pixels[i]) for i in val_idx]
    return images, torch.from_numpy(masks[val_idx]).long()


def test_predictions_from_image_files_reproduce_the_evaluation(short_run, tmp_path, capsys):
    # At the shapes' own 32 pixels, so that the masks compare pixel for pixel.
    sized = ("--num_images", "160", "--image_size", "32", "--batch_size", "16")
    summary = train(short_run(*sized, "--max_steps", "4"))
    images, masks = validation_shapes(160)

    model, preprocess = load_trained(tmp_path / "run" / "model")
    predicted = torch.cat([predict(model, preprocess, images[i : i + 16]) for i in (0, 16)])
    confusion = task.confusion_matrix(predicted, masks, len(preprocess.class_names))
    assert task.mean_iou(confusion) == summary["value"]

    # Masks are written at each image's own size: here twice the training size.
    path = tmp_path / "shape.png"
    images[0].resize((64, 64)).save(path)
    written_path = tmp_path / "masks" / "shape.png"
    main([str(tmp_path / "run" / "model"), str(path), "--out", str(written_path.parent)])
    with Image.open(written_path) as written:
        mask = np.asarray(written)
    assert mask.shape == (64, 64) and written.mode == "L"
    counts = np.bincount(mask.ravel(), minlength=4)
    histogram = " ".join(f"{n}={c}" for n, c in zip(preprocess.class_names, counts, strict=True))
    assert capsys.readouterr().out.strip() == f"{path}\t{written_path}\t{histogram}"
    notes = tmp_path / "notes.png"
    notes.write_text("not an image")
    message = refusal(main, [str(tmp_path / "run" / "model"), str(notes)])
    assert message.startswith(f"error: '{notes}' cannot be decoded (")
