"""Inference from model/: scoring text reproduces the evaluation."""

import pytest
from calls import refusal

from language_modeling.config import load_config
from language_modeling.data import (
    embedded_text,
    split,
)
from language_modeling.predict import (
    load_trained,
    main,
    predict,
)
from language_modeling.train import main as train


def test_scoring_the_validation_text_reproduces_the_evaluation(tmp_path, capsys, short_run):
    args = short_run()
    summary, cfg = train(args), load_config(args)
    model_dir = tmp_path / "run" / "model"
    model, preprocess = load_trained(model_dir)
    text = preprocess.encode(embedded_text())[: cfg.corpus_bytes]
    _, val_ids = split(text, val_fraction=cfg.val_fraction)
    val_text = preprocess.decode(val_ids)
    (score,) = predict(model, preprocess, [val_text])
    assert score == pytest.approx(summary["value"], rel=1e-4)  # float sums in another order

    path = tmp_path / "val.txt"
    path.write_text(val_text, encoding="utf-8")
    main([str(model_dir), str(path)])
    assert capsys.readouterr().out.strip() == f"{path}\t{score:.4f} bits/char"


def test_text_too_short_to_score_is_a_one_line_error(tmp_path, short_run):
    train(short_run())
    model_dir = tmp_path / "run" / "model"
    path = tmp_path / "one.txt"
    path.write_text("x")
    message = refusal(main, [str(model_dir), str(path)])
    assert str(path) in message and "at least 2" in message
