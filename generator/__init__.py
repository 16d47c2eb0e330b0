"""Enumerate and render what the Copier template in this repository produces.

copier.yml is the single source of the answer space: this package reads the questions from it
and never lists a choice itself, so adding a choice there is enough to put it in the matrix.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
COPIER_YML = REPO_ROOT / "copier.yml"
