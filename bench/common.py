"""What every benchmark records beside its numbers, and where it writes them."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import copier
import torch

RESULTS = Path(__file__).resolve().parent / "results"


def environment() -> dict[str, Any]:
    """The machine and versions, since a timing means nothing without them."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "copier": copier.__version__,
        "cuda": torch.cuda.is_available(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def write_result(name: str, result: dict[str, Any], out: Path | None) -> Path:
    """Write `result` as JSON to `out`, or to bench/results/NAME-TIMESTAMP.json."""
    if out is None:
        out = RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return out
