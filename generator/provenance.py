"""What a check's report was made on: the template's content (git tree hashes), the commit,
the date and the machine. The hashes say whether two reports checked the same template,
whichever commits and machines they ran on, and whether a report is still current."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from generator import REPO_ROOT

# What a render is made of: copier.yml, the rendered tree and the partials it includes.
TEMPLATE_PATHS = ("copier.yml", "template", "includes")


class ProvenanceError(RuntimeError):
    """git cannot say what the template is (not a checkout, git missing); one line."""


def template_commit(root: Path = REPO_ROOT) -> str:
    """The commit of the template checked, `+dirty` when the template (TEMPLATE_PATHS) has
    uncommitted changes. Other files do not count: a matrix run writes its shards' reports
    into its own checkout."""
    try:
        commit = _git("rev-parse", "HEAD", root=root)
        dirty = _git("status", "--porcelain", "--", *TEMPLATE_PATHS, root=root)
    except ProvenanceError:
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def template_trees(root: Path = REPO_ROOT) -> dict[str, str]:
    """The git hash of each of TEMPLATE_PATHS as the working tree holds it, uncommitted
    changes included (git's ignored files excepted): equal to `git rev-parse HEAD:PATH` when
    nothing is uncommitted, and the same for the same content on any commit or machine."""
    with tempfile.TemporaryDirectory(prefix="generator-index-") as scratch:
        # A scratch index: the repository's own index and files are left as they are.
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
        _git("read-tree", "HEAD", env=env, root=root)
        _git("add", "--all", "--", *TEMPLATE_PATHS, env=env, root=root)
        tree = _git("write-tree", env=env, root=root)
        return {path: _git("rev-parse", f"{tree}:{path}", root=root) for path in TEMPLATE_PATHS}


def committed_trees(commit: str = "HEAD", root: Path = REPO_ROOT) -> dict[str, str]:
    """The git hash of each of TEMPLATE_PATHS at `commit`."""
    return {path: _git("rev-parse", f"{commit}:{path}", root=root) for path in TEMPLATE_PATHS}


def commits_since(commit: str, root: Path = REPO_ROOT) -> list[str]:
    """`HASH subject` of each commit after `commit` up to HEAD that changed the template,
    newest first; ProvenanceError when `commit` is not in this history."""
    log = _git("log", "--format=%h %s", f"{commit}..HEAD", "--", *TEMPLATE_PATHS, root=root)
    return log.splitlines()


def machine(device: str = "cpu") -> dict[str, Any]:
    """The machine a check on `device` ran on, as its report records it: with the name of
    each GPU torch sees when the device is cuda."""
    found = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": _version("torch"),
    }
    return found | ({"gpus": gpu_names()} if device == "cuda" else {})


def gpu_names() -> list[str]:
    """The name of each CUDA device torch sees, asked in a fresh process (the generator does
    not import torch); none when torch or the driver cannot say."""
    command = [
        sys.executable,
        "-c",
        "import torch\n"
        "for i in range(torch.cuda.device_count()): print(torch.cuda.get_device_name(i))",
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return result.stdout.splitlines() if result.returncode == 0 else []


def now() -> str:
    """The time in UTC, to the second, as reports record it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _git(*args: str, env: dict[str, str] | None = None, root: Path = REPO_ROOT) -> str:
    command = ["git", "-C", str(root), *args]
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    except OSError as error:
        raise ProvenanceError(f"git cannot run: {error}") from None
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or ["no output"])[0]
        raise ProvenanceError(f"git {' '.join(args[:2])} failed in {root}: {reason}")
    return result.stdout.strip()


def cpu_model() -> str:
    """The processor's name (/proc/cpuinfo's model name where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float | None:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return round(pages * size / 2**30, 1)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
