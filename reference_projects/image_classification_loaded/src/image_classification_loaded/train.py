"""Train the model.

    python -m image_classification_loaded.train [--config FILE] [--field value ...]

`train()` reads top to bottom: config, seed and device, data, model, optimizer and
schedule, resume, the loop (step, periodic evaluation, periodic checkpoint), then the final
save and summary. Every field is described in config.py.
"""

import logging
import math
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs
from torch import nn
from tqdm import tqdm

from . import task
from .checkpoint import (
    CONFIG,
    DATA,
    MODEL,
    OPTIMIZER,
    RNG,
    CheckpointError,
    Progress,
    checkpoint_to_resume,
    gather_rng_states,
    load_model_state,
    restore_rng_states,
    save_checkpoint,
    save_weights,
)
from .config import ConfigError, TrainConfig, apply_fast_dev_run, load_config, save_config
from .data import build_datasets
from .export import ExportError, describe, export_run
from .loaders import build_loaders
from .model import build_model
from .optim import build_optimizer, learning_rate
from .resume import check_resume, resumed_progress
from .utils.curves import plot_curves
from .utils.distributed import (
    DiscardedLog,
    GlobalLogWindow,
    SharedPreemption,
    broadcast_buffers,
    check_launch,
    on_main_process,
    sum_over_processes,
    sync_batchnorm,
)
from .utils.modules import UnregisteredModuleError, assert_modules_registered
from .utils.monitor import Preempted, Preemption, Throughput, TrainingClock, TrainingDiverged
from .utils.profiling import build_profiler
from .utils.records import (
    MetricsLog,
    complete_run_info,
    peak_memory_mb,
    run_info,
    unwritable_reason,
    write_json,
)
from .utils.seed import seed_everything
from .utils.tracking import start_tracker, tracked

log = logging.getLogger("image_classification_loaded")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command-line entry point: returns the summary; bad input exits with one line.

    Exit codes: 0 done, 1 bad input or a diverged loss, 75 preempted (SIGTERM or SIGUSR1:
    a checkpoint was written, and running the same command again resumes from it).
    """
    try:
        return train(load_config(sys.argv[1:] if argv is None else argv))
    except (ConfigError, CheckpointError, UnregisteredModuleError, TrainingDiverged) as error:
        raise SystemExit(f"error: {error}") from None
    except ExportError as error:  # model/ and the checkpoints are saved; the export failed
        raise SystemExit(f"error: {error}") from None
    except Preempted as stop:
        log.warning("%s", stop)
        raise SystemExit(Preemption.EXIT_CODE) from None


def train(cfg: TrainConfig) -> dict[str, Any]:
    # --- config
    if cfg.fast_dev_run:
        cfg = apply_fast_dev_run(cfg)
    output_dir = Path(cfg.output_dir)
    checkpoint_dir = output_dir / "checkpoints"

    # --- processes, seed and device
    # The process group is set up here, from the launcher's environment, before the model
    # exists. A collective that some process never reaches fails after dist_timeout_s.
    group_options = InitProcessGroupKwargs(timeout=timedelta(seconds=cfg.dist_timeout_s))
    accelerator = Accelerator(
        cpu=cfg.cpu,
        mixed_precision="bf16",
        kwargs_handlers=[group_options],
        log_with="tensorboard",  # started by start_tracker(), just before the loop
        project_dir=output_dir,
    )
    check_launch(accelerator)
    main_process = accelerator.is_main_process  # the one process that logs and writes files
    _configure_logging(main_process)
    device = accelerator.device
    # Dropout and loader workers draw differently on each process; the initial weights are
    # rank 0's (DDP broadcasts them) and the batch order follows cfg.seed alone (loaders.py).
    rank_seed = (cfg.seed + accelerator.process_index) % 2**32
    data_generator = seed_everything(rank_seed, cfg.deterministic, not task.DYNAMIC_SHAPES)
    torch.autograd.set_detect_anomaly(cfg.detect_anomaly)

    # --- data
    datasets = build_datasets(cfg)
    train_loader, val_loader = build_loaders(
        cfg, datasets, device, data_generator, accelerator.process_index, accelerator.num_processes
    )
    batches_per_epoch = len(train_loader)
    steps_per_epoch = math.ceil(batches_per_epoch / cfg.grad_accum_steps)
    total_steps = cfg.epochs * steps_per_epoch
    if cfg.max_steps:
        total_steps = min(total_steps, cfg.max_steps)
    baseline_value = task.baseline(datasets.train_targets, datasets.val_targets)

    # --- resume: a checkpoint of another run is refused here, before anything is written
    progress, state = Progress(), None
    resume_from = checkpoint_to_resume(cfg.resume, checkpoint_dir)
    if resume_from:
        path, state = resume_from
        for note in check_resume(path, state, cfg, datasets.fingerprint, accelerator.num_processes):
            log.warning("%s", note)
        progress = resumed_progress(
            state, cfg, datasets.fingerprint, accelerator.num_processes, batches_per_epoch
        )
        log.info("resuming from %s at step %d", path, progress.step)
        if progress.total_steps not in (0, total_steps):
            log.info(
                "the run now ends at step %d instead of %d: the learning-rate decay is "
                "stretched to the new end from here on",
                total_steps,
                progress.total_steps,
            )
    progress.total_steps = total_steps
    on_main_process(accelerator, lambda: _start_run_folder(cfg, datasets.fingerprint, accelerator))

    # --- model
    model = build_model(cfg, datasets.preprocess)
    assert_modules_registered(model)  # before the optimizer, which would miss hidden layers
    model = sync_batchnorm(model, accelerator)  # before prepare() wraps it in DDP
    model.to(device)
    raw_model = model  # uncompiled: checkpoints, evaluation and exports use this one
    # Compile after moving to the device. The first step pays for compilation; timings start
    # after it. Where the task's batch shapes vary, one shape-generic graph compiled at once
    # costs less than a static graph for the first shape and a dynamic one at the second.
    model = torch.compile(model, dynamic=task.DYNAMIC_SHAPES, disable=not cfg.compile)

    # --- optimizer and schedule
    optimizer = build_optimizer(raw_model, cfg)
    # Only the model goes through prepare(): a plain optimizer step has no per-step overhead.
    model = accelerator.prepare(model)

    # --- the resumed state
    if state:
        load_model_state(raw_model, state[MODEL], path)
        optimizer.load_state_dict(state[OPTIMIZER])
        restore_rng_states(state[RNG], accelerator, data_generator)
        del state  # the checkpoint's copy of every tensor, no longer needed
    log.info(
        "%s on %s, world size %d: %d train / %d val samples, %d steps of %d samples "
        "(batch_size %d x world size %d x grad_accum_steps %d); lr is not scaled with it",
        task.TASK,
        device,
        accelerator.num_processes,
        len(datasets.train),
        len(datasets.val),
        total_steps,
        cfg.batch_size * accelerator.num_processes * cfg.grad_accum_steps,
        cfg.batch_size,
        accelerator.num_processes,
        cfg.grad_accum_steps,
    )

    def save(is_best: bool) -> None:
        progress.window_losses = window.pending_losses()  # raises if the loss diverged
        states = {
            MODEL: raw_model.state_dict(),  # no `_orig_mod.` prefixes, loads without compile
            OPTIMIZER: optimizer.state_dict(),
            CONFIG: asdict(cfg),
            DATA: datasets.fingerprint,
            RNG: gather_rng_states(accelerator, data_generator),  # one entry per process
        }
        if main_process:
            save_checkpoint(checkpoint_dir, progress, states, cfg.keep_checkpoints, is_best)
        accelerator.wait_for_everyone()  # no process runs ahead of the save, or exits before it

    # --- the loop
    run_tracker = start_tracker(accelerator, cfg, progress.step)  # one that can't start stops here
    model.train()
    clock = TrainingClock(device)  # stops during evaluation and checkpoints
    throughput = Throughput(clock)
    if main_process:
        metrics_log = MetricsLog(output_dir / "metrics.jsonl", resume_step=progress.step)
    else:
        metrics_log = DiscardedLog()
    progress_bar = tqdm(
        total=total_steps,
        initial=progress.step,
        unit="step",
        dynamic_ncols=True,
        disable=not main_process,
    )
    window_start = progress.step - len(progress.window_losses)
    window = GlobalLogWindow(
        accelerator, cfg.log_every, device, window_start, progress.window_losses, clock
    )
    micro_batches = None
    saved_step = progress.step  # the newest checkpoint's step: a resumed run starts from it
    eval_metrics: dict[str, float] = {}
    train_start = time.perf_counter()
    with (
        build_profiler(cfg.profile, output_dir / "profile") as profiler,
        SharedPreemption(accelerator) as stop,
        run_tracker,  # closes the tracker's run, as failed or killed, if the loop stops early
    ):
        while progress.step < total_steps and not stop.requested:
            if micro_batches is None:
                train_loader.batch_sampler.set_epoch(progress.epoch, start_batch=progress.batch)
                micro_batches = iter(train_loader)
            # A step accumulates grad_accum_steps micro-batches; an epoch's last group may be
            # short, so each loss is divided by the size of its own group.
            group = min(cfg.grad_accum_steps, batches_per_epoch - progress.batch)
            for index in range(group):
                fetch_start = time.perf_counter()
                inputs, targets = next(micro_batches)
                inputs = inputs.to(device, non_blocking=True)
                targets = targets.to(device, non_blocking=True)
                window.data_s += time.perf_counter() - fetch_start
                # DDP averages gradients over processes in backward: on the group's last
                # micro-batch only, since the others' gradients are summed locally first.
                with nullcontext() if index == group - 1 else accelerator.no_sync(model):
                    loss = task.compute_loss(model(inputs), targets) / group
                    accelerator.backward(loss)
                window.add_loss(loss.detach())
                window.samples += len(targets)
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            lr = learning_rate(progress.step, cfg, total_steps)
            for param_group in optimizer.param_groups:
                param_group["lr"] = lr
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            profiler.step()
            window.end_step()
            progress.step += 1
            progress.batch += group
            end_of_epoch = progress.batch == batches_per_epoch
            if end_of_epoch:
                progress.epoch, progress.batch, micro_batches = progress.epoch + 1, 0, None
            if throughput.start is None:  # the first step (compilation, warm-up) is not timed
                throughput.first_step_done(window.counted_samples())
            last_step = progress.step == total_steps

            if progress.step % cfg.log_every == 0 or last_step:
                stop.agree()  # a signal to any process stops all of them after this step
                record = window.close(progress.epoch, grad_norm, lr)
                metrics_log.write(record)
                accelerator.log(tracked("train", record), step=progress.step)
                progress_bar.update(progress.step - progress_bar.n)
                progress_bar.set_postfix(loss=f"{record['loss']:.4f}", lr=f"{record['lr']:.2e}")
                throughput.logged(record["samples"])
                window = GlobalLogWindow(
                    accelerator, cfg.log_every, device, progress.step, [], clock
                )

            is_best = False
            if _due(cfg.eval_every, progress.step, end_of_epoch) or last_step:
                with clock.paused("eval") as evaluation:
                    eval_metrics = evaluate(raw_model, val_loader, accelerator, datasets.preprocess)
                metric = eval_metrics[task.METRIC]
                record = {"step": progress.step, "epoch": progress.epoch, "split": "val"}
                record["eval_s"] = evaluation.seconds
                metrics_log.write(record | eval_metrics)
                accelerator.log(tracked("val", eval_metrics), step=progress.step)
                log.info("step %d | val %s %.4f", progress.step, task.METRIC, metric)
                is_best = _improves(metric, progress.best_metric)
                if is_best:
                    progress.best_metric, progress.best_step = metric, progress.step
            if _due(cfg.checkpoint_every, progress.step, end_of_epoch) or is_best or last_step:
                with clock.paused("checkpoint"):
                    save(is_best)
                saved_step = progress.step
        if stop.requested:
            if saved_step < progress.step:  # unless just saved: the grace period is short
                save(is_best=False)
            raise Preempted(f"stopped by signal {stop.requested} after step {progress.step}")
    progress_bar.close()
    metrics_log.close()
    wall_s = time.perf_counter() - train_start
    if not eval_metrics:  # resumed a run that had already finished
        eval_metrics = evaluate(raw_model, val_loader, accelerator, datasets.preprocess)

    # --- final save and summary
    model_dir = output_dir / "model"
    if main_process:
        save_weights(raw_model, model_dir)
        datasets.preprocess.save(model_dir / "preprocess.json")
        save_config(cfg, model_dir / "config.yaml")
    samples_per_s = throughput.per_second()  # training steps only, after the first
    summary = {
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
        "wall_s": wall_s,
        "eval_s": clock.paused_s["eval"],
        "checkpoint_s": clock.paused_s["checkpoint"],
        "peak_mem_mb": peak_memory_mb(device),
    }
    if main_process:
        write_json(output_dir / "summary.json", summary)
        plot_curves(output_dir, task.METRIC, baseline_value)  # curves.png, from metrics.jsonl
        complete_run_info(output_dir / "run.json")
    accelerator.wait_for_everyone()  # no process leaves before the run folder is written
    accelerator.end_training()  # closes the tracker's run and the process group
    if cfg.export_at_end and main_process:  # the final weights (the latest checkpoint), verified
        log.info("%s", describe(export_run(output_dir, checkpoint="latest")))
    log.info(
        "done: %s %.4f (baseline %.4f) in %.1f s",
        task.METRIC,
        summary["value"],
        baseline_value,
        wall_s,
    )
    return summary


# --- helpers


def evaluate(
    model: nn.Module, loader, accelerator: Accelerator, preprocess: Any
) -> dict[str, float]:
    """The task's metrics over the whole evaluation set, every sample counted once.

    Runs the uncompiled module: evaluation's last batch is smaller and BatchNorm runs in
    eval mode, and each would cost a compiled graph a recompilation.
    """
    # Each process evaluates its share of the set with rank 0's weights and buffers.
    broadcast_buffers(model, accelerator)
    device = accelerator.device
    model.eval()
    release_cached_memory(device)  # training's cached blocks, for evaluation's other shapes
    metrics = task.Metrics(device, preprocess)
    with torch.inference_mode():
        for inputs, targets in loader:
            inputs = inputs.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            metrics.update(model(inputs), targets)
    release_cached_memory(device)  # and evaluation's, before training allocates again
    model.train()
    return sum_over_processes(metrics, accelerator).compute()


def release_cached_memory(device: torch.device) -> None:
    """Return the CUDA caching allocator's free blocks to the device: around evaluation only,
    where the shapes change; on every step it would only cost a device sync."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _due(every: int, step: int, end_of_epoch: bool) -> bool:
    """Periodic work: every `every` steps, or at the end of each epoch when `every` is 0."""
    return step % every == 0 if every else end_of_epoch


def _improves(value: float, best: float | None) -> bool:
    if best is None:
        return True
    return value > best if task.HIGHER_IS_BETTER else value < best


def _start_run_folder(cfg: TrainConfig, fingerprint: str, accelerator: Accelerator) -> None:
    """config.yaml and run.json; an output_dir that is not writable fails here, before
    training, not at the first checkpoint."""
    output_dir = Path(cfg.output_dir)
    reason = unwritable_reason(output_dir)
    if reason:
        raise ConfigError(f"--output_dir: cannot write to '{output_dir}' ({reason})")
    save_config(cfg, output_dir / "config.yaml")
    info = run_info(cfg, fingerprint, accelerator.num_processes, accelerator.device)
    write_json(output_dir / "run.json", info)


def _configure_logging(main_process: bool) -> None:
    """Log lines go through tqdm.write, so they never break the progress bar. The processes
    other than the main one log errors only: their warnings would repeat the main one's."""
    handler = _TqdmHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO if main_process else logging.ERROR)
    log.propagate = False


class _TqdmHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        tqdm.write(self.format(record), file=sys.stderr)


if __name__ == "__main__":
    main()
