"""Data: the embedded docs, your own text files, windows of bytes and a fixed split."""

import pytest
import torch

from language_modeling.config import (
    ConfigError,
    load_config,
)
from language_modeling.data import (
    IGNORE,
    Preprocess,
    build_datasets,
    embedded_text,
    split,
    windows,
)
from language_modeling.train import main


def test_split_is_the_last_tenth_and_does_not_move_with_the_seed(cfg):
    first, again = build_datasets(cfg), build_datasets(load_config(["--seed", "7"]))
    assert first.fingerprint == again.fingerprint
    ids = Preprocess(cfg.context).encode(embedded_text())
    train_ids, val_ids = split(ids, cfg.val_fraction)
    assert torch.equal(first.train_targets, train_ids)
    assert len(val_ids) == pytest.approx(0.1 * len(ids), abs=4)
    assert torch.equal(torch.cat([train_ids, val_ids]), ids)


def test_training_windows_overlap_by_half_and_targets_are_the_next_bytes(cfg):
    train = build_datasets(cfg).train
    half = cfg.context // 2
    assert train.inputs.shape == train.targets.shape == (len(train), cfg.context)
    assert torch.equal(train.inputs[:, 1:], train.targets[:, :-1])
    assert torch.equal(train.inputs[1, :half], train.inputs[0, half:])


def test_validation_scores_every_byte_after_the_first_exactly_once(cfg):
    data = build_datasets(cfg)
    _, val_ids = split(Preprocess(cfg.context).encode(embedded_text()), cfg.val_fraction)
    targets = data.val.targets.flatten()
    assert torch.equal(targets[targets != IGNORE], val_ids[1:])
    assert torch.equal(data.val_targets, targets)  # the baseline scores what evaluation scores
    assert (targets[: len(val_ids) - 1] != IGNORE).all()  # padding only at the very end


def test_padded_windows_cover_a_short_text():
    ids = torch.arange(10)
    data = windows(ids, context=4, stride=4, pad=True)
    assert data.targets.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8], [9, IGNORE, IGNORE, IGNORE]]
    assert data.inputs.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 0]]


def test_split_never_cuts_a_character_in_two():
    ids = Preprocess(8).encode("é" * 10)  # 20 bytes of 2-byte characters
    for fraction in (0.05, 0.15, 0.5):
        train_ids, val_ids = split(ids, fraction)
        assert Preprocess(8).decode(train_ids) + Preprocess(8).decode(val_ids) == "é" * 10


def test_preprocess_round_trips_text_and_json(tmp_path, cfg):
    preprocess = build_datasets(cfg).preprocess
    text = "naïve café: ∑ 😀"
    assert preprocess.decode(preprocess.encode(text)) == text
    assert preprocess.encode(text).dtype == torch.int64
    preprocess.save(tmp_path / "preprocess.json")
    assert Preprocess.load(tmp_path / "preprocess.json") == preprocess


def test_corpus_bytes_shrinks_both_splits():
    data = build_datasets(load_config(["--corpus_bytes", "20000"]))
    assert len(data.train_targets) + (data.val_targets != IGNORE).sum() + 1 == 20000


def test_overfit_batches_trains_and_evaluates_on_the_same_windows():
    data = build_datasets(load_config(["--overfit_batches", "1", "--batch_size", "4"]))
    assert data.train is data.val and len(data.train) == 4


def test_an_empty_data_dir_argument_means_the_embedded_docs():
    assert load_config(["--data_dir", "none"]).data_dir is None


def test_a_folder_of_text_files_is_read_in_sorted_order(tmp_path):
    (tmp_path / "b.txt").write_text("second file " * 20, encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.txt").write_text("third, naïve " * 20, encoding="utf-8")
    (tmp_path / "a.txt").write_text("first file " * 20, encoding="utf-8")
    (tmp_path / "notes.md").write_text("not a .txt file")
    cfg = load_config(["--data_dir", str(tmp_path), "--context", "16"])
    data = build_datasets(cfg)
    expected = "\n".join(["first file " * 20, "second file " * 20, "third, naïve " * 20])
    train_ids, _ = split(data.preprocess.encode(expected), cfg.val_fraction)
    assert torch.equal(data.train_targets, train_ids)


def test_training_on_a_folder_of_text(tmp_path, make_text_folder, fast_dev_run):
    root = make_text_folder(tmp_path / "texts", files=1, size=3000)
    summary = main(
        [
            "--output_dir",
            str(tmp_path / "run"),
            "--data_dir",
            str(root),
            "--batch_size",
            "8",
            *fast_dev_run,
        ]
    )
    assert summary["steps"] == 4


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        ("missing", "is not a directory"),
        ("a_file", "good.txt' is not a directory"),
        ("no_text_files", "holds no .txt files"),
        ("empty", "empty.txt' holds no text"),
        ("blank", "empty.txt' holds no text"),
        ("latin1", "latin.txt' is not UTF-8 text (byte 0xe9 at offset 3)"),
        ("too_short", "too few for --context 64"),
        ("symlink_loop", "loop.txt' is a symbolic link that leads to no file (a loop"),
        ("broken_symlink", "gone.txt' is a symbolic link that leads to no file"),
    ],
)
def test_unusable_text_is_a_one_line_error_naming_the_file(tmp_path, layout, expected):
    root = tmp_path / "data"
    root.mkdir()
    (root / "good.txt").write_text("Some perfectly good text. " * 10)
    if layout == "missing":
        root = root / "no-such-folder"
    elif layout == "a_file":
        root = root / "good.txt"
    elif layout == "no_text_files":
        (root / "good.txt").rename(root / "good.md")
    elif layout in ("empty", "blank"):
        (root / "empty.txt").write_text("" if layout == "empty" else " \n\t\n")
    elif layout == "latin1":
        (root / "latin.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    elif layout == "too_short":
        (root / "good.txt").write_text("Too short.")
    elif layout == "symlink_loop":  # once passed over: training went on without it
        (root / "loop.txt").symlink_to("loop.txt")
    elif layout == "broken_symlink":
        (root / "gone.txt").symlink_to("moved-away.txt")
    with pytest.raises(ConfigError, match="--data_dir") as error:
        build_datasets(load_config(["--data_dir", str(root)]))
    assert expected in str(error.value) and "\n" not in str(error.value)
