"""Train the model.

    python -m semantic_segmentation.train [--config FILE] [--field value ...]

`train()` reads top to bottom: config; the Accelerator, seed and device; data; where the
run starts (a new run or a checkpoint to resume); model, optimizer and the resumed state; the
loop (step, periodic evaluation, periodic checkpoint); then the final save and summary.
Every field is described in config.py.
"""

import logging
import math
import sys
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from torch import nn

from . import task
from .average import NoAverage, WeightAverage, weight_average
from .checkpoint import Progress
from .config import TrainConfig, apply_fast_dev_run, load_config
from .data import Preprocess, build_datasets
from .evaluate import early_stopping, evaluate
from .loaders import Datasets
from .model import build_model
from .optim import FEW_STEPS, TrainStep, build_optimizer
from .precision import prepare
from .processes import (
    close_processes,
    distribute_model,
    on_main_process,
    preemption,
    process_loaders,
    process_seed,
    progress_report,
    start_accelerator,
    start_log_window,
    start_profiler,
)
from .resume import resume_point
from .run_folder.folder_lock import refuse_if_in_use, release_run_folder
from .run_folder.records import finish_run_folder, peak_memory_mb, start_run_folder
from .run_log import open_run_log
from .state import TrainingState
from .storage import whole_weights
from .utils.errors import UserError
from .utils.modules import assert_modules_registered
from .utils.monitor import Preempted, Throughput, TrainingClock, stopped_at_once
from .utils.seed import seed_everything

log = logging.getLogger("semantic_segmentation")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command-line entry point: returns the summary; bad input exits with one line.

    Exit codes: 0 done, 1 bad input or a diverged loss, 75 preempted (SIGTERM or SIGUSR1)
    and 130 interrupted (Ctrl-C): a checkpoint of the step it stopped at was written, and
    running the same command again resumes from it; after a second Ctrl-C, from the last one.
    """
    try:
        return train(load_config(sys.argv[1:] if argv is None else argv))
    except UserError as error:  # bad input, a full disk, a diverged loss: named in one line
        raise SystemExit(f"error: {error}") from None
    except Preempted as stop:
        log.warning("%s", stop)
        raise SystemExit(stop.exit_code) from None
    except KeyboardInterrupt:  # a second Ctrl-C, or one outside the loop
        raise stopped_at_once() from None


def train(cfg: TrainConfig) -> dict[str, Any]:
    # --- config
    cfg = apply_fast_dev_run(cfg) if cfg.fast_dev_run else cfg
    output_dir = Path(cfg.output_dir)

    # --- the Accelerator, seed and device
    accelerator = start_accelerator(cfg)
    device = accelerator.device
    seed = process_seed(cfg, accelerator)
    data_generator = seed_everything(seed, cfg.deterministic, not task.DYNAMIC_SHAPES)
    torch.autograd.set_detect_anomaly(cfg.detect_anomaly)

    # --- data
    datasets = build_datasets(cfg)
    train_loader, val_loader = process_loaders(cfg, datasets, accelerator, data_generator)
    batches_per_epoch = len(train_loader)
    total_steps = _total_steps(cfg, batches_per_epoch)
    baseline_value = task.baseline(datasets.train_targets, datasets.val_targets)

    # --- resume: a folder in use or a checkpoint of another run is refused before any write
    on_main_process(accelerator, lambda: refuse_if_in_use(output_dir))
    progress, resumed_from, state = resume_point(
        cfg, datasets.fingerprint, accelerator.num_processes, batches_per_epoch, total_steps
    )
    on_main_process(accelerator, lambda: start_run_folder(cfg, datasets, accelerator))

    # --- model, optimizer and the resumed state
    model, raw_model, average = _model_on_device(cfg, datasets.preprocess, accelerator)
    optimizer = build_optimizer(raw_model, cfg)
    train_step = TrainStep(
        *prepare(accelerator, model, optimizer), accelerator, cfg, total_steps, average
    )
    training_state = TrainingState(cfg, accelerator, raw_model, data_generator, train_step)
    stopping = early_stopping(cfg, accelerator)  # and a sweep's pruning of its trial
    training_state.restore(state, resumed_from)
    log.info("%s on %s: %s", task.TASK, device, _describe(cfg, datasets, accelerator, total_steps))

    # --- the loop
    train_step.model.train()
    micro_batches, saved_step, eval_metrics = None, progress.step, {}
    with (
        open_run_log(accelerator, cfg, progress) as run_log,  # metrics.jsonl, and any tracker
        progress_report(accelerator, progress) as report,
        start_profiler(accelerator, cfg, output_dir) as profiler,
        preemption(accelerator, train_step) as stop,
    ):
        clock = TrainingClock(device)  # after the run log opens; stops for eval and checkpoints
        throughput = Throughput(clock)
        window = start_log_window(accelerator, cfg, progress, clock)
        while progress.step < total_steps and not stop.requested and not stopping.stops(progress):
            if micro_batches is None:
                train_loader.batch_sampler.set_epoch(
                    progress.epoch, progress.batch, progress.shuffle
                )
                micro_batches = iter(train_loader)
            group = min(cfg.grad_accum_steps, batches_per_epoch - progress.batch)
            grad_norm, lr = train_step(micro_batches, group, progress.step, window)
            profiler.step()
            progress.step, progress.batch = progress.step + 1, progress.batch + group
            end_of_epoch = progress.batch == batches_per_epoch
            if end_of_epoch:
                progress.epoch, progress.batch, micro_batches = progress.epoch + 1, 0, None
            throughput.step_done(window.counted_samples())
            last_step = progress.step == total_steps

            if progress.step % cfg.log_every == 0 or last_step:
                stop.agree()  # every process stops after this step if any was signalled
                record = window.close(progress.epoch, grad_norm, lr)
                record |= task.rates(record["samples_per_s"], raw_model, cfg, device)
                record |= train_step.precision.log_fields()  # the precision's counts, if any
                run_log.write(record)
                report.show(progress.step, record)
                throughput.logged(record["samples"])
                window.restart(progress.step)

            if _due(cfg.eval_every, progress.step, end_of_epoch) or last_step:
                with clock.paused("eval") as evaluation:
                    eval_metrics = evaluate(
                        average.module, val_loader, accelerator, datasets.preprocess
                    )
                record = {"step": progress.step, "epoch": progress.epoch, "split": "val"}
                record |= {"eval_s": evaluation.seconds} | eval_metrics
                run_log.write(record)
                log.info("step %d | val %s %.4f", progress.step, task.METRIC, record[task.METRIC])
                stopping.record(progress, record[task.METRIC])
            is_best = progress.best_step == progress.step  # this step's evaluation, the best
            if _due(cfg.checkpoint_every, progress.step, end_of_epoch) or is_best or last_step:
                with clock.paused("checkpoint"):
                    training_state.save(progress, window, datasets.fingerprint, is_best)
                saved_step = progress.step
        if saved_step < progress.step:  # stopped by a signal or early: that step is saved too
            training_state.save(progress, window, datasets.fingerprint, is_best=False)
        if stop.requested:
            raise Preempted(stop.requested, progress.step)
    if not eval_metrics:  # resumed a run that had already finished
        eval_metrics = evaluate(average.module, val_loader, accelerator, datasets.preprocess)

    # --- final save and summary
    summary = _summary(progress, eval_metrics, baseline_value, batches_per_epoch, throughput)
    summary["stopped_early"] = stopping.stops(progress)
    summary |= task.rates(summary["samples_per_s"], raw_model, cfg, device)
    summary |= train_step.precision.log_fields()
    weights = whole_weights(average.module, accelerator)  # of every process's shards, if any
    on_main_process(
        accelerator, lambda: finish_run_folder(cfg, weights, datasets.preprocess, summary)
    )
    close_processes(accelerator, train_step)
    release_run_folder(output_dir)
    log.info("done: %(metric)s %(value).4f (baseline %(baseline_value).4f)", summary)
    return summary


# --- helpers


def _model_on_device(
    cfg: TrainConfig, preprocess: Preprocess, accelerator: Accelerator
) -> tuple[nn.Module, nn.Module, NoAverage | WeightAverage]:
    """The model on the device: the one to train, the one to save and evaluate (as built,
    whatever prepare() wraps the first in), and the average of its weights (ema_decay)."""
    model = build_model(cfg, preprocess)
    assert_modules_registered(model)  # before the optimizer, which would miss hidden layers
    model = model.to(accelerator.device)
    average = weight_average(model, cfg.ema_decay)  # a copy, before any process changes it
    raw_model = distribute_model(model, average, cfg, accelerator)  # before prepare() wraps it
    return raw_model, raw_model, average


def _total_steps(cfg: TrainConfig, batches_per_epoch: int) -> int:
    steps_per_epoch = math.ceil(batches_per_epoch / cfg.grad_accum_steps)
    steps = cfg.epochs * steps_per_epoch
    if cfg.max_steps:
        return min(steps, cfg.max_steps)
    if steps < FEW_STEPS:
        log.warning(
            f"only {steps} optimizer steps ({cfg.epochs} epochs of {steps_per_epoch}), too few "
            f"to train well: raise --epochs or lower --batch_size for at least {FEW_STEPS}"
        )
    return steps


def _summary(
    progress: Progress,
    eval_metrics: dict[str, float],
    baseline_value: float,
    batches_per_epoch: int,
    throughput: Throughput,
) -> dict[str, Any]:
    """summary.json: the final evaluation beside the baseline, and the run's size and speed."""
    samples_per_s = throughput.per_second()  # training steps only, after the first
    clock = throughput.clock
    return {
        "task": task.TASK,
        "metric": task.METRIC,
        "value": eval_metrics[task.METRIC],
        "baseline_value": baseline_value,
        "higher_is_better": task.HIGHER_IS_BETTER,
        "best_value": progress.best_metric,
        "best_step": progress.best_step,
        "steps": progress.step,
        "epochs": progress.epoch + progress.batch / batches_per_epoch,
        "samples_per_s": samples_per_s,
        "wall_s": clock.wall_s(),
        "eval_s": clock.paused_s["eval"],
        "checkpoint_s": clock.paused_s["checkpoint"],
        "peak_mem_mb": peak_memory_mb(clock.device),
        "pruned": progress.pruned,  # by a sweep's pruner (stopped_early is true too)
    }


def _due(every: int, step: int, end_of_epoch: bool) -> bool:
    """Periodic work: every `every` steps, or at the end of each epoch when `every` is 0."""
    return step % every == 0 if every else end_of_epoch


def _describe(cfg: TrainConfig, data: Datasets, accelerator: Accelerator, steps: int) -> str:
    processes = accelerator.num_processes
    batch = cfg.batch_size * processes * cfg.grad_accum_steps
    return (
        f"{len(data.train)} train / {len(data.val)} val samples, {steps} steps "
        f"of {batch} samples (batch_size {cfg.batch_size} x {processes} processes x "
        f"grad_accum_steps {cfg.grad_accum_steps}); lr is not scaled with the batch"
    )


if __name__ == "__main__":
    main()
