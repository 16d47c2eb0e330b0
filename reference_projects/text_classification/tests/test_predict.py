"""Inference from model/: predictions on raw texts agree with evaluation."""

import pytest
from calls import refusal

from text_classification.config import load_config
from text_classification.data import build_datasets
from text_classification.predict import (
    load_trained,
    main,
    predict,
)
from text_classification.train import main as train


def test_predictions_from_raw_texts_reproduce_the_evaluation(tmp_path, capsys, short_run):
    summary = train(short_run())
    model_dir = tmp_path / "run" / "model"
    val = build_datasets(load_config([])).val
    model, preprocess = load_trained(model_dir)
    labels = predict(model, preprocess, val.texts)
    names = [preprocess.class_names[i] for i in val.targets.tolist()]
    accuracy = sum(a == b for a, b in zip(labels, names, strict=True)) / len(names)
    assert accuracy == pytest.approx(summary["value"], abs=1e-12)

    main([str(model_dir), val.texts[0], val.texts[1]])
    printed = capsys.readouterr().out.splitlines()
    assert printed == [f"{labels[0]}\t{val.texts[0]}", f"{labels[1]}\t{val.texts[1]}"]
    texts = tmp_path / "texts.txt"
    texts.write_text(f"{val.texts[2]}\n\n{val.texts[3]}\n")
    main([str(model_dir), "--file", str(texts)])
    assert [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()] == labels[2:4]


@pytest.mark.parametrize("argv", [[], ["model"], ["model", "--file"], ["model", "  "]])
def test_bad_arguments_are_one_line_errors(argv):
    refusal(main, argv)
