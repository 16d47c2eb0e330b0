"""Data: the embedded reviews, your own CSV or JSONL files, one tokenization for both."""

import json
import logging
from collections import Counter
from dataclasses import asdict

import pytest
import torch
from calls import refusal

from text_classification.config import (
    ConfigError,
    load_config,
)
from text_classification.data import (
    PAD_ID,
    Preprocess,
    build_datasets,
    pad_batch,
)
from text_classification.describe import main as data_command
from text_classification.loaders import build_loaders
from text_classification.reference import bag_of_words_accuracy
from text_classification.reviews import (
    ADJECTIVES,
    generate_reviews,
)
from text_classification.train import main

TEXTS = ["A fine film.", "Not good at all.", "Great!", "It was bad.", "Quite good.", "Awful."]
LABELS = ["pos", "neg", "pos", "neg", "pos", "neg"]

PACKAGE = "text_classification"  # train.py configures its logger
OLD_MISSING = ("lowercase", "pad_id", "unknown_id")  # fields a preprocess.json once lacked


def test_reviews_are_distinct_balanced_and_the_same_every_time():
    texts, labels = generate_reviews()
    assert (texts, labels) == generate_reviews()
    assert len(set(texts)) == len(texts) == 6000  # so no review is in both splits
    assert abs(Counter(labels)["positive"] / len(labels) - 0.5) < 0.03


def test_no_word_alone_decides_the_label():
    texts, labels = generate_reviews()
    words = [set(Preprocess(64).tokenize(text)) for text in texts]
    for word in [*ADJECTIVES[True].split(), *ADJECTIVES[False].split(), "not", "but"]:
        with_word = [label for seen, label in zip(words, labels, strict=True) if word in seen]
        positive = with_word.count("positive") / len(with_word)
        assert 0.3 < positive < 0.7, (word, positive)  # negation and contrast flip them


def test_bag_of_words_stays_well_below_the_target(cfg):
    datasets = build_datasets(cfg)
    accuracy = bag_of_words_accuracy(datasets)
    assert 0.55 < accuracy < 0.75  # the model reaches >= 0.90 (README); word counts cannot


def test_split_is_stratified_and_fixed(cfg):
    first, again = build_datasets(cfg), build_datasets(load_config(["--seed", "7"]))
    assert first.fingerprint == again.fingerprint  # the split does not move with --seed
    assert (len(first.train), len(first.val)) == (4800, 1200)
    share = torch.bincount(first.val_targets) / torch.bincount(first.train_targets)
    assert torch.allclose(share, torch.full_like(share, 0.25), atol=0.01)
    assert not set(first.train.texts) & set(first.val.texts)


def test_vocabulary_comes_from_the_training_split_only(tmp_path, make_text_file):
    make_text_file(tmp_path / "train.csv", TEXTS, LABELS)
    make_text_file(tmp_path / "val.csv", ["Zebras were good."], ["pos"])
    fields = ["--data_dir", str(tmp_path), "--min_word_count", "1"]
    data = build_datasets(load_config(fields))
    assert len(data.train) == len(TEXTS) and data.val.texts == ["Zebras were good."]
    preprocess = data.preprocess
    assert preprocess.vocabulary[:2] == ("<pad>", "<unk>")
    assert "zebras" not in preprocess.vocabulary
    assert data.val[0][0].tolist()[0] == preprocess.vocabulary.index("<unk>")
    assert preprocess("Not GOOD!") == [preprocess.ids[w] for w in ("not", "good", "!")]


def test_words_seen_fewer_than_min_word_count_times_become_unknown(tmp_path, make_text_file):
    texts = ["good, good film", "bad film", "a good one", "bad, so bad", "dull"]
    make_text_file(tmp_path / "train.csv", texts, ["pos", "neg", "pos", "neg", "neg"])
    for count, expected in ((2, {"good", "bad", "film", ","}), (3, {"good", "bad"})):
        fields = ["--data_dir", str(tmp_path), "--val_fraction", "0.4"]
        data = build_datasets(load_config([*fields, "--min_word_count", str(count)]))
        counts = Counter(w for text in data.train.texts for w in Preprocess(64).tokenize(text))
        assert set(data.preprocess.vocabulary[2:]) == {w for w in counts if counts[w] >= count}
        assert set(data.preprocess.vocabulary[2:]) <= expected


def test_preprocess_round_trips_through_json(tmp_path, cfg):
    preprocess = build_datasets(cfg).preprocess
    preprocess.save(tmp_path / "preprocess.json")
    assert Preprocess.load(tmp_path / "preprocess.json") == preprocess
    saved = json.loads((tmp_path / "preprocess.json").read_text())
    # Every step of the tokenization is written down, none left to this code.
    assert (saved["lowercase"], saved["pad_id"], saved["unknown_id"]) == (True, 0, 1)


def test_a_preprocess_json_without_case_and_ids_tokenizes_as_it_was_trained(tmp_path, caplog):
    """Written by a version before `lowercase`, `pad_id` and `unknown_id` were saved: that
    version lower-cased and padded with 0, words it lacked were 1; one line says so."""
    preprocess = Preprocess(64, ("<pad>", "<unk>", "great", "film"))
    old = {k: v for k, v in asdict(preprocess).items() if k not in OLD_MISSING}
    (tmp_path / "preprocess.json").write_text(json.dumps(old))
    with caplog.at_level(logging.INFO, logger=PACKAGE):
        loaded = Preprocess.load(tmp_path / "preprocess.json")
    assert loaded("A GREAT Film!") == [1, 2, 3, 1] == preprocess("A GREAT Film!")
    assert loaded.pad_id == PAD_ID
    (said,) = [r.getMessage() for r in caplog.records if "names no case" in r.getMessage()]
    assert "lower-cased, pad id 0, unknown id 1" in said


def test_batches_are_padded_to_their_own_longest_text(cfg):
    data = build_datasets(cfg)
    train_loader, _ = build_loaders(cfg, data, torch.device("cpu"), torch.Generator())
    widths = set()
    for tokens, targets in train_loader:
        lengths = (tokens != PAD_ID).sum(dim=1)
        assert tokens.dtype == torch.int64 and len(targets) == cfg.batch_size
        assert lengths.max() == tokens.shape[1]  # no column of padding only
        widths.add(tokens.shape[1])
    assert len(widths) > 1
    pair = [(torch.tensor([5, 6]), torch.tensor(1)), (torch.tensor([7]), torch.tensor(0))]
    tokens, targets = pad_batch(pair)
    assert tokens.tolist() == [[5, 6], [7, PAD_ID]] and targets.tolist() == [1, 0]


def test_long_texts_are_truncated_with_one_warning(tmp_path, make_text_file, caplog, monkeypatch):
    texts = [" ".join(["word"] * (10 + i)) for i in range(6)]
    make_text_file(tmp_path / "train.csv", texts, LABELS)
    cfg = load_config(["--data_dir", str(tmp_path), "--max_length", "12", "--val_fraction", "0.5"])
    # train.py's logging setup stops propagation; caplog listens at the root logger.
    monkeypatch.setattr(logging.getLogger(PACKAGE), "propagate", True)
    data = build_datasets(cfg)
    assert max(len(ids) for ids in [*data.train.tokens, *data.val.tokens]) == 12
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(set(warnings)) == 1 and "truncated 3 of 6 texts to 12 tokens" in warnings[0]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_user_files_with_named_fields_and_labels(tmp_path, make_text_file, suffix):
    fields = ("review", "stars")
    make_text_file(tmp_path / f"train{suffix}", TEXTS * 2, LABELS * 2, fields)
    args = ["--data_dir", str(tmp_path), "--text_field", "review", "--label_field", "stars"]
    data = build_datasets(load_config([*args, "--labels", "pos,neg"]))
    assert data.preprocess.class_names == ("pos", "neg")  # --labels fixes the class ids
    assert len(data.train) + len(data.val) == 12
    assert set(data.train.texts) | set(data.val.texts) == set(TEXTS)
    assert build_datasets(load_config(args)).preprocess.class_names == ("neg", "pos")


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("train.csv", "", "the file is empty"),
        ("train.jsonl", "\n  \n", "the file is empty"),
        ("train.csv", "text,label\n", "holds a header but no examples"),
        ("train.csv", "review,label\nfine,pos\n", "no column 'text' in its header"),
        ("train.csv", "text,label\nfine,pos\nbroken\n", "line 3: fewer fields than the header"),
        ("train.csv", "text,label\nfine,pos\nno, quotes,neg\n", "line 3: more fields than"),
        ("train.csv", "text,label\nfine,pos\n  ,neg\n", "line 3: the text is empty"),
        ("train.jsonl", '{"text": "fine", "label": ""}\n', "line 1: the label is empty"),
        ("train.jsonl", '{"text": "a", "label": "p"}\n{"text": "b",\n', "line 2: not valid JSON"),
        ("train.jsonl", '{"text": "a", "label": "p"}\n\n["b", "n"]\n', "line 3: expected a JSON"),
        ("train.jsonl", '{"text": "a", "label": "p"}\n{"body": "b"}\n', "line 2: no key 'text'"),
        ("train.jsonl", '{"text": 3, "label": "p"}\n', "line 1: 'text' is not a string"),
        ("train.jsonl", '{"text": "caf\\udce9", "label": "p"}\n', "line 1: 'text' holds \\udce9"),
        ("train.csv", "text,label\na,pos\nb,pos\n", "at least 2 labels"),
        ("train.csv", "text,label\na,pos\nb,pos\nc,neg\n", "label 'neg' has only 1 example"),
        ("train.csv", "text,label\ncaf\xe9,pos\n", "not UTF-8 text"),
    ],
)
def test_bad_user_files_are_one_line_errors_naming_file_and_problem(
    tmp_path, name, content, expected
):
    path = tmp_path / name
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(ConfigError) as error:
        build_datasets(load_config(["--data_dir", str(tmp_path)]))
    message = str(error.value)
    assert expected in message and f"--data_dir '{path}'" in message and "\n" not in message


def test_a_folder_without_one_training_file_is_refused(tmp_path, make_text_file):
    (tmp_path / "notes.txt").write_text("text,label\nfine,pos\n")
    with pytest.raises(ConfigError, match=r"holds no train.csv or train.jsonl \(it holds: notes"):
        build_datasets(load_config(["--data_dir", str(tmp_path)]))
    make_text_file(tmp_path / "train.csv", TEXTS, LABELS)
    make_text_file(tmp_path / "train.jsonl", TEXTS, LABELS)
    with pytest.raises(ConfigError, match=r"holds both train.csv and train.jsonl; keep one"):
        build_datasets(load_config(["--data_dir", str(tmp_path)]))


@pytest.mark.parametrize("name", ["train.csv", "train.jsonl", "val.csv"])
@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda path: path.mkdir(), "is a folder, not a file"),
        (lambda path: path.symlink_to(path.name), "is a symbolic link that leads to no file"),
    ],
    ids=["folder", "symlink-loop"],
)
def test_a_data_file_that_is_not_a_file_is_refused_saying_what_it_is(
    tmp_path, make_text_file, name, make, problem
):
    """A train.csv that was a folder or a symbolic link to itself was refused with "holds no
    train.csv ... (it holds: train.csv)"; such a val.csv was passed over for val_fraction."""
    if name.startswith("val"):
        make_text_file(tmp_path / "train.csv", TEXTS, LABELS)
    make(tmp_path / name)
    split = name.partition(".")[0]
    for command in (data_command, main):
        message = refusal(command, ["--data_dir", str(tmp_path), "--output_dir", str(tmp_path)])
        assert message.startswith(f"error: --data_dir: '{tmp_path / name}' {problem}")
        assert message.endswith(f"; {split}.csv or {split}.jsonl must be a file of examples")


def test_labels_outside_the_known_set_are_refused(tmp_path, make_text_file):
    make_text_file(tmp_path / "train.jsonl", TEXTS, LABELS)
    make_text_file(tmp_path / "val.jsonl", ["Fine.", "Meh."], ["pos", "meh"])
    with pytest.raises(ConfigError, match=r"val.jsonl' line 2: label 'meh' never occurs in train"):
        build_datasets(load_config(["--data_dir", str(tmp_path)]))
    with pytest.raises(ConfigError, match=r"train.jsonl' line 2: label 'neg' is not one of"):
        build_datasets(load_config(["--data_dir", str(tmp_path), "--labels", "pos,other"]))


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--data_dir", "missing"], "--data_dir"),
        (["--width", "30"], "--width"),  # not a multiple of the 4 heads
        (["--labels", "a,,b"], "--labels"),
        (["--max_length", "0"], "--max_length"),
    ],
)
def test_bad_fields_are_refused_before_training(argv, field):
    with pytest.raises(ConfigError, match=field):
        load_config(argv)


def test_training_on_a_user_file(tmp_path, make_text_file, fast_dev_run):
    make_text_file(tmp_path / "data" / "train.jsonl", *generate_reviews(100, seed=3))
    summary = main(
        [
            "--output_dir",
            str(tmp_path / "run"),
            "--data_dir",
            str(tmp_path / "data"),
            "--batch_size",
            "16",
            *fast_dev_run,
        ]
    )
    assert summary["steps"] == 4  # 80 training texts: 5 batches of 16, the dev run stops at 4
