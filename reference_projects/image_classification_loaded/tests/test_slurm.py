"""slurm/train.sbatch as SLURM runs it, with stand-ins for srun and scontrol on the PATH: the
SIGUSR1 that `--signal=USR1@300` sends every task stops both processes with a checkpoint and
exit 75, the script requeues its job, and the requeued job resumes from that checkpoint."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from calls import as_arguments

PROJECT = Path(__file__).resolve().parents[1]
JOB_ID = "4242"
STEPS = 40

# srun: one task per SLURM_NTASKS with its task ids, each a process of its own that SLURM
# signals directly (their pids go to $TASK_PIDS); the step's exit code is the highest task's.
SRUN = """#!/bin/bash
while [[ "$1" == --* ]]; do shift; done
pids=()
for ((task = 0; task < SLURM_NTASKS; task++)); do
    SLURM_PROCID=$task SLURM_LOCALID=$task "$@" &
    pids+=($!)
    echo $! >> "$TASK_PIDS"
done
status=0
for pid in "${pids[@]}"; do
    wait "$pid"
    code=$?
    if ((code > status)); then status=$code; fi
done
exit $status
"""
# scontrol: the job's one node, and a requeue noted in $REQUEUED.
SCONTROL = """#!/bin/bash
case "$1" in
    show) echo 127.0.0.1 ;;
    requeue) echo "$2" >> "$REQUEUED" ;;
esac
"""


def cluster(tmp_path: Path) -> dict[str, str]:
    """The environment of a job of 2 tasks on one node, with the stand-ins first on the PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = f'#!/bin/sh\nexec "{sys.executable}" "$@"\n'  # the project's environment, active
    for name, script in (("srun", SRUN), ("scontrol", SCONTROL), ("python", python)):
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(PROJECT / "src"),
        "SLURM_JOB_ID": JOB_ID,
        "SLURM_JOB_NODELIST": "node-1",
        "SLURM_NTASKS": "2",
        "SLURM_CPUS_PER_TASK": "1",
        "MASTER_PORT": str(port),
        "TASK_PIDS": str(tmp_path / "task-pids"),
        "REQUEUED": str(tmp_path / "requeued"),
    }


def steps_logged(metrics: Path) -> list[int]:
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    records = [json.loads(line) for line in lines if line.endswith("}")]
    return [record["step"] for record in records if "split" not in record]


def test_sigusr1_checkpoints_exits_75_and_the_requeued_job_resumes(
    short_run_in, embedded_args, tmp_path
):
    environment = cluster(tmp_path)
    fields = short_run_in(tmp_path / "unused", *embedded_args, "--cpu", "true")
    fields = [field for field in fields if not field.startswith("--output_dir")]
    # Epochs enough that max_steps ends the run whatever the task's data.
    schedule = {"max_steps": STEPS, "epochs": 1000, "checkpoint_every": 100, "eval_every": 100}
    fields += as_arguments(schedule)
    command = ["bash", str(PROJECT / "slurm" / "train.sbatch"), *fields]
    run = tmp_path / "outputs" / f"slurm-{JOB_ID}"
    (tmp_path / "outputs").mkdir()
    with open(tmp_path / "job.log", "w") as log:
        job = subprocess.Popen(command, cwd=tmp_path, env=environment, stdout=log, stderr=log)
        deadline = time.monotonic() + 180
        while len(steps_logged(run / "metrics.jsonl")) < 2:
            assert job.poll() is None, (tmp_path / "job.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the job never logged 2 steps"
            time.sleep(0.01)
        for pid in (tmp_path / "task-pids").read_text().split():
            os.kill(int(pid), signal.SIGUSR1)
        assert job.wait(timeout=180) == 75, (tmp_path / "job.log").read_text()[-3000:]
    said = (tmp_path / "job.log").read_text()
    assert f"preempted: requeueing job {JOB_ID}" in said
    assert (tmp_path / "requeued").read_text().split() == [JOB_ID]
    stopped_at = steps_logged(run / "metrics.jsonl")[-1]
    assert stopped_at < STEPS, "the job ended before its signal"
    latest = (run / "checkpoints" / "latest").read_text().strip()
    assert latest == f"step-{stopped_at:06d}.pt"

    # The requeued job: the same script, the same job id and output_dir.
    (tmp_path / "task-pids").unlink()
    requeued = subprocess.run(
        command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300
    )
    assert requeued.returncode == 0, requeued.stderr[-3000:]
    assert f"resuming from outputs/slurm-{JOB_ID}/checkpoints/{latest}" in requeued.stderr
    assert steps_logged(run / "metrics.jsonl") == list(range(1, STEPS + 1))  # each step once
    assert (tmp_path / "requeued").read_text().split() == [JOB_ID]  # not requeued again
