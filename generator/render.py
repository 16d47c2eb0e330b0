"""Render one combination of answers through copier's Python API."""

from __future__ import annotations

import os
import shutil
import subprocess
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


def template_snapshot(dest: Path, template: Path = REPO_ROOT) -> Path:
    """`template`'s copier.yml and template/ as they are now, committed to a new repository.

    Rendering from the snapshot renders exactly what `render(answers, dest)` renders from the
    working tree, but copier then clones two folders instead of this repository's whole
    history: for code that renders hundreds of combinations.
    """
    dest = Path(dest)
    dest.mkdir(parents=True)
    shutil.copy2(template / "copier.yml", dest / "copier.yml")
    shutil.copytree(template / "template", dest / "template", ignore=_IGNORED)
    identity = {"GIT_AUTHOR_NAME": "generator", "GIT_AUTHOR_EMAIL": "generator@localhost"}
    identity |= {"GIT_COMMITTER_NAME": "generator", "GIT_COMMITTER_EMAIL": "generator@localhost"}
    env = {**os.environ, **identity, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "snapshot"]):
        subprocess.run(["git", *command], cwd=dest, env=env, check=True, capture_output=True)
    return dest


_IGNORED = shutil.ignore_patterns("__pycache__", "*.py[co]")


def package_of(project: Path) -> str:
    """The import name of a rendered project, as its answers file records it."""
    answers = yaml.safe_load((Path(project) / ANSWERS_FILE).read_text(encoding="utf-8"))
    return answers["package_name"]
