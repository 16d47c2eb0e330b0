"""Render one combination of answers through copier's Python API."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path

import copier
import yaml
from copier.errors import DirtyLocalWarning

from generator import REPO_ROOT
from generator.answers import Answer

ANSWERS_FILE = ".copier-answers.yml"


class RenderError(ValueError):
    """The destination can't take a render; the message is one line."""


def render(answers: Mapping[str, Answer], dest: Path, *, template: Path = REPO_ROOT) -> Path:
    """Render `template` into `dest` with `answers` (defaults for the rest) and return `dest`.

    `vcs_ref="HEAD"` makes copier render the working tree, uncommitted changes included;
    without it copier would check out the newest tag and test a release instead of the change.
    """
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise RenderError(f"destination {dest} is not an empty directory")
    with warnings.catch_warnings():
        # Uncommitted template changes are what a developer renders on purpose.
        warnings.simplefilter("ignore", DirtyLocalWarning)
        copier.run_copy(
            str(template),
            str(dest),
            data=dict(answers),
            vcs_ref="HEAD",
            defaults=True,
            unsafe=False,
            quiet=True,
        )
    return dest


def package_of(project: Path) -> str:
    """The import name of a rendered project, as its answers file records it."""
    answers = yaml.safe_load((Path(project) / ANSWERS_FILE).read_text(encoding="utf-8"))
    return answers["package_name"]
