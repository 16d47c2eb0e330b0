"""Your tables: CSV files with a header row and numbers only, read and checked line by line.
Bad input is a ConfigError naming the file, and the column and line where it applies."""

import csv
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .config import ConfigError


@dataclass(frozen=True)
class Table:
    """A numeric table as read from a CSV file (or the embedded data)."""

    columns: tuple[str, ...]
    values: np.ndarray  # (rows, columns) float64
    lines: np.ndarray  # (rows,) the line of the file each row came from, for messages
    source: str  # where the rows came from, as a message names it

    def column(self, name: str) -> np.ndarray:
        return self.values[:, self.columns.index(name)]

    def features(self, names: tuple[str, ...]) -> np.ndarray:
        return self.values[:, [self.columns.index(name) for name in names]]

    def rows(self, index: np.ndarray) -> "Table":
        return Table(self.columns, self.values[index], self.lines[index], self.source)


def read_csv(path: Path, source: str = "") -> Table:
    """A CSV file with a header row and numbers only, or a one-line ConfigError.

    `source` starts each message (the option that named the file, e.g. "--data_dir: ").
    Non-numeric columns are refused rather than guessed at: encode categories as numbers
    (one 0/1 column per category) before training, and the same way before prediction.
    """
    where = f"{source}'{path}'"
    try:
        with open(path, newline="", encoding="utf-8-sig") as file:
            reader = csv.reader(file)
            header = next(reader, None)
            if header is None or not any(name.strip() for name in header):
                raise ConfigError(
                    f"{where} is empty; expected a header row naming the columns, then one "
                    "row of numbers per sample"
                )
            columns = tuple(name.strip() for name in header)
            _check_column_names(columns, where)
            rows, lines = [], []
            for row in reader:
                if row:
                    rows.append(_parse_row(row, columns, where, reader.line_num))
                    lines.append(reader.line_num)
    except OSError as error:
        raise ConfigError(f"{where}: cannot read it ({error.strerror})") from None
    except (UnicodeDecodeError, csv.Error) as error:
        raise ConfigError(f"{where} is not a UTF-8 CSV file ({type(error).__name__})") from None
    values = np.array(rows, dtype=np.float64).reshape(len(rows), len(columns))
    return Table(columns, values, np.array(lines, dtype=np.int64), f"'{path}'")


def _check_column_names(columns: tuple[str, ...], where: str) -> None:
    for index, name in enumerate(columns):
        if not name:
            raise ConfigError(f"{where}: column {index + 1} of the header has no name")
        if columns.index(name) != index:
            raise ConfigError(f"{where}: the header names column '{name}' twice")


def _parse_row(row: list[str], columns: tuple[str, ...], where: str, line: int) -> list[float]:
    if len(row) != len(columns):
        raise ConfigError(
            f"{where}: line {line} has {len(row)} fields, the header has {len(columns)}"
        )
    values = []
    for name, text in zip(columns, row, strict=True):
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not np.isfinite(value):
            found = f"'{text.strip()}'" if text.strip() else "an empty cell"
            raise ConfigError(
                f"{where}: column '{name}' holds {found} on line {line}; every value must be "
                "a finite number (encode categories as 0/1 columns, fill or drop missing values)"
            )
        values.append(value)
    return values


def not_a_file(path: Path) -> str | None:
    """What `path` is instead of a file, as a message says it; None for a file (or a link to
    one) and for nothing at all, which the caller reports as missing."""
    if path.is_file() or not os.path.lexists(path):
        return None
    if path.is_dir():
        return "is a folder, not a file"
    if path.is_symlink():
        return "is a symbolic link that leads to no file (a loop, or its target is missing)"
    return "is not a regular file"
