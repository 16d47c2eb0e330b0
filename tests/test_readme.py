"""The README's questions table matches copier.yml, so the docs can't drift from the template."""

from __future__ import annotations

import re

from generator import REPO_ROOT
from generator.answers import load_space

ROW = re.compile(r"^\| `(\w+)` \|.*\| (.*) \|$")
SPACE = load_space()


def table_rows() -> dict[str, str]:
    """Question name -> choices cell, for every row of the README's questions table."""
    rows: dict[str, str] = {}
    for line in (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if match := ROW.match(line):
            assert match[1] not in rows, f"README: {match[1]} has two rows"
            rows[match[1]] = match[2]
    return rows


def test_table_lists_every_question_in_order() -> None:
    assert list(table_rows()) == list(SPACE.questions)


def test_table_lists_every_choice_and_the_default() -> None:
    rows = table_rows()
    for axis in SPACE.axes:
        shown = [str(choice).lower() if axis.is_bool else str(choice) for choice in axis.choices]
        cell = rows[axis.name]
        assert re.findall(r"`([^`]*)`", cell) == shown, f"README row of {axis.name}: {cell}"
        default = shown[axis.choices.index(axis.default)]
        assert f"`{default}` (default)" in cell, f"README row of {axis.name}: mark `{default}`"
