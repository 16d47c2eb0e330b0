"""The benchmarks run with a tiny setting and write well-formed JSON (no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TIMEOUT_S, project_env

from generator import REPO_ROOT


def run_bench(script: str, *args: str) -> None:
    command = [sys.executable, str(REPO_ROOT / "bench" / script), *args]
    env = project_env()
    env["PYTHONPATH"] = str(REPO_ROOT)  # for `generator`, installed or not
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr


def test_render_time(tmp_path: Path) -> None:
    out = tmp_path / "render.json"
    run_bench("render_time.py", "--repeats", "1", "--max-combinations", "1", "--out", str(out))
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["benchmark"] == "render_time"
    assert result["default_render_s"]["repeats"] == 1
    assert result["default_render_s"]["median"] > 0
    assert result["matrix"]["combinations"] == 1
    assert result["matrix"]["total_s"] > 0
    assert result["environment"]["torch"]


@pytest.mark.slow
def test_train_time(tmp_path: Path) -> None:
    out = tmp_path / "train.json"
    task = "image_classification"
    run_bench("train_time.py", "--task", task, "--out", str(out), "--", "--max_steps", "4")
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["benchmark"] == "train_time"
    assert result["train_args"] == ["--max_steps", "4"]
    (run,) = result["runs"]
    assert run["task"] == task
    for key in ("value", "baseline_value", "wall_s", "samples_per_s", "process_s"):
        assert isinstance(run[key], int | float), key
    assert result["environment"]["python"]


@pytest.mark.slow
def test_step_overhead(tmp_path: Path) -> None:
    out = tmp_path / "steps.json"
    run_bench("step_overhead.py", "--steps", "8", "--repeats", "1", "--out", str(out))
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["benchmark"] == "step_overhead"
    loops = {"bare", "bare_fused", "dataloader", "accelerate", "trainer", "trainer_ema"}
    assert loops <= set(result["median_s"])
    assert min(result["relative_to_fastest"].values()) == 1.0
    assert result["trainer_vs_bare"] > 0 and result["trainer_vs_bare_fused"] > 0
    assert result["ema_vs_trainer"] > 0


@pytest.mark.slow
def test_loader_throughput(tmp_path: Path) -> None:
    out = tmp_path / "loaders.json"
    args = [
        "--samples",
        "2000",
        "--images",
        "40",
        "--batch",
        "8",
        "--workers",
        "0,1",
        "--steps",
        "2",
    ]
    run_bench("loader_throughput.py", *args, "--repeats", "1", "--out", str(out))
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["benchmark"] == "loader_throughput"
    assert result["in_memory"]["speedup"] > 0
    decode = result["auto_workers"]
    assert set(decode["samples_per_s"]) >= {"0", "1"}
    assert 0 < decode["auto_vs_best"] <= 1.0


@pytest.mark.slow
def test_checkpoint_load(tmp_path: Path) -> None:
    out = tmp_path / "checkpoint.json"
    run_bench("checkpoint_load.py", "--megabytes", "1", "--repeats", "1", "--out", str(out))
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["benchmark"] == "checkpoint_load"
    assert 0.9 < result["megabytes"] < 1.1
    timed = {"torch_load", "load_checkpoint", "verify_only", "torch_save", "save_checkpoint"}
    assert set(result["median_s"]) == timed
    assert result["load_vs_torch_load"] > 0 and result["save_vs_torch_save"] > 0


@pytest.mark.slow
def test_check_cost(tmp_path: Path) -> None:
    """Also the proof that the process server and plain processes (`--no-server`) give the
    same verdict on a shard: one cheap combination through both, with an export stage."""
    out = tmp_path / "check.json"
    one = ["task_type=tabular_regression", "distributed=single", "mixed_precision=no"]
    one += ["compile=false", "export_target=torchscript", "tracker=none"]  # the quickest export
    run_bench("check_cost.py", "--jobs", "1", *(f"--set={s}" for s in one), "--out", str(out))
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["benchmark"] == "check_cost"
    for run in (result["server_cold_cache"], result["server"], result["no_server"]):
        assert run["combinations"] == run["passed"] == 1, run["failures"]
        assert run["cpu_s_per_combination"] > 0
        assert set(run["stage_s"]) == {"render", "lint", "train", "resume", "export"}
    assert result["cpu_ratio"] > 0


@pytest.mark.slow
def test_gpu_throughput_runs_on_a_cpu_with_tiny_workloads(tmp_path: Path) -> None:
    """The script's CPU check (its figures are for a GPU): both loops train the language
    model (tokens/s) with fp16's scaler path, which the CPU leaves off."""
    out = tmp_path / "gpu.json"
    args = ["--device", "cpu", "--tiny", "--task", "language_modeling", "--steps", "7"]
    run_bench(
        "gpu_throughput.py", *args, "--precision", "fp16", "--compile", "false", "--out", str(out)
    )
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["benchmark"] == "gpu_throughput" and result["device"] == "cpu"
    (run,) = result["runs"]
    assert run["task"] == "language_modeling"
    assert run["trainer"]["samples_per_s"] > 0 and run["bare"]["samples_per_s"] > 0
    assert (
        run["trainer_over_bare"] == run["bare"]["samples_per_s"] / run["trainer"]["samples_per_s"]
    )
    assert run["trainer"]["tokens_per_s"] == run["trainer"]["samples_per_s"] * 32  # context
    assert "mfu" not in run["trainer"]  # no GPU, no peak
