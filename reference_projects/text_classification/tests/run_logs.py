"""What the tests read back from a run: its metrics.jsonl, and where it ended."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from text_classification.checkpoint import load_checkpoint
from text_classification.storage import checkpoint_tensors

# Timings differ between runs; everything else a run logs must be identical.
TIMINGS = {"samples_per_s", "tokens_per_s", "mfu", "data_wait", "eval_s"}

Points = list[tuple[int, float]]  # (step, value) in step order
Series = dict[str, Points]  # by metric name, as a tracker holds them


def logged(output_dir: Path) -> list[dict]:
    """Every record of output_dir/metrics.jsonl, without its timings."""
    lines = (output_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMINGS} for line in lines]


def logged_points(output_dir: Path, name: str, split: str | None = None) -> Points:
    """`name` by step in output_dir/metrics.jsonl: of the training records, or of `split`'s."""
    return [(r["step"], r[name]) for r in logged(output_dir) if r.get("split") == split]


def assert_same_points(tracked: Points, expected: Points) -> None:
    assert [step for step, _ in tracked] == [step for step, _ in expected]
    # Some trackers store float32.
    assert [v for _, v in tracked] == pytest.approx([v for _, v in expected], rel=1e-6)


def weights(output_dir: Path) -> dict[str, torch.Tensor]:
    """The run's final weights, as model/ holds them."""
    return load_file(output_dir / "model" / "model.safetensors")


def checkpoint_state(path: Path) -> dict:
    """A checkpoint as one process writes it, its model, weights' average and optimizer
    state in it, whole (where a sharded run kept them in shards, read from those)."""
    state = load_checkpoint(path)
    whole = state | checkpoint_tensors(state, path)
    return {key: value for key, value in whole.items() if key != "shards"}


def assert_same_end(actual: Path, expected: Path, final_step: int, where: str = "") -> None:
    """Bit for bit the same final weights (model/), and the same progress, optimizer state
    (moments, step counts, schedule) and weights' average in the checkpoint of `final_step`;
    `where` says, in a failure, where the run was interrupted."""
    want_weights, got_weights = weights(expected), weights(actual)
    assert got_weights.keys() == want_weights.keys(), where
    same = [torch.equal(got_weights[key], want_weights[key]) for key in want_weights]
    assert all(same), f"final weights differ {where}"
    final = f"checkpoints/step-{final_step:06d}.pt"
    want, got = checkpoint_state(expected / final), checkpoint_state(actual / final)
    assert got["progress"] == want["progress"], where
    assert got["average"].keys() == want["average"].keys(), where
    average = want["average"]
    assert all(torch.equal(got["average"][key], average[key]) for key in average), where
    assert got["optimizer"]["param_groups"] == want["optimizer"]["param_groups"], where
    for index, state in want["optimizer"]["state"].items():
        for name, value in state.items():
            assert torch.equal(got["optimizer"]["state"][index][name], value), (index, name, where)
