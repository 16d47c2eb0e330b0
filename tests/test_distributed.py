"""`distributed`: a multi render ships its launchers and runs its README's CPU command in 2
processes; a single render carries nothing of it, a multi render nothing of sharding; on 2
processes, a sharded render trains as a multi render does (DDP).

The rendered project's own tests/test_distributed.py proves the training itself (2 processes
against 1, rank 0 alone writing, resume across process counts, SIGTERM to every process and
the exact rerun, the collective timeout).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import project_env

from generator.answers import load_space
from generator.render import render

SPACE = load_space()
LAUNCH_TIMEOUT_S = 300
# What only a multi render may contain.
MULTI_ONLY = ("torch.distributed", "SyncBatchNorm", "torchrun", "dist_timeout_s", "no_sync")


# What only a sharded render may contain.
SHARDED_ONLY = ("fully_shard", "FSDP", "DTensor", "torch.distributed.checkpoint")
# The runs compared between DDP and sharding: a language model (its blocks sharded), long
# enough for clipping, warmup and decay, without dropout (each process draws its own masks).
TWO_PROCESS_RUN = [
    *("--max_steps", "6", "--log_every", "1", "--eval_every", "3", "--checkpoint_every", "3"),
    *("--warmup_steps", "1", "--lr", "1e-3", "--dropout", "0", "--cpu", "true"),
    *("--batch_size", "16"),
]


@pytest.fixture(scope="module")
def multi(tmp_path_factory) -> Path:
    return render(SPACE.defaults() | {"distributed": "multi"}, tmp_path_factory.mktemp("multi"))


def test_multi_ships_launch_configs_and_a_requeueing_slurm_script(multi: Path) -> None:
    for name in ("one-machine", "several-machines"):
        config = yaml.safe_load((multi / "configs" / "accelerate" / f"{name}.yaml").read_text())
        assert config["distributed_type"] == "MULTI_GPU" and config["mixed_precision"] == "no"
    for name, warning in (("train", "USR1"), ("sweep", "B:TERM")):
        script = multi / "slurm" / f"{name}.sbatch"
        assert os.access(script, os.X_OK)
        subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
        text = script.read_text()
        for needed in ("#SBATCH --requeue", f"#SBATCH --signal={warning}@", "scontrol requeue"):
            assert needed in text, f"{name}.sbatch: {needed}"
        assert "-eq 75" in text, name
    readme = (multi / "README.md").read_text()
    for needed in ("## Several GPUs and machines", "Global batch", "Learning rate", "--cpu true"):
        assert needed in readme, needed


def test_single_has_no_distributed_code(tmp_path: Path) -> None:
    project = render(SPACE.defaults(), tmp_path / "single")
    assert not (project / "configs" / "accelerate").exists()
    assert not (project / "slurm").exists()
    for path in project.rglob("*"):
        if path.is_file() and path.suffix in {".py", ".md", ".yaml", ".yml", ""}:
            text = path.read_text(errors="replace")
            found = [word for word in MULTI_ONLY if word in text]
            assert not found, f"{path.relative_to(project)} mentions {found}"


def test_multi_has_no_sharding_code(multi: Path) -> None:
    """Its code and configs hold no sharding; its README names sharding only where it says
    when and how to move there."""
    for path in multi.rglob("*"):
        if path.is_file() and path.suffix in {".py", ".yaml", ".yml", ""}:
            text = path.read_text(errors="replace")
            found = [word for word in SHARDED_ONLY if word in text]
            assert not found, f"{path.relative_to(multi)} mentions {found}"
    paragraphs = (multi / "README.md").read_text().split("\n\n")
    sharding = [p for p in paragraphs if any(word in p for word in SHARDED_ONLY)]
    assert len(sharding) == 1, sharding
    assert sharding[0].startswith("**When the model outgrows one GPU.**"), sharding[0]
    assert "copier update --data distributed=sharded" in sharding[0]


def train_in_two_processes(project: Path, out: Path) -> list[dict]:
    """TWO_PROCESS_RUN of `project` under torchrun: its metrics.jsonl records."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node"]
    package = next(project.glob("src/*/train.py")).parent.name
    argv += ["2", "-m", f"{package}.train", *TWO_PROCESS_RUN, "--output_dir", str(out)]
    env = project_env() | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(project / "src")}
    done = subprocess.run(
        argv, cwd=project, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_sharded_trains_as_ddp_on_two_processes(tmp_path: Path) -> None:
    """The same losses, bit for bit: sharding gathers the very weights DDP holds whole, and
    reduces the same gradients. The gradient norm (summed shard by shard, then over the
    processes, another order of float sums), the clipping that divides by it, and so the
    evaluation, agree to float32 rounding: 1e-6, where a missing reduction of the gradients
    moves them by percents."""
    answers = SPACE.defaults() | {"task_type": "language_modeling"}
    runs = {}
    for distributed in ("multi", "sharded"):
        project = render(answers | {"distributed": distributed}, tmp_path / distributed)
        runs[distributed] = train_in_two_processes(project, tmp_path / f"{distributed}-run")
    ddp, sharded = runs["multi"], runs["sharded"]
    assert [(r["step"], r.get("split")) for r in sharded] == [
        (r["step"], r.get("split")) for r in ddp
    ]
    for got, want in zip(sharded, ddp, strict=True):
        if "split" not in want:
            assert got["loss"] == want["loss"], want["step"]
        numbers = {k: v for k, v in want.items() if isinstance(v, float) and "_s" not in k}
        numbers = {k: v for k, v in numbers.items() if k not in ("data_wait", "tokens_per_s")}
        assert {k: got[k] for k in numbers} == pytest.approx(numbers, rel=1e-6), want["step"]


@pytest.mark.slow
def test_readme_cpu_command_trains_in_two_processes(multi: Path, tmp_path: Path) -> None:
    """The README's exact command, with torchrun run as `python -m torch.distributed.run`."""
    readme = (multi / "README.md").read_text()
    line = re.search(r"^torchrun --standalone --nproc_per_node 2 .*$", readme, re.M)
    assert line, "the README gives no 2-process CPU command"
    command = shlex.split(line.group(0).split("#")[0])
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "torch.distributed.run", *command[1:], "--output_dir", str(out)]
    child = subprocess.Popen(
        argv,
        cwd=multi,
        env=project_env() | {"OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # torchrun and its workers, killed together below
    )
    try:
        output, _ = child.communicate(timeout=LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        output = f"still running after {LAUNCH_TIMEOUT_S} s"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    assert child.returncode == 0, output[-6000:]
    run = out / "fast-dev-run"  # where a fast dev run writes, under --output_dir
    assert json.loads((run / "run.json").read_text())["world_size"] == 2
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "split" not in r] == [1, 2, 3, 4]  # each step once
    assert (run / "model" / "model.safetensors").is_file()
