"""Your labelled texts: train.csv or train.jsonl (and val.csv or val.jsonl) in --data_dir,
read and checked line by line. Bad input is a ConfigError naming the file and the line."""

import csv
import io
import json
import os
from pathlib import Path

from .config import ConfigError, TrainConfig


def split_files(folder: Path, split: str = "train", required: bool = False) -> Path | None:
    """`folder`'s `split`.csv or `split`.jsonl; None when neither exists and not `required`."""
    candidates = (folder / f"{split}.csv", folder / f"{split}.jsonl")
    for path in candidates:
        problem = _not_a_file(path)
        if problem:
            raise ConfigError(
                f"--data_dir: '{path}' {problem}; {split}.csv or {split}.jsonl must be a file "
                "of examples"
            )
    found = [path for path in candidates if path.is_file()]
    if len(found) > 1:
        raise ConfigError(
            f"--data_dir: '{folder}' holds both {split}.csv and {split}.jsonl; keep one"
        )
    if not found and required:
        held = ", ".join(sorted(path.name for path in folder.iterdir())) or "nothing"
        raise ConfigError(
            f"--data_dir: '{folder}' holds no {split}.csv or {split}.jsonl (it holds: {held})"
        )
    return found[0] if found else None


def _not_a_file(path: Path) -> str | None:
    """What `path` is instead of a file, as a message says it; None for a file (or a link to
    one) and for nothing at all, which the caller reports as missing."""
    if path.is_file() or not os.path.lexists(path):
        return None
    if path.is_dir():
        return "is a folder, not a file"
    if path.is_symlink():
        return "is a symbolic link that leads to no file (a loop, or its target is missing)"
    return "is not a regular file"


def read_examples(path: Path, cfg: TrainConfig) -> list[tuple[int, str, str]]:
    """(line number, text, label) of every example in a .csv or .jsonl file.

    Bad input is a ConfigError naming the option, the file, and the line where it applies.
    """
    where = f"--data_dir '{path}'"
    try:
        content = path.read_text(encoding="utf-8-sig")  # -sig: a leading BOM is not text
    except UnicodeDecodeError as error:
        raise ConfigError(f"{where}: not UTF-8 text (byte {error.start})") from None
    except OSError as error:
        raise ConfigError(f"{where}: cannot read it ({error.strerror})") from None
    if not content.strip():
        raise ConfigError(f"{where}: the file is empty")
    read = _read_csv if path.suffix == ".csv" else _read_jsonl
    rows = []
    for line, text, label in read(content, where, cfg.text_field, cfg.label_field):
        if not text.strip():
            raise ConfigError(f"{where} line {line}: the text is empty")
        if not label.strip():
            raise ConfigError(f"{where} line {line}: the label is empty")
        rows.append((line, text, label.strip()))
    if not rows:
        raise ConfigError(f"{where}: holds a header but no examples")
    return rows


def _read_csv(content: str, where: str, text_field: str, label_field: str):
    reader = csv.DictReader(io.StringIO(content, newline=""))
    columns = reader.fieldnames or []
    for name, option in ((text_field, "--text_field"), (label_field, "--label_field")):
        if name not in columns:
            raise ConfigError(
                f"{where}: no column '{name}' in its header ({', '.join(columns)}); "
                f"name the column with {option}"
            )
    for row in reader:
        text, label = row[text_field], row[label_field]
        if text is None or label is None:
            raise ConfigError(f"{where} line {reader.line_num}: fewer fields than the header")
        if None in row:  # csv.DictReader's key for the fields past the header's
            raise ConfigError(
                f"{where} line {reader.line_num}: more fields than the header (quote a text "
                'that holds commas: "like, this")'
            )
        yield reader.line_num, text, label


def _read_jsonl(content: str, where: str, text_field: str, label_field: str):
    for line, raw in enumerate(content.split("\n"), 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as error:
            raise ConfigError(
                f"{where} line {line}: not valid JSON ({error.msg} at column {error.colno})"
            ) from None
        if not isinstance(record, dict):
            raise ConfigError(f"{where} line {line}: expected a JSON object")
        for name, option in ((text_field, "--text_field"), (label_field, "--label_field")):
            if name not in record:
                raise ConfigError(
                    f"{where} line {line}: no key '{name}' (keys: {', '.join(record)}); "
                    f"name the key with {option}"
                )
        text, label = record[text_field], record[label_field]
        if not isinstance(text, str):
            raise ConfigError(f"{where} line {line}: '{text_field}' is not a string")
        if isinstance(label, bool) or not isinstance(label, str | int):
            raise ConfigError(f"{where} line {line}: '{label_field}' is not a string or integer")
        for name, value in ((text_field, text), (label_field, str(label))):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as error:  # JSON escapes half a surrogate pair: \ud800
                raise ConfigError(
                    f"{where} line {line}: '{name}' holds \\u{ord(value[error.start]):04x}, half "
                    "of a UTF-16 surrogate pair, which is not text: escape the whole pair, or "
                    "write the character itself"
                ) from None
        yield line, text, str(label)
