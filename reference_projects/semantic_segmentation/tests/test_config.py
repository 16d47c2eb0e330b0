"""Configuration: defaults < --config FILE < --field value; bad values are one-line errors."""

import pytest
from calls import refusal

from semantic_segmentation.config import (
    ConfigError,
    TrainConfig,
    load_config,
)
from semantic_segmentation.train import main


def test_defaults_come_from_the_dataclass():
    assert load_config([]) == TrainConfig()


def test_file_then_command_line_override(tmp_path):
    config_file = tmp_path / "exp.yaml"
    config_file.write_text("lr: 0.01\nbatch_size: 32\n")
    cfg = load_config(["--config", str(config_file), "--batch_size", "16", "--cpu"])
    assert (cfg.lr, cfg.batch_size, cfg.cpu) == (0.01, 16, True)


def test_types_are_parsed():
    cfg = load_config(["--num_workers", "2", "--max_grad_norm=inf", "--deterministic", "false"])
    assert cfg.num_workers == 2 and cfg.max_grad_norm == float("inf") and cfg.deterministic is False


@pytest.mark.parametrize(
    "argument",
    [
        "--batch_size=0",
        "--lr=-1",
        "--num_workers=x",
        "--foo=1",
        "--epochs=1.5",
        "--deterministic=maybe",
        "--early_stopping_patience=-1",
        "--early_stopping_min_delta=-0.5",
        "--ema_decay=1",
    ],
)
def test_bad_values_exit_with_one_line_naming_the_field(argument, tmp_path):
    field = argument.partition("=")[0]
    assert field in refusal(main, ["--output_dir", str(tmp_path), argument])


def test_unknown_field_suggests_the_closest():
    with pytest.raises(ConfigError, match="did you mean --batch_size"):
        load_config(["--batchsize", "4"])


def test_unreadable_config_file(tmp_path):
    with pytest.raises(ConfigError, match="--config"):
        load_config(["--config", str(tmp_path / "missing.yaml")])


@pytest.mark.parametrize("output_dir", ["", " "])
def test_an_empty_output_dir_is_refused_before_anything_is_written(
    output_dir, tmp_path, monkeypatch
):
    # "" was the current folder: a run wrote checkpoints/, model/ and its records there.
    monkeypatch.chdir(tmp_path)
    message = refusal(main, ["--output_dir", output_dir, "--max_steps", "1"])
    assert message.startswith("error: --output_dir:") and "expected a folder" in message
    assert list(tmp_path.iterdir()) == []


def test_a_null_text_field_in_a_config_file_is_refused(tmp_path):
    config_file = tmp_path / "exp.yaml"
    config_file.write_text("output_dir:\n")  # not the folder "None"
    with pytest.raises(ConfigError, match="--output_dir: got null, expected text"):
        load_config(["--config", str(config_file)])


def test_a_config_file_that_is_not_utf8_is_one_line_naming_it(tmp_path):
    config_file = tmp_path / "exp.yaml"
    config_file.write_bytes("lr: 0.01\n# réglages\n".encode("latin-1"))
    message = refusal(main, ["--config", str(config_file), "--output_dir", str(tmp_path / "run")])
    assert f"--config {config_file}: line 2" in message and "not UTF-8" in message


def test_a_field_given_twice_in_a_config_file_is_refused(tmp_path):
    # safe_load keeps the last value without a word: the run would not be the one the
    # first line describes.
    config_file = tmp_path / "exp.yaml"
    config_file.write_text("lr: 0.01\nbatch_size: 16\nlr: 0.02\n")
    with pytest.raises(ConfigError, match=r"exp.yaml: line 3: 'lr' is given twice"):
        load_config(["--config", str(config_file)])
