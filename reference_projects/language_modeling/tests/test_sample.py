"""Generating text: reproducible draws, greedy decoding, the context window, the command."""

import pytest
import torch
from calls import refusal

from language_modeling.predict import load_trained
from language_modeling.sample import (
    generate,
    main,
)
from language_modeling.train import main as train


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, short_run_in):
    run_dir = tmp_path_factory.mktemp("sample") / "run"
    train(short_run_in(run_dir))
    return run_dir / "model"


def test_same_seed_same_text_and_the_length_is_in_bytes(model_dir):
    model, preprocess = load_trained(model_dir)

    def draw(seed: int) -> str:
        generator = torch.Generator().manual_seed(seed)
        return generate(model, preprocess, "def ", 40, temperature=1.0, generator=generator)

    first, again, other = draw(0), draw(0), draw(1)
    assert first == again and first != other
    assert 40 // 4 <= len(first) <= 40  # 40 bytes: characters of 1 to 4 bytes (or U+FFFD)


def test_temperature_zero_takes_the_likeliest_byte_each_time(model_dir):
    model, preprocess = load_trained(model_dir)
    text = generate(model, preprocess, "import ", 5, temperature=0)
    ids = preprocess.encode("import ")[None]
    for _ in range(5):
        ids = torch.cat([ids, model(ids)[:, -1].argmax(dim=1, keepdim=True)], dim=1)
    assert text == preprocess.decode(ids[0, len("import ") :])


def test_top_k_one_is_greedy(model_dir):
    model, preprocess = load_trained(model_dir)
    generator = torch.Generator().manual_seed(0)
    greedy = generate(model, preprocess, "class ", 8, temperature=0)
    assert generate(model, preprocess, "class ", 8, top_k=1, generator=generator) == greedy


def test_a_prompt_longer_than_the_context_keeps_its_end_with_one_warning(model_dir, caplog):
    model, preprocess = load_trained(model_dir)
    tail = "x" * preprocess.context
    long = generate(model, preprocess, "y" * 30 + tail, 5, temperature=0)
    assert long == generate(model, preprocess, tail, 5, temperature=0)
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "first 30 are cut" in warnings[0].getMessage()


def test_the_command_prints_the_prompt_and_its_continuation(model_dir, capsys):
    text = main([str(model_dir), "--prompt", "for ", "--length", "20", "--seed", "3"])
    assert capsys.readouterr().out == "for " + text + "\n"


@pytest.mark.parametrize(
    ("option", "value"),
    [("--length", "0"), ("--temperature", "-1"), ("--top_k", "x"), ("--prompt", "")],
)
def test_bad_options_are_one_line_errors(model_dir, option, value):
    message = refusal(main, [str(model_dir), option, value])
    assert f"{option}: got '{value}'" in message
