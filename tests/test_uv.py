"""uv beside pip: `uv lock` resolves a rendered project, and its `dev` dependency group (what
`uv sync` installs by default) brings the tools of the `dev` extra that pip installs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from generator.answers import load_space
from generator.render import render

# What uv says when the package index is out of reach (no network, a firewall, DNS).
UNREACHABLE = ("Failed to fetch", "error sending request", "dns error", "Connection refused")
LOADED = {"distributed": "multi", "export_target": "onnx", "tracker": "wandb"}
tomllib = pytest.importorskip("tomllib", reason="reading uv.lock needs Python 3.11's tomllib")


def test_uv_lock_resolves_a_render_with_its_development_tools(tmp_path: Path) -> None:
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed (the repository's dev extra installs it)")
    project = render(load_space().defaults() | LOADED, tmp_path / "project")
    env = {**os.environ, "UV_NO_PROGRESS": "1"}
    result = subprocess.run(
        [uv, "lock"], cwd=project, env=env, capture_output=True, text=True, timeout=600
    )
    if result.returncode != 0 and any(sign in result.stderr for sign in UNREACHABLE):
        pytest.skip(f"the package index cannot be reached: {result.stderr.strip()[-300:]}")
    assert result.returncode == 0, result.stderr
    lock = tomllib.loads((project / "uv.lock").read_text(encoding="utf-8"))
    locked = {package["name"] for package in lock["package"]}
    needed = {"torch", "accelerate", "huggingface-hub", "wandb", "onnxruntime"}
    tools = {"pytest", "ruff", "pre-commit", "pre-commit-hooks", "copier"}
    assert needed | tools <= locked, sorted((needed | tools) - locked)
    (own,) = [package for package in lock["package"] if package.get("source") == {"editable": "."}]
    assert own["dev-dependencies"]["dev"] == [{"name": own["name"], "extra": ["dev"]}]
