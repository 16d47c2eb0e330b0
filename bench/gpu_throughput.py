"""Speed on a GPU: `python bench/gpu_throughput.py [--task TASK ...] [--steps 300] [--out FILE]`.

For each task, renders its project with the chosen precision and compile answers, then
trains one workload sized to keep a GPU busy twice, each in a process of its own:

  trainer  the rendered project's `python -m PACKAGE.train`, its own data loading included
  bare     a hand-written loop over the same model (the project's build_model), batch,
           loss, precision (autocast, and a GradScaler for fp16), compile, AdamW and
           clipping, on one batch of the project's data already on the device

and prints samples/s, the trainer's time per sample over the bare loop's (the goal is at
most 1.03), peak memory, and for the transformer tasks tokens/s and MFU against the GPU's
dense bf16 peak (the language-modeling project's flops.py table; none for a GPU it does not
list). For the convolutional tasks on CUDA it also times the bare loop in channels_last
memory format, which AMP convolutions often run faster in. Each loop's first steps
(compilation, cuDNN's autotuning) are not timed.

`--device cpu --tiny` runs the same on a CPU with small workloads: it proves the script, not
a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import environment, write_result

from generator.answers import load_space
from generator.render import package_of, render

# Per task: fields of a run big enough to keep an H100-class GPU busy, and the tiny ones of
# --tiny. The language model is a GPT of 57 M parameters (8 layers of width 768).
WORKLOADS: dict[str, dict[str, Any]] = {
    "image_classification": {"image_size": 64, "width": 64, "batch_size": 256},
    "text_classification": {
        "width": 512,
        "heads": 8,
        "layers": 6,
        "max_length": 128,
        "batch_size": 128,
    },
    "tabular_regression": {"width": 2048, "hidden_layers": 4, "batch_size": 256},
    "language_modeling": {"context": 256, "width": 768, "heads": 12, "layers": 8, "batch_size": 64},
    "semantic_segmentation": {
        "image_size": 128,
        "width": 32,
        "depth": 4,
        "num_images": 2000,
        "batch_size": 32,
    },
}
TINY: dict[str, dict[str, Any]] = {
    "image_classification": {"width": 8, "batch_size": 32},
    "text_classification": {"width": 32, "layers": 1, "batch_size": 16},
    "tabular_regression": {"width": 16, "batch_size": 32},
    "language_modeling": {"context": 32, "width": 32, "layers": 1, "corpus_bytes": 20000},
    "semantic_segmentation": {"image_size": 16, "num_images": 200, "batch_size": 8},
}
TRANSFORMERS = ("language_modeling", "text_classification")
CONVOLUTIONAL = ("image_classification", "semantic_segmentation")
WARMUP_STEPS = 5  # untimed in the bare loop: compilation and autotuning happen here


def main(argv: Sequence[str] | None = None) -> int:
    (task_axis,) = [axis for axis in load_space().axes if axis.name == "task_type"]
    tasks = list(task_axis.choices)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", action="append", choices=tasks, help="default: every task")
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps of each loop")
    parser.add_argument("--precision", choices=["no", "fp16", "bf16"], default="bf16")
    parser.add_argument("--compile", choices=["true", "false"], default="true")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--tiny", action="store_true", help="small workloads (a CPU check)")
    parser.add_argument("--out", type=Path, help="JSON file (default: bench/results/)")
    args = parser.parse_args(argv)
    if args.steps <= WARMUP_STEPS:
        parser.error(f"--steps: got {args.steps}, expected more than {WARMUP_STEPS}")

    runs = [measure(task, args) for task in args.task or tasks]
    result = {
        "benchmark": "gpu_throughput",
        "steps": args.steps,
        "precision": args.precision,
        "compile": args.compile == "true",
        "device": args.device,
        "runs": runs,
        "environment": environment() | {"gpu": runs[0]["bare"]["device_name"]},
    }
    path = write_result("gpu_throughput", result, args.out)
    for run in runs:
        print(row(run))
    print(path)
    return 0


def measure(task: str, args: argparse.Namespace) -> dict[str, Any]:
    """Render the task's project; time its trainer and the bare loop on one workload."""
    fields = (TINY if args.tiny else WORKLOADS)[task]
    answers = {"task_type": task, "mixed_precision": args.precision, "compile": args.compile}
    with tempfile.TemporaryDirectory() as tmp:
        project = render(answers, Path(tmp, "project"))
        package = package_of(project)
        run_fields = fields | {"cpu": args.device == "cpu"}
        trainer = run_trainer(project, package, run_fields, args.steps, Path(tmp, "out"))
        bare = run_bare(project, package, run_fields, args.steps, channels_last=False)
        result = {"task": task, "fields": fields, "trainer": trainer, "bare": bare}
        if task in CONVOLUTIONAL and args.device == "cuda":
            result["bare_channels_last"] = run_bare(
                project, package, run_fields, args.steps, channels_last=True
            )
    # Time per sample, the trainer's over the bare loop's: above 1 is the trainer's overhead
    result["trainer_over_bare"] = bare["samples_per_s"] / trainer["samples_per_s"]
    if "bare_channels_last" in result:
        channels_last = result["bare_channels_last"]["samples_per_s"]
        result["channels_last_speedup"] = channels_last / bare["samples_per_s"]
    return result


def run_trainer(
    project: Path, package: str, fields: dict[str, Any], steps: int, out: Path
) -> dict[str, Any]:
    """The project's own training: evaluation and a checkpoint once, after the last step
    (outside its timed window, as are the first step's compilation and warm-up)."""
    run = fields | {"output_dir": out, "max_steps": steps, "warmup_steps": 10}
    run |= {"log_every": steps, "eval_every": steps, "checkpoint_every": steps}
    command = [sys.executable, "-m", f"{package}.train"]
    command += [f"--{name}={value}" for name, value in run.items()]
    subprocess.run(command, cwd=project, env=project_env(project), check=True)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    keys = ("samples_per_s", "peak_mem_mb", "tokens_per_s", "mfu", "wall_s")
    return {key: summary[key] for key in keys if key in summary}


def run_bare(
    project: Path, package: str, fields: dict[str, Any], steps: int, channels_last: bool
) -> dict[str, Any]:
    """The bare loop, in a process of its own (a fresh compiler cache, its own peak memory)."""
    spec = {"package": package, "fields": fields, "steps": steps, "channels_last": channels_last}
    command = [sys.executable, __file__, "--bare-worker", json.dumps(spec, default=str)]
    env = project_env(project)
    done = subprocess.run(
        command, cwd=project, env=env, check=True, stdout=subprocess.PIPE, text=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def project_env(project: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(project / "src")}


def bare_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Train `spec`'s workload with a loop of a few lines: the floor the trainer is measured
    against. Runs inside the rendered project (its package on the path)."""
    import importlib.util

    import torch

    package = spec["package"]
    config = importlib.import_module(f"{package}.config")
    task = importlib.import_module(f"{package}.task")
    data = importlib.import_module(f"{package}.data")
    loaders = importlib.import_module(f"{package}.loaders")
    model_module = importlib.import_module(f"{package}.model")
    answers = (Path.cwd() / ".copier-answers.yml").read_text(encoding="utf-8")
    precision = next(
        line.split(":", 1)[1].strip().strip("'\"")
        for line in answers.splitlines()
        if line.startswith("mixed_precision:")
    )
    cfg = config.load_config([f"--{name}={value}" for name, value in spec["fields"].items()])
    device = torch.device("cpu" if cfg.cpu or not torch.cuda.is_available() else "cuda")
    torch.manual_seed(cfg.seed)
    datasets = data.build_datasets(cfg)
    train_loader, _ = loaders.build_loaders(cfg, datasets, device, torch.Generator())
    inputs, targets = (tensor.to(device) for tensor in next(iter(train_loader)))
    model = model_module.build_model(cfg, datasets.preprocess).to(device)
    if spec["channels_last"]:
        model = model.to(memory_format=torch.channels_last)
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    compiled = torch.compile(model, disable=not getattr(cfg, "compile", False))
    fp16 = precision == "fp16" and device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, fused=not fp16)
    scaler = torch.amp.GradScaler(device.type, enabled=fp16)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    autocast_on = dtype is not None and (device.type == "cuda" or precision == "bf16")

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=autocast_on):
            loss = task.compute_loss(compiled(inputs).float(), targets)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(WARMUP_STEPS):
        step()
    synchronize = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    synchronize()
    start = time.perf_counter()
    timed = spec["steps"] - WARMUP_STEPS
    for _ in range(timed):
        step()
    synchronize()
    seconds = time.perf_counter() - start
    result = {
        "samples_per_s": timed * len(targets) / seconds,
        "peak_mem_mb": torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None,
        "device_name": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    if task.TASK in TRANSFORMERS:
        result |= token_rates(package, model, cfg, inputs, result)
    return result


def token_rates(package: str, model, cfg, inputs, result: dict[str, Any]) -> dict[str, Any]:
    """Tokens/s and MFU of a transformer's bare loop: 6 FLOPs per weight and the attention's
    12 x layers x width x tokens, per token (the language-modeling project's flops.py), the
    tokens being the batch's positions, padding included."""
    import importlib.util

    import torch

    tokens_per_sample = inputs.shape[1]
    tokens_per_s = result["samples_per_s"] * tokens_per_sample
    weights = sum(p.numel() for p in model.parameters())
    flops_per_token = 6 * weights + 12 * cfg.layers * cfg.width * tokens_per_sample
    rates = {"tokens_per_s": tokens_per_s, "flops_per_token": flops_per_token}
    if importlib.util.find_spec(f"{package}.flops") is None or not torch.cuda.is_available():
        return rates  # the GPU peaks are the language-modeling project's
    flops = importlib.import_module(f"{package}.flops")
    flops_per_token = flops.flops_per_token(model, cfg.layers, cfg.width, tokens_per_sample)
    peak = flops.peak_flops(result["device_name"])
    rates["flops_per_token"] = flops_per_token
    if peak is not None:
        rates["mfu"] = tokens_per_s * flops_per_token / peak
    return rates


def row(run: dict[str, Any]) -> str:
    trainer, bare = run["trainer"], run["bare"]
    line = (
        f"{run['task']:<22} trainer {trainer['samples_per_s']:>10,.0f} samples/s, "
        f"bare {bare['samples_per_s']:>10,.0f}: {run['trainer_over_bare']:.3f}x the bare "
        f"loop's time per sample; peak {trainer['peak_mem_mb']:,.0f} MB"
    )
    if "tokens_per_s" in trainer:
        line += f"; {trainer['tokens_per_s']:,.0f} tokens/s"
    if "mfu" in trainer:
        line += f", MFU {trainer['mfu']:.1%} (bare {bare['mfu']:.1%})"
    if "channels_last_speedup" in run:
        line += f"; channels_last {run['channels_last_speedup']:.2f}x the bare loop's speed"
    return line


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--bare-worker":
        print(json.dumps(bare_worker(json.loads(sys.argv[2]))))
        raise SystemExit(0)
    raise SystemExit(main())
