"""Bad answers are refused before anything is written, with the rule in the message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from generator import REPO_ROOT
from generator.render import render

# (question, bad value, words the error must contain to name the broken rule)
BAD_ANSWERS = [
    ("package_name", "class", "keyword"),
    ("package_name", "torch", "shadow"),
    ("package_name", "json", "shadow"),
    ("package_name", "my-pkg", "identifier"),
    ("project_name", "", "must not be empty"),
]
IDS = [f"{question}={value!r}" for question, value, _ in BAD_ANSWERS]


@pytest.mark.parametrize(("question", "value", "rule"), BAD_ANSWERS, ids=IDS)
def test_api_refuses(tmp_path: Path, question: str, value: str, rule: str) -> None:
    dest = tmp_path / "project"
    with pytest.raises(ValueError, match=rule) as error:
        render({question: value}, dest)
    assert question in str(error.value)
    assert not dest.exists()


@pytest.mark.parametrize(("question", "value", "rule"), BAD_ANSWERS, ids=IDS)
def test_copier_cli_refuses(tmp_path: Path, question: str, value: str, rule: str) -> None:
    dest = tmp_path / "project"
    command = [sys.executable, "-m", "copier", "copy", "--defaults", "--vcs-ref", "HEAD"]
    command += ["-d", f"{question}={value}", str(REPO_ROOT), str(dest)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert rule in result.stderr and question in result.stderr, result.stderr
    assert not dest.exists()


def test_api_accepts_a_valid_package_name(tmp_path: Path) -> None:
    project = render({"project_name": "Digit Lab 2", "package_name": "digit_lab2"}, tmp_path / "p")
    assert (project / "src" / "digit_lab2").is_dir()
