"""Every combination of choices renders into a project that reads as if written by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import reproduce

from generator.answers import Answers, load_space
from generator.checks import CHOICE_MARKERS, static_problems
from generator.render import render

SPACE = load_space()
COMBINATIONS = SPACE.combinations()


@pytest.mark.parametrize("answers", COMBINATIONS, ids=[SPACE.slug(c) for c in COMBINATIONS])
def test_combination_is_clean(tmp_path: Path, answers: Answers) -> None:
    project = render(answers, tmp_path / "project")
    problems = static_problems(project, answers)
    assert not problems, "\n".join([reproduce(answers), *problems])


def test_choice_markers_name_real_choices() -> None:
    axes = {axis.name: axis for axis in SPACE.axes}
    for question, markers in CHOICE_MARKERS.items():
        assert question in axes, f"CHOICE_MARKERS: {question} is not a question with choices"
        stale = set(markers) - set(axes[question].choices)
        assert not stale, f"CHOICE_MARKERS[{question!r}]: {stale} are not choices"
