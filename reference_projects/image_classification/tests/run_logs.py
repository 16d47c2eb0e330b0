"""What the tests read back from a run's metrics.jsonl."""

import json
from pathlib import Path

# Timings differ between runs; everything else a run logs must be identical.
TIMINGS = {"samples_per_s", "tokens_per_s", "data_wait", "eval_s"}


def logged(output_dir: Path) -> list[dict]:
    """Every record of output_dir/metrics.jsonl, without its timings."""
    lines = (output_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMINGS} for line in lines]
