"""`python -m generator`: matrix listing, rendering with --set, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from generator import REPO_ROOT
from generator.answers import load_space
from generator.cli import main

SPACE = load_space()


def test_matrix_lists_one_slug_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [SPACE.slug(c) for c in SPACE.combinations()]


def test_matrix_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["answers"] for row in rows] == SPACE.combinations()
    assert [row["slug"] for row in rows] == [SPACE.slug(c) for c in SPACE.combinations()]


def test_module_entry_point() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "generator", "matrix"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert SPACE.slug(SPACE.defaults()) in result.stdout.splitlines()


def test_render_with_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    axis = next(axis for axis in SPACE.axes if axis.choices[-1] != axis.default)
    dest = tmp_path / "project"
    sets = ["--set", f"{axis.name}={axis.choices[-1]}", "--set", "project_name=Digit Lab"]
    assert main(["render", str(dest), *sets]) == 0
    assert capsys.readouterr().out.strip() == str(dest)
    answers = yaml.safe_load((dest / ".copier-answers.yml").read_text(encoding="utf-8"))
    assert answers[axis.name] == axis.choices[-1]
    assert answers["project_name"] == "Digit Lab"
    assert answers["package_name"] == "digit_lab"
    others = {a.name: a.default for a in SPACE.axes if a.name != axis.name}
    assert {name: answers[name] for name in others} == others


@pytest.mark.parametrize(
    ("item", "words"),
    [
        ("mixed_precision=fp8", ["mixed_precision", "'fp8'", "allowed:"]),
        ("compile=maybe", ["compile", "allowed: true, false"]),
        ("no_such_question=1", ["unknown question 'no_such_question'", "project_name"]),
        ("package_name=class", ["package_name", "keyword"]),
    ],
)
def test_bad_set_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], item: str, words: list[str]
) -> None:
    dest = tmp_path / "project"
    assert main(["render", str(dest), "--set", item]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    for word in words:
        assert word in captured.err
    assert not dest.exists()


def test_render_refuses_a_non_empty_destination(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "keep.txt").write_text("mine\n", encoding="utf-8")
    assert main(["render", str(tmp_path)]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]
