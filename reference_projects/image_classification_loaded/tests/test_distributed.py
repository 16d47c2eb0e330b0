"""Several processes train as one: 2 processes with half the batch each match 1 process with
the whole batch, every process ends each run with the same weights (the model as built,
BatchNorm included, too), 2 processes evaluate every sample once with rank 0's BatchNorm
statistics, only rank 0 writes, a checkpoint of 2 processes resumes exactly on 2 and
loads on 1 (and one of 1 on 2) with a line saying what is not exact, SIGTERM to every
process stops them all after one step and the same command resumes exactly, and a
collective that one process misses fails after dist_timeout_s.

The processes run on the CPU and talk over gloo, started by torchrun as in the README; one
launch runs every multi-process run (tests/multiprocess_runs.py), with a timeout, and its
whole process group is killed afterwards whatever happened.
"""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from calls import LEAN, as_arguments
from multiprocess_runs import without_batchnorm
from run_logs import assert_same_end, logged, weights

from image_classification_loaded import train as train_module
from image_classification_loaded.checkpoint import load_checkpoint
from image_classification_loaded.config import load_config
from image_classification_loaded.data import build_datasets
from image_classification_loaded.evaluate import evaluate
from image_classification_loaded.loaders import build_loaders
from image_classification_loaded.model_folder import load_trained, read_config
from image_classification_loaded.train import main

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"
LAUNCH = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
LAUNCH_TIMEOUT_S = 240  # the whole launch; a hang fails the tests instead of stalling them
# --dist_timeout_s of the launch that times a missed collective. The other launch's runs
# share one process group, set up by the first with RUN_TIMEOUT_S: ample for a loaded
# machine's slowest step, checkpoint or export, which the other process waits for.
COLLECTIVE_TIMEOUT_S, RUN_TIMEOUT_S = 10, 300
STEPS, HALF_BATCH = 6, 16
PREEMPTED_AT = 4  # a log step of the runs that log every 2 steps
PREEMPTED = {  # runs preempted at step 4, and the fields they add to the others'
    "preempted": [],  # checkpoints at 3 and 6: stopping writes one of step 4
    "preempted-at-a-checkpoint": ["--checkpoint_every", "2"],  # step 4's is written anyway
}
# bf16 autocast rounds activations to 8 bits of mantissa, and 2 processes sum a batch's
# gradients in another order than 1 process does.
RTOL = WEIGHTS_RTOL = 2e-2
# It also flips the predictions of samples near a decision boundary: compare losses and
# gradient norms, not counts such as accuracy.
COMPARED = {"loss", "grad_norm", "lr", "samples"}
# 2 processes against 1 accumulating their halves: clipping divides the gradients by their
# norm, which sharded processes sum shard by shard, then over the processes, another order
# of float sums than one process's (1e-9 of the weights' norm after 6 steps), which
# bf16 autocast turns into other roundings of the activations.
EXACT_RTOL, EXACT_WEIGHTS_RTOL = RTOL, WEIGHTS_RTOL


RUN_FIELDS = {
    "max_steps": STEPS,
    "log_every": 1,
    "eval_every": 3,
    "checkpoint_every": 3,
    "warmup_steps": 1,  # full steps from the start, so the runs move apart if they differ
    # A rate every task trains stably at: past it, a loss spike turns rounding differences
    # into different runs, and the comparison would measure chaos, not equivalence.
    "lr": 1e-3,
    "dropout": 0,  # each process draws its own masks: a random one would differ
    "cpu": True,
    "dist_timeout_s": RUN_TIMEOUT_S,
    **LEAN,
}


def run_args(output_dir: Path, *extra: str) -> list[str]:
    return as_arguments({"output_dir": output_dir, **RUN_FIELDS}, *extra)


def uneven_batch(embedded_args: list[str]) -> int:
    """A batch size for each of 2 processes whose last global validation batch leaves rank 1
    fewer samples than rank 0, or none."""
    validation = len(build_datasets(load_config(run_args(Path("unused"), *embedded_args))).val)
    for batch in range(HALF_BATCH, 0, -1):
        if 0 < validation % (2 * batch) < batch:
            return batch
    raise AssertionError(f"no batch size splits {validation} validation samples unevenly")


@pytest.fixture(scope="module")
def fine_tuning(tmp_path_factory, pretrained_folder) -> list[str]:
    """Fine-tuning the tests' small pretrained model, without its dropout (each process would
    draw its own masks), its backbone frozen for 3 steps, then learning at the head's rate:
    once it thaws, DDP must reduce its gradients too."""
    folder = shutil.copytree(pretrained_folder, tmp_path_factory.mktemp("model") / "model")
    config = json.loads((folder / "config.json").read_text())
    config |= {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    (folder / "config.json").write_text(json.dumps(config))
    return ["--pretrained", str(folder), "--freeze_backbone_steps", "3", "--backbone_lr_scale", "1"]


def assert_close_runs(
    actual: Path,
    expected: Path,
    from_step: int = 0,
    rtol: float = RTOL,
    weights_rtol: float = WEIGHTS_RTOL,
) -> None:
    """The same records logged after `from_step`, every number in them within `rtol`, and the
    final weights within `weights_rtol`, relative to the norm of all the weights together: a
    tensor that starts at zero (a bias) has too small a norm to measure rounding against."""
    got = logged(actual)
    want = [record for record in logged(expected) if record["step"] > from_step]
    assert [(r["step"], r.get("split")) for r in got] == [(r["step"], r.get("split")) for r in want]
    for record, reference in zip(got, want, strict=True):
        numbers = {key: value for key, value in reference.items() if key in COMPARED}
        assert {key: record[key] for key in numbers} == pytest.approx(numbers, rel=rtol)
    reference_weights, actual_weights = weights(expected), weights(actual)
    assert actual_weights.keys() == reference_weights.keys()
    differences = {
        key: (value - reference_weights[key]).float().norm()
        for key, value in actual_weights.items()
    }
    scale = torch.stack([w.float().norm() for w in reference_weights.values()]).norm()
    error = torch.stack(list(differences.values())).norm() / scale
    worst = max(differences, key=differences.get)
    assert error <= weights_rtol, f"relative error {error:.2e}; the largest difference in {worst}"


@pytest.fixture(scope="module")
def launched(tmp_path_factory, embedded_args, fine_tuning):
    """One launch of 2 processes running every run of `runs` below: two whole runs (no
    accumulation, and 2 micro-batches a step), the first resumed from its step-3
    checkpoint, one of the model as built with an uneven last validation batch, a profiled
    run, a run that logs every 2 steps and two preempted like it (with a checkpoint due at
    the step they stop at, and without), each followed by the same command again. The
    report of each process lists, for each run, the steps it trained and the code it
    exited with."""
    root = tmp_path_factory.mktemp("two-processes")
    reports = tmp_path_factory.mktemp("reports")
    # A run of one process with the global batch, whose checkpoint the 2 processes resume.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train_module, "build_model", without_batchnorm(train_module.build_model))
        main(run_args(root / "one", *embedded_args, "--batch_size", str(2 * HALF_BATCH)))

    def run(name: str, *extra: str) -> dict:
        args = run_args(root / name, *embedded_args, "--batch_size", str(HALF_BATCH), *extra)
        return {"args": args}

    step_3 = root / "whole" / "checkpoints" / "step-000003.pt"
    every_2 = ("--log_every", "2")
    runs = {
        "whole": run("whole"),
        "accumulated": run("accumulated", "--grad_accum_steps", "2"),
        "resumed": run("resumed", "--resume", str(step_3)),
        "from-one": run("from-one", "--resume", str(root / "one/checkpoints/step-000003.pt")),
        "as-built": run("as-built", "--batch_size", str(uneven_batch(embedded_args)))
        | {"as_built": True},
        "profiled": run("profiled", "--profile", "true"),
        "logged-every-2": run("logged-every-2", *every_2),
        # The tests' pretrained model, its backbone thawing after step 3 (fine_tuning).
        # Its export is tried before the first step on rank 0, which the others wait for.
        "fine-tuned": run("fine-tuned", *fine_tuning, "--export_at_end", "true"),
    }
    # SIGTERM reaches rank 1 a step before rank 0, as a scheduler's signal may reach the
    # processes on either side of a step: they must agree to stop at the next log step.
    sigterm = {"sigterm_during_step": [PREEMPTED_AT, PREEMPTED_AT - 1]}  # by rank
    for name, extra in PREEMPTED.items():
        runs[name] = run(name, *every_2, *extra) | sigterm
        runs[f"{name}, rerun"] = run(name, *every_2, *extra)
    report = launch(root, reports, list(runs.values()))
    for seen in report:
        seen["runs"] = dict(zip(runs, seen["runs"], strict=True))
    return root, report


def launch(
    root: Path, reports: Path, runs: list[dict], time_collective: bool = False
) -> list[dict]:
    """Launch 2 processes that run each of `runs` in turn (multiprocess_runs.py), then, with
    `time_collective`, time a collective that rank 1 misses: the report of each process,
    once the launch has ended, killed with all its processes if it hangs."""
    plan = {
        "root": str(root),
        "reports": str(reports),
        "runs": runs,
        "time_collective": time_collective,
    }
    (reports / "plan.json").write_text(json.dumps(plan))
    command = [*LAUNCH, str(TESTS / "multiprocess_runs.py"), str(reports / "plan.json")]
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    # A session of its own, so that torchrun and both workers are killed together.
    child = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = child.communicate(timeout=LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        output = f"still running after {LAUNCH_TIMEOUT_S} s"
    finally:
        with contextlib.suppress(ProcessLookupError):  # unless everything had exited
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    assert child.returncode == 0, output[-6000:]
    (root / "launch.log").write_text(output)
    return [json.loads((reports / f"report-{rank}.json").read_text()) for rank in (0, 1)]


@pytest.fixture
def one_process(tmp_path, monkeypatch, embedded_args):
    """Train in this process, with the global batch and the model the launched runs train."""
    monkeypatch.setattr(train_module, "build_model", without_batchnorm(train_module.build_model))

    def run(name: str, *extra: str) -> Path:
        main(run_args(tmp_path / name, *embedded_args, "--batch_size", str(2 * HALF_BATCH), *extra))
        return tmp_path / name

    return run


@pytest.mark.parametrize("accumulation", [1, 2])
def test_two_processes_with_half_the_batch_match_one_with_all(launched, one_process, accumulation):
    root, _ = launched
    two = root / ("whole" if accumulation == 1 else "accumulated")
    one = one_process("one", "--grad_accum_steps", str(accumulation))
    assert_close_runs(two, one)


def test_two_processes_train_exactly_as_one_accumulating_their_halves(launched, one_process):
    """The same global batch, bit for bit in any precision: 1 process that accumulates the
    two halves the 2 processes train on runs the same micro-batches, scales each gradient
    by 1/2 (exact in any float format) and adds the two, which is the same sum in either
    order. A run whose processes did not average their gradients would end percents away.
    Only evaluation, which sums each process's share first, may differ in rounding (and
    what EXACT_RTOL and EXACT_WEIGHTS_RTOL say)."""
    root, _ = launched
    one = one_process("halves", "--batch_size", str(HALF_BATCH), "--grad_accum_steps", "2")
    assert_close_runs(root / "whole", one, rtol=EXACT_RTOL, weights_rtol=EXACT_WEIGHTS_RTOL)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="2 processes on GPUs need 2 GPUs")
def test_two_gpus_with_half_the_batch_match_one_with_all(tmp_path, one_process, embedded_args):
    """The same on GPUs, over NCCL, with deterministic kernels: what is left between the
    runs is the order of float sums, where the CPU's tolerance holds, and bf16's rounding.
    cuDNN's convolutions may round their inputs to TF32 (10 bits of mantissa) on Ampere and
    newer GPUs, differently for a batch and its halves: 1e-2 covers that."""
    on_gpus = ["--cpu", "false", "--deterministic", "true"]
    two = tmp_path / "two"
    args = run_args(two, *embedded_args, "--batch_size", str(HALF_BATCH), *on_gpus)
    reports = tmp_path / "reports"
    reports.mkdir()
    report = launch(tmp_path, reports, [{"args": args}])
    assert [seen["runs"][0]["exit_code"] for seen in report] == [0, 0]
    tolerance = max(RTOL, 1e-2)
    assert_close_runs(two, one_process("one", *on_gpus), rtol=tolerance, weights_rtol=tolerance)


def test_a_backbone_that_thaws_in_two_processes_learns_from_both_halves(
    launched, one_process, fine_tuning
):
    root, _ = launched
    assert_close_runs(root / "fine-tuned", one_process("fine-tuned", *fine_tuning))
    assert (root / "fine-tuned" / "export" / "model.json").is_file()


def test_only_rank_0_writes_and_each_step_is_logged_once(launched):
    root, report = launched
    assert report[1]["writes"] == [], "rank 1 wrote files"  # the profiled run's trace included
    trace = json.loads((root / "profiled" / "profile" / "trace.json").read_text())
    assert any(event.get("name") == "ProfilerStep#2" for event in trace["traceEvents"])
    steps = [(r["step"], r.get("split")) for r in logged(root / "whole")]
    expected = [(step, None) for step in range(1, STEPS + 1)] + [(3, "val"), (6, "val")]
    assert sorted(steps, key=str) == sorted(expected, key=str)
    assert json.loads((root / "whole" / "run.json").read_text())["world_size"] == 2
    summary = json.loads((root / "whole" / "summary.json").read_text())
    assert summary["steps"] == STEPS


def test_every_process_ends_each_run_with_the_same_weights(launched):
    """Bit for bit, parameters and buffers: gradients averaged over both halves of the batch
    (a process that kept its own would drift from step 1), BatchNorm statistics given rank
    0's before every evaluation, the last of which ends each run. A run stopped by SIGTERM
    ends without one."""
    _, report = launched
    finished = [name for name, run in report[0]["runs"].items() if run["exit_code"] == 0]
    assert "as-built" in finished and len(finished) > len(PREEMPTED)
    for name in finished:
        assert report[0]["runs"][name]["weights"] == report[1]["runs"][name]["weights"], name
    digests = {report[0]["runs"][name]["weights"]["parameters"] for name in finished}
    assert len(digests) > 1  # runs that trained differently hash differently


def test_two_processes_evaluate_every_sample_once_with_rank_0s_statistics(launched):
    """The model as built (BatchNorm included where the task's has it), evaluated by 2
    processes on a validation split whose last batch is uneven: the logged metrics are those
    of one process evaluating the saved model on the whole split."""
    root, _ = launched
    model, _ = load_trained(root / "as-built" / "model")
    cfg = read_config(root / "as-built" / "model")
    datasets = build_datasets(cfg)
    _, val_loader = build_loaders(cfg, datasets, torch.device("cpu"), torch.Generator())
    # in the run's precision, as its processes evaluated (autocast moved a loss by 0.4%)
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    model = accelerator.prepare_model(model, evaluation_mode=True)
    metrics = evaluate(model, val_loader, accelerator, datasets.preprocess)
    (final,) = [r for r in logged(root / "as-built") if r.get("split") and r["step"] == STEPS]
    # Losses are float32 sums over other batches here than in 2 processes (6e-5 apart on
    # segmentation's pixels); a sample dropped or counted twice moves a metric by ~1/len(val).
    assert {name: final[name] for name in metrics} == pytest.approx(metrics, rel=2e-4)


def test_checkpoint_of_two_processes_resumes_exactly_on_two(launched):
    root, _ = launched
    after_step_3 = [record for record in logged(root / "whole") if record["step"] > 3]
    assert logged(root / "resumed") == after_step_3
    final = load_checkpoint(root / "resumed" / "checkpoints" / f"step-{STEPS:06d}.pt")
    assert len(final["rng"]) == 2  # every process's random states
    assert_same_end(root / "resumed", root / "whole", STEPS)


@pytest.mark.parametrize("name", PREEMPTED)
def test_sigterm_to_every_process_stops_them_after_one_step_and_the_rerun_is_exact(launched, name):
    """Both processes train to the same step, rank 0 alone writes one checkpoint of it, and
    each exits with 75 (the exit code of `main`: here each process goes on to the next run,
    so the launch itself exits with 0; torchrun turns a process's 75 into its own exit code
    1, which is why slurm/train.sbatch starts the processes with srun). The same command
    then resumes from that checkpoint and ends as the run that was never stopped."""
    root, report = launched
    for rank, seen in enumerate(report):
        preempted, rerun = seen["runs"][name], seen["runs"][f"{name}, rerun"]
        assert preempted["steps"] == list(range(1, PREEMPTED_AT + 1)), rank
        assert preempted["exit_code"] == 75, rank
        assert rerun["steps"] == list(range(PREEMPTED_AT + 1, STEPS + 1)), rank
        assert rerun["exit_code"] == 0, rank
    checkpoint = root / name / "checkpoints" / f"step-{PREEMPTED_AT:06d}.pt"
    assert report[0]["writes"].count(f"os.rename {checkpoint}") == 1
    assert report[1]["writes"] == []
    assert logged(root / name) == logged(root / "logged-every-2")
    assert_same_end(root / name, root / "logged-every-2", STEPS)


def test_checkpoint_of_two_processes_loads_on_one(launched, one_process, capsys):
    """One process with the global batch continues as the 2 processes did, and says what
    is not exact."""
    root, _ = launched
    checkpoint = root / "whole" / "checkpoints" / "step-000003.pt"
    resumed = one_process("resumed", "--resume", str(checkpoint))
    assert_close_runs(resumed, root / "whole", from_step=3)
    assert "written at world size 2, this run's is 1" in capsys.readouterr().err


def test_checkpoint_of_one_process_resumes_on_two(launched):
    """2 processes with half the batch each continue as the one process did: the layout of a
    checkpoint is the same for any number of processes (and for a distributed=single render)."""
    root, _ = launched
    assert_close_runs(root / "from-one", root / "one", from_step=3)
    launch_log = (root / "launch.log").read_text()
    assert launch_log.count("written at world size 1, this run's is 2") == 1  # rank 0 only


def test_a_collective_one_process_misses_fails_after_the_timeout(tmp_path, embedded_args):
    """A run sets up the process group with its --dist_timeout_s; then rank 0 calls a
    collective that rank 1 never joins, and the group gives up after that timeout."""
    timeout = ("--dist_timeout_s", str(COLLECTIVE_TIMEOUT_S), "--max_steps", "1")
    args = run_args(tmp_path / "run", *embedded_args, "--batch_size", str(HALF_BATCH), *timeout)
    reports = tmp_path / "reports"
    reports.mkdir()
    collective = launch(tmp_path, reports, [{"args": args}], time_collective=True)[0]["collective"]
    assert collective["failed"], "rank 0's collective completed without rank 1"
    assert COLLECTIVE_TIMEOUT_S - 1 <= collective["after_s"] < COLLECTIVE_TIMEOUT_S + 30


def test_processes_that_did_not_form_a_group_are_refused(short_run, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it; without --cpu no group forms
    with pytest.raises(SystemExit, match="--cpu true"):
        main(short_run())


def test_a_bad_output_dir_stops_every_process_started_without_torchrun(short_run, tmp_path):
    """srun starts each process itself (and is told not to kill the others when one fails,
    so that a preempted job can requeue), as does a plain env:// launch: rank 0's refusal
    of output_dir must stop rank 1 too, within seconds, not after dist_timeout_s."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    args = short_run("--cpu", "true", "--dist_timeout_s", "300", output_dir=blocker / "run")
    world = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
    world |= {"MASTER_PORT": str(port), "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    started = time.monotonic()
    ranks = [
        subprocess.Popen(
            [sys.executable, "-m", "image_classification_loaded.train", *args],
            env={**os.environ, **world, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    try:
        errors = [rank.communicate(timeout=120)[1] for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()
    assert time.monotonic() - started < 120
    assert [rank.returncode for rank in ranks] == [1, 1]
    assert errors[0].strip().splitlines()[-1].startswith("error: --output_dir: cannot write")
    assert "Traceback" not in errors[0] + errors[1]
    assert "error" not in errors[1]
