"""Small real datasets that `references sync` trains a task's default project on, beside its
default run: the default fields must hold on data a user could bring, not only on the
embedded set. The data is built here from what installed packages ship (scikit-learn's two
photos, the standard library's docstrings), so nothing is downloaded.

reference_runs trains each run and records the results in the project's
results/small-data.json, with the digest of the sources it trained from; `references check`
refuses them once the template renders other sources, and tests/test_task_targets.py holds
them to their targets.
"""

from __future__ import annotations

import csv
import importlib
import inspect
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from generator.references import Reference

SMALL_DATA_JSON = "results/small-data.json"


@dataclass(frozen=True)
class SmallDataRun:
    """One run of a task's default project on a small dataset."""

    name: str  # the run's name in small-data.json and RESULTS.md
    data: str  # what the data is, as RESULTS.md says it
    build: Callable[[Path], Path]  # writes the dataset into a folder; returns its --data_dir
    fields: tuple[str, ...] = ()  # what the run sets besides --data_dir
    fine_tunes: bool = False  # with the project's configs/pretrained.yaml and its model
    bag_of_words: bool = False  # also run the project's bag-of-words reference on the data


def photo_crops(root: Path, per_class: int, seed: int = 0) -> Path:
    """A folder of real photos in 2 classes: square crops (64 to 199 pixels, some mirrored,
    saved as JPEG) of the two photos scikit-learn ships, a temple and a flower."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_sample_images

    rng = np.random.default_rng(seed)
    for name, photo in zip(["temple", "flower"], load_sample_images().images, strict=True):
        (root / name).mkdir(parents=True)
        height, width = photo.shape[:2]
        for index in range(per_class):
            size = int(rng.integers(64, 200))
            top, left = int(rng.integers(0, height - size)), int(rng.integers(0, width - size))
            crop = Image.fromarray(photo[top : top + size, left : left + size])
            if rng.random() < 0.5:
                crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            crop.save(root / name / f"{index:03d}.jpg", quality=90)
    return root


# Three topics of the standard library, each the modules whose docstrings speak of it.
DOCSTRING_TOPICS = {
    "files": "os shutil pathlib glob tempfile zipfile tarfile io fileinput filecmp gzip bz2 "
    "lzma os.path stat fnmatch mmap csv configparser pickle shelve dbm",
    "network": "socket http.client http.server http.cookies http.cookiejar urllib.request "
    "urllib.parse smtplib ftplib poplib imaplib email.message email.utils email.parser ssl "
    "socketserver xmlrpc.client xmlrpc.server ipaddress selectors asyncio.streams "
    "wsgiref.simple_server mailbox",
    "numbers": "math cmath statistics decimal fractions random numbers operator _pydecimal "
    "datetime calendar bisect heapq array struct colorsys timeit",
}


def docstrings(module_name: str) -> set[str]:
    """The docstrings (8 words or more) of a module's classes, functions and methods."""
    module = importlib.import_module(module_name)
    found = set()
    for value in vars(module).values():
        if getattr(value, "__module__", None) != module.__name__:
            continue
        members = [value, *vars(value).values()] if inspect.isclass(value) else [value]
        for member in members:
            text = inspect.getdoc(member) if callable(member) else None
            if text and len(text.split()) >= 8:
                found.add(text)
    return found


def docstring_topics(root: Path, count: int, seed: int) -> Path:
    """A train.csv of `count` real English texts in 3 balanced classes: docstrings of the
    standard library, labelled by topic. Fields hold commas, quotes and newlines."""
    rng = random.Random(seed)
    rows = []
    for label, modules in DOCSTRING_TOPICS.items():
        texts = sorted(set().union(*(docstrings(name) for name in modules.split())))
        rng.shuffle(texts)
        rows += [(text, label) for text in texts[: count // 3]]
    rng.shuffle(rows)
    root.mkdir(parents=True)
    with open(root / "train.csv", "w", newline="", encoding="utf-8") as file:
        csv.writer(file).writerows([("text", "label"), *rows])
    return root


def _docstrings_run(count: int, seed: int, fine_tunes: bool = False) -> SmallDataRun:
    return SmallDataRun(
        name=f"docstrings-{count}-seed-{seed}" + ("-fine-tuned" if fine_tunes else ""),
        data=f"{count} docstrings of the standard library in 3 topics (seed {seed})",
        build=lambda root: docstring_topics(root, count, seed),
        fine_tunes=fine_tunes,
        bag_of_words=True,
    )


# Per task, the runs; three sets of docstrings, because one run on one set of hundreds is a
# few texts either way from the next.
SMALL_DATA = {
    "image_classification": (
        SmallDataRun(
            name="photos-160",
            data="160 crops of 2 photos (scikit-learn's temple and flower), 64 to 199 pixels",
            build=lambda root: photo_crops(root, per_class=80),
            fields=("--image_size", "32", "--image_channels", "3"),
        ),
    ),
    "text_classification": (
        _docstrings_run(450, 0),
        _docstrings_run(450, 1),
        _docstrings_run(600, 2),
        _docstrings_run(450, 0, fine_tunes=True),
    ),
}


def small_data_runs(ref: Reference) -> tuple[SmallDataRun, ...]:
    """The small-data runs of a reference project: its task's, for its default project."""
    return SMALL_DATA.get(str(ref.answers["task_type"]), ()) if ref.is_default else ()


BAG_OF_WORDS = re.compile(r"bag_of_words +validation accuracy ([0-9.]+)")


def bag_of_words_accuracy(printed: str) -> float:
    """The bag-of-words accuracy that the project's `reference` module printed."""
    found = BAG_OF_WORDS.search(printed)
    if found is None:
        raise ValueError(f"no bag-of-words accuracy in the reference's output:\n{printed}")
    return float(found[1])


def small_data_text(record: dict[str, Any]) -> str:
    """RESULTS.md's section on the runs of small-data.json."""
    runs = record["runs"]
    metric = runs[0]["summary"]["metric"]
    bag = any("bag_of_words" in run for run in runs)
    head = f"| data | run | validation {metric} | baseline | steps |"
    head += " bag-of-words reference |" if bag else ""
    rows = [head, "|---" * (6 if bag else 5) + "|"]
    for run in runs:
        s = run["summary"]
        kind = "fine-tuned" if run["name"].endswith("-fine-tuned") else "default fields"
        row = f"| {run['data']} | {kind} | **{s['value']:.4f}** | {s['baseline_value']:.4f} |"
        row += f" {s['steps']} |"
        row += f" {run['bag_of_words']:.4f} |" if "bag_of_words" in run else (" |" if bag else "")
        rows.append(row)
    table = "\n".join(rows)
    commands = "\n".join(run["command"] for run in runs)
    return f"""
## On small real datasets

The default fields on small datasets of real data, built from what installed packages ship
(`generator/small_data.py` in the template repository writes them to `data/NAME`), trained
on the same machine with Python {record["python"]}; 20% of each is held out for validation.

{table}

```
{commands}
```

`{SMALL_DATA_JSON}` holds these figures as JSON.
"""
