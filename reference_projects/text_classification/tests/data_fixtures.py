"""Data for the tests: arguments for short epochs of the embedded reviews, small datasets
in the user's format, a small pretrained model's folder, and what test_describe.py and
test_model_folder.py expect of this task. conftest.py loads these fixtures (pytest_plugins)."""

import csv
import functools
import json
import re
from pathlib import Path

import pytest
import torch

from text_classification import data
from text_classification.loaders import Datasets
from text_classification.predict import main as predict
from text_classification.reviews import generate_reviews

# Short runs' model: most tests run a few steps many times, and what they check does not
# depend on its size (test_fast_dev_run runs the defaults).
SHORT_RUN_FIELDS = {"width": 32, "layers": 1}


@pytest.fixture(scope="session", autouse=True)
def reviews_generated_once():
    """The session's runs share one copy of the embedded reviews: generating them takes
    longer than a short run trains. test_data.py checks that a seed always gives the same."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(data, "generate_reviews", functools.cache(generate_reviews))
        yield


@pytest.fixture(scope="session")
def embedded_args():
    """Arguments for the embedded data where a test needs epochs of at most 13 steps."""
    # 4,800 training reviews make 10 steps of 512. A one-layer encoder: these tests run the
    # same 30 steps several times, and resuming exactly does not depend on the model's size.
    return ["--batch_size", "512", "--width", "32", "--layers", "1"]


@pytest.fixture(scope="session")
def user_data():
    """Arguments that train on a small dataset in the user's format, written under `root`:
    a folder with train.csv, 200 reviews, batched by 2 loader workers. 10 steps of 16 make an
    epoch; the model is embedded_args' one layer."""

    def args(root: Path) -> list[str]:
        train = _text_file(root / "reviews" / "train.csv", *generate_reviews(200, seed=1))
        fields = {"data_dir": train.parent, "batch_size": 16, "num_workers": 2}
        fields |= {"width": 32, "layers": 1}
        return [f"--{name}={value}" for name, value in fields.items()]

    return args


@pytest.fixture(scope="session")
def make_text_file():
    return _text_file


def _text_file(path: Path, texts: list[str], labels: list, fields=("text", "label")) -> Path:
    """Texts and labels as a CSV file with a header, or as JSONL: one object per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [dict(zip(fields, row, strict=True)) for row in zip(texts, labels, strict=True)]
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    else:
        with path.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
    return path


@pytest.fixture(scope="session")
def pretrained_folder(tmp_path_factory) -> Path:
    """A small BERT in a Hugging Face model folder, as save_pretrained writes one and
    --pretrained reads it: a word-piece tokenizer over the reviews' words and an encoder of 2
    layers of width 32. Built here, so the tests need no network; a real model's folder (e.g.
    all-MiniLM-L6-v2's) holds the same files."""
    from transformers import BertConfig, BertModel, BertTokenizer

    folder = tmp_path_factory.mktemp("pretrained")
    texts, _ = generate_reviews(600, seed=2)
    words = sorted({word for text in texts for word in re.findall(r"\w+|[^\w\s]", text.lower())})
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    BertTokenizer(vocab={word: i for i, word in enumerate(vocabulary)}).save_pretrained(folder)
    torch.manual_seed(0)
    shape = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
    shape |= {"vocab_size": len(vocabulary), "intermediate_size": 64}
    BertModel(BertConfig(max_position_embeddings=128, **shape)).save_pretrained(folder)
    return folder


# For test_model_folder.py: a field of another task's config, and each command that reads a
# model folder, as a function of the folder (what follows it never matters: it is checked
# first).
FOREIGN_FIELD = "image_size"
MODEL_FOLDER_COMMANDS = {
    "predict": lambda model_dir: predict([str(model_dir), "Not bad."]),
}


def class_counts(datasets: Datasets) -> list[str]:
    """The start of describe's line of each class: its name and training count."""
    names = datasets.preprocess.class_names
    counts = datasets.train_targets.flatten().bincount(minlength=len(names))
    return [f"{name} {count} " for name, count in zip(names, counts.tolist(), strict=True)]


def described_lines(datasets: Datasets) -> list[str]:
    """For test_describe.py: the lines, or their starts, that describe shows of user_data's
    datasets besides every task's (words one space apart)."""
    return class_counts(datasets)
