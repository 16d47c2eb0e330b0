"""Training end to end: outputs, reproducibility, fitting, resuming."""

import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tracker_setup import changes_after_its_run

from tabular_regression import evaluate, state, task
from tabular_regression import train as train_module
from tabular_regression.config import (
    FAST_DEV_RUN_DIR,
    FAST_DEV_RUN_VAL_BATCHES,
)
from tabular_regression.data import build_datasets
from tabular_regression.evaluate import release_cached_memory
from tabular_regression.optim import learning_rate
from tabular_regression.processes import process_loaders
from tabular_regression.train import main
from tabular_regression.utils.seed import seed_everything


def read_records(output_dir: Path) -> list[dict]:
    """The training records of metrics.jsonl (no evaluations)."""
    lines = (output_dir / "metrics.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if "split" not in record]


def read_losses(output_dir: Path) -> list[float]:
    return [record["loss"] for record in read_records(output_dir)]


def test_fast_dev_run_trains_evaluates_and_saves(tmp_path, cfg, monkeypatch):
    evaluated = []

    def recording(cfg, datasets, *args):
        evaluated.append(len(datasets.val))
        return process_loaders(cfg, datasets, *args)

    monkeypatch.setattr(train_module, "process_loaders", recording)
    summary = main(["--output_dir", str(tmp_path), "--fast_dev_run"])
    run = tmp_path / FAST_DEV_RUN_DIR
    assert summary["steps"] == 4
    # The first validation batches only, of a validation split that holds more.
    first_batches = FAST_DEV_RUN_VAL_BATCHES * cfg.batch_size
    assert len(build_datasets(cfg).val) > first_batches
    assert evaluated == [first_batches]
    for name in ("config.yaml", "run.json", "metrics.jsonl", "summary.json"):
        assert (run / name).is_file(), name
    assert (run / "checkpoints" / "latest").read_text().strip() == "step-000004.pt"
    assert {p.name for p in (run / "model").iterdir()} >= {
        "model.safetensors",
        "preprocess.json",
        "config.yaml",
    }
    written = json.loads((run / "summary.json").read_text())
    assert written["metric"] == task.METRIC and written["value"] == summary["value"]
    assert {"seed", "git_commit", "libraries", "data_fingerprint"} <= json.loads(
        (run / "run.json").read_text()
    ).keys()


def test_a_fast_dev_run_in_a_finished_run_trains_afresh_and_leaves_the_run(short_run, tmp_path):
    """Run in a finished run's folder, it would otherwise resume past its last step, train
    nothing, pass, and overwrite the run's config.yaml, run.json and model/."""
    run = tmp_path / "run"

    def files() -> dict[Path, bytes]:
        files = [p for p in run.rglob("*") if p.is_file() and not changes_after_its_run(p)]
        return {path: path.read_bytes() for path in files}

    main(short_run("--max_steps", "5"))
    before = files()
    for _ in range(2):  # a second fast dev run starts afresh too, whatever the first left
        summary = main([*short_run("--max_steps", "5"), "--fast_dev_run"])
        assert summary["steps"] == 4
        logged = read_losses(run / FAST_DEV_RUN_DIR)
        assert len(logged) == 4, "every step of the fast dev run trains and logs"
    after = files()
    assert {p: after[p] for p in before} == before
    assert all(p.is_relative_to(run / FAST_DEV_RUN_DIR) for p in after.keys() - before.keys())


class FakeClock:
    """time.perf_counter for a test: 1 ms a call, plus what the test adds."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1e-3
        return self.now

    def taking(self, seconds: float, work):
        def timed(*args, **kwargs):
            self.now += seconds
            return work(*args, **kwargs)

        return timed


def test_throughput_leaves_out_evaluation_and_checkpoints(short_run, tmp_path, monkeypatch):
    """They get seconds of their own (eval_s, checkpoint_s); samples_per_s and data_wait,
    of each log record and of the summary, count training steps only, and the set-up before
    the first step (here the profiler's, made slow) is no step's."""
    clock, pause_s = FakeClock(), 100.0
    monkeypatch.setattr(time, "perf_counter", clock)
    for module, name in (
        (train_module, "evaluate"),
        (state, "save_checkpoint"),
        (train_module, "start_profiler"),
    ):
        monkeypatch.setattr(module, name, clock.taking(pause_s, getattr(module, name)))
    summary = main(short_run("--eval_every", "1", "--checkpoint_every", "1"))
    steps = summary["steps"]
    assert min(summary["eval_s"], summary["checkpoint_s"]) >= steps * pause_s
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    train = [record for record in map(json.loads, lines) if "split" not in record]
    val = [record for record in map(json.loads, lines) if "split" in record]
    assert len(train) == len(val) == steps and all(r["eval_s"] >= pause_s for r in val)
    # Each window after the first spans an evaluation and a checkpoint; the first, the set-up.
    assert all(r["samples"] / r["samples_per_s"] < 1 for r in train)
    timed_samples = sum(record["samples"] for record in train[1:])
    assert timed_samples / summary["samples_per_s"] < 1


def test_profile_traces_three_steps_after_two_of_warm_up(short_run, tmp_path):
    main(short_run("--profile", "true"))
    trace = json.loads((tmp_path / "run" / "profile" / "trace.json").read_text())
    names = {event.get("name", "") for event in trace["traceEvents"]}
    traced = sorted(name for name in names if name.startswith("ProfilerStep#"))
    assert traced == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]


def test_same_seed_same_losses_other_seed_other_losses(short_run, tmp_path):
    main(short_run(output_dir=tmp_path / "a"))
    main(short_run(output_dir=tmp_path / "b"))
    main(short_run("--seed", "1", output_dir=tmp_path / "c"))
    first, again, other = (read_losses(tmp_path / run) for run in "abc")
    assert len(first) == 6
    assert first == again
    assert first != other


def ctrl_c_on_call(function, number: int, after: bool = False):
    """`function`, sending this process Ctrl-C (SIGINT) on its call numbered `number`
    (1-based): before the call, or `after` it returns (once torch.save has written a file)."""
    calls = []

    def pressed(*args, **kwargs):
        calls.append(1)
        if len(calls) == number and not after:
            os.kill(os.getpid(), signal.SIGINT)
        result = function(*args, **kwargs)
        if len(calls) == number and after:
            os.kill(os.getpid(), signal.SIGINT)
        return result

    return pressed


@pytest.mark.parametrize(
    ("where", "stopped_at"),
    [("in-a-step", 2), ("in-an-evaluation", 3), ("twice", None)],
)
def test_ctrl_c_checkpoints_its_step_and_the_same_command_resumes(
    short_run, tmp_path, monkeypatch, capsys, where, stopped_at
):
    main(short_run(output_dir=tmp_path / "whole"))
    if where == "in-a-step":  # during step 2
        monkeypatch.setattr(task, "compute_loss", ctrl_c_on_call(task.compute_loss, 2))
    elif where == "in-an-evaluation":  # the first, at step 3
        monkeypatch.setattr(train_module, "evaluate", ctrl_c_on_call(evaluate.evaluate, 1))
    else:  # at step 2, then again while its checkpoint is written: it stops at once
        monkeypatch.setattr(task, "compute_loss", ctrl_c_on_call(task.compute_loss, 2))
        monkeypatch.setattr(torch, "save", ctrl_c_on_call(torch.save, 1, after=True))
    interrupted = tmp_path / "interrupted"
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        main(short_run(output_dir=interrupted))
    monkeypatch.undo()
    said = capsys.readouterr().err
    assert stopped.value.code == 130 and "Traceback" not in said
    assert not list(interrupted.rglob("*.tmp")), "a partial file was left"
    if stopped_at is None:
        assert "interrupted: stopped at once" in said, said
        assert not list(interrupted.glob("checkpoints/step-*"))
    else:
        assert f"interrupted (Ctrl-C) after step {stopped_at}, which is checkpointed" in said
        latest = (interrupted / "checkpoints" / "latest").read_text().strip()
        assert latest == f"step-{stopped_at:06d}.pt"
    summary = main(short_run(output_dir=interrupted))  # the same command resumes
    assert summary["steps"] == 6
    assert read_losses(interrupted) == read_losses(tmp_path / "whole")
    whole = load_file(tmp_path / "whole" / "model" / "model.safetensors")
    resumed = load_file(interrupted / "model" / "model.safetensors")
    assert all(torch.equal(whole[key], resumed[key]) for key in whole)


def test_cudnn_autotunes_only_where_the_task_has_static_shapes(short_run):
    main(short_run("--deterministic", "false"))  # the default, which short_run sets on CUDA
    assert torch.backends.cudnn.benchmark is (not task.DYNAMIC_SHAPES)
    try:
        seed_everything(0, deterministic=True, static_shapes=True)
        assert torch.backends.cudnn.benchmark is False  # never when runs must be exact
    finally:
        seed_everything(0)
    assert torch.backends.cudnn.benchmark is False


def test_cached_memory_is_released_around_each_evaluation_only(short_run, monkeypatch):
    released = []
    monkeypatch.setattr(evaluate, "release_cached_memory", released.append)
    main(short_run())  # 6 steps, evaluated at steps 3 and 6
    assert len(released) == 2 * 2, "before and after each evaluation, never on a step"
    freed = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: freed.append(True))
    release_cached_memory(torch.device("cpu"))
    assert freed == []
    release_cached_memory(torch.device("cuda"))
    assert freed == [True]


def test_warmup_takes_at_most_a_fifth_of_the_run(cfg):
    cfg = dataclasses.replace(cfg, warmup_steps=50)
    peak = [step for step in range(200) if learning_rate(step, cfg, 200) == cfg.lr]
    assert peak == [40]  # warmup cut to 40 steps
    peak = [step for step in range(1000) if learning_rate(step, cfg, 1000) == cfg.lr]
    assert peak == [50]  # warmup as asked


def test_a_run_of_few_steps_warns_with_the_fix(cfg, caplog, monkeypatch):
    # train.py's logging setup stops propagation; caplog listens at the root logger.
    monkeypatch.setattr(train_module.log, "propagate", True)
    few = dataclasses.replace(cfg, epochs=3, max_steps=0, grad_accum_steps=1)
    assert train_module._total_steps(few, 12) == 36
    assert "only 36 optimizer steps (3 epochs of 12)" in caplog.text
    assert "raise --epochs or lower --batch_size" in caplog.text
    caplog.clear()
    assert train_module._total_steps(dataclasses.replace(few, epochs=10), 12) == 120
    assert train_module._total_steps(dataclasses.replace(few, max_steps=20), 12) == 20  # chosen
    assert not caplog.text


def test_early_stopping_ends_the_run_at_the_evaluation_that_exhausts_its_patience(
    short_run, tmp_path
):
    """A plateau: at a learning rate of 1e-9 no evaluation beats the first by 0.5. Of those at
    steps 2, 4, 6 and 8, the third without improvement (step 8) ends the run the usual way:
    a checkpoint of that step, model/ and the summary."""
    stop = ["--early_stopping_patience", "3", "--early_stopping_min_delta", "0.5"]
    summary = main(short_run("--max_steps", "20", "--eval_every", "2", "--lr", "1e-9", *stop))
    run = tmp_path / "run"
    assert summary["stopped_early"] is True and summary["steps"] == 8
    assert json.loads((run / "summary.json").read_text()) == summary
    evaluated = [r["step"] for r in map(json.loads, (run / "metrics.jsonl").open()) if "split" in r]
    assert evaluated == [2, 4, 6, 8]
    assert (run / "checkpoints" / "latest").read_text().strip() == "step-000008.pt"
    assert (run / "model" / "model.safetensors").is_file()
    never = main(short_run("--max_steps", "10", output_dir=tmp_path / "never"))  # patience 0
    assert never["stopped_early"] is False and never["steps"] == 10


# Accumulated micro-batches sum their gradients in another order than one batch does: float32
# sums agree to about 1e-6 relative.
ACCUMULATION_RTOL = 1e-5


def test_accumulated_micro_batches_step_as_one_batch_as_large(short_run, tmp_path, monkeypatch):
    """4 micro-batches of 4 samples, then a step: the loss and gradient norm of one batch of
    16, on a model without dropout (drawn per batch shape) or BatchNorm (whose statistics
    are per micro-batch)."""
    build_model = train_module.build_model

    def without_batchnorm(cfg, preprocess):
        model = build_model(cfg, preprocess)
        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if isinstance(child, torch.nn.modules.batchnorm._BatchNorm):
                    setattr(module, name, torch.nn.Identity())
        return model

    monkeypatch.setattr(train_module, "build_model", without_batchnorm)
    one_step = ("--dropout", "0", "--max_steps", "1", "--eval_every", "100")
    main(short_run(*one_step, "--batch_size", "4", "--grad_accum_steps", "4"))
    main(short_run(*one_step, "--batch_size", "16", output_dir=tmp_path / "whole"))
    accumulated, whole = (read_records(tmp_path / run)[0] for run in ("run", "whole"))
    assert accumulated["samples"] == whole["samples"] == 16
    for name in ("loss", "grad_norm"):
        assert accumulated[name] == pytest.approx(whole[name], rel=ACCUMULATION_RTOL), name


def test_refuses_to_run_as_one_of_several_processes(short_run, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # as a launcher sets it for each of 2 processes
    with pytest.raises(SystemExit, match="distributed=single"):
        main(short_run())


def test_a_log_file_gets_a_few_lines_instead_of_a_progress_bar(short_run, capsys):
    """stderr that is not a terminal (a SLURM or CI log, `make train > log`) holds log lines
    at log steps, 30 s apart at the most often, and the last; never a bar's refreshes."""
    main(short_run())
    logged = capsys.readouterr().err
    assert "\r" not in logged
    assert "step 1/6 | loss" in logged and "step 6/6 | loss" in logged
    assert "step 2/6" not in logged  # a short run: the first log step and the last


def test_a_terminal_gets_the_progress_bar(short_run, capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    main(short_run())
    shown = capsys.readouterr().err
    assert "\r" in shown and "6/6" in shown
    assert "step 6/6 | loss" not in shown
