"""Sharding (sharding.py, storage.py): the model's repeated blocks are what it shards, each of
2 processes holds half of the parameters and of the optimizer state, recomputing the
blocks' activations changes no result, a checkpoint of the whole model (written without
sharding) resumes on 2 processes exactly where it stopped, and one whose shards are damaged
is reported and the previous one used; a disk that fills while the shards are written
stops the run in one line, and the same command resumes it; a folder whose file was never
written goes at the next checkpoint.

Processes run on the CPU over gloo, started by torchrun as in the README.
"""

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from run_logs import assert_same_end, checkpoint_state, logged
from torch import nn
from training_children import full_disk_run

from image_classification_loaded.checkpoint import (
    Progress,
    checkpoint_path,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from image_classification_loaded.config import load_config
from image_classification_loaded.data import build_datasets
from image_classification_loaded.model import build_model
from image_classification_loaded.resume import find_resume_checkpoint
from image_classification_loaded.sharding import repeated_blocks
from image_classification_loaded.storage import shards_folder
from image_classification_loaded.train import main

TRAIN = "image_classification_loaded.train"
TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"
LAUNCH = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node"]
LAUNCH_TIMEOUT_S = 240
# What each process holds of the parameters and AdamW's moments, after an optimizer step.
SIZES = """
import json, sys
import torch
from torch.distributed.tensor import DTensor
from image_classification_loaded.average import weight_average
from image_classification_loaded.config import load_config
from image_classification_loaded.data import build_datasets
from image_classification_loaded.model import build_model
from image_classification_loaded.optim import build_optimizer
from image_classification_loaded.processes import distribute_model, start_accelerator

cfg = load_config(sys.argv[2:])
accelerator = start_accelerator(cfg)
model = build_model(cfg, build_datasets(cfg).preprocess)
model = distribute_model(model, weight_average(model, 0.0), cfg, accelerator)
optimizer = build_optimizer(model, cfg)
for parameter in model.parameters():
    parameter.grad = torch.zeros_like(parameter)
optimizer.step()  # AdamW's moments now exist


def size(tensor):
    local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    return local.numel() * local.element_size()


moments = [v for s in optimizer.state.values() for v in s.values() if v.dim() > 0]
sizes = {
    "parameters": sum(size(p) for p in model.parameters()),
    "optimizer": sum(size(v) for v in moments),
}
with open(f"{sys.argv[1]}-{accelerator.process_index}.json", "w") as file:
    json.dump(sizes, file)
"""


def launch(processes: int, *command: str) -> str:
    """Run `command` (a script and its arguments, or -m and a module's) in `processes`
    processes under torchrun; its output, which must end well."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*LAUNCH, str(processes), *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=LAUNCH_TIMEOUT_S,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return done.stdout + done.stderr


def test_repeated_blocks_are_the_children_of_a_list_of_one_class():
    """Each child of an nn.ModuleList or nn.Sequential of two or more modules of one class,
    outermost first; a list of other classes, or of one module, is searched, a block is not."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])

    blocks = nn.ModuleList([Block(), Block(), Block()])
    pair = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    mixed = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), pair)
    alone = Block()
    model = nn.ModuleDict({"blocks": blocks, "mixed": mixed, "alone": nn.ModuleList([alone])})
    assert repeated_blocks(model) == [*blocks, *pair, *alone.inner]


def test_the_models_blocks_are_disjoint_parts_of_it(short_run):
    cfg = load_config(short_run())
    model = build_model(cfg, build_datasets(cfg).preprocess)
    blocks = repeated_blocks(model)
    parameters = [id(p) for block in blocks for p in block.parameters()]
    assert len(parameters) == len(set(parameters))  # no block inside another
    assert all(any(block is m for m in model.modules()) for block in blocks)


def test_each_of_2_processes_holds_half_of_the_parameters_and_the_optimizer_state(
    short_run, tmp_path
):
    """Half, but for the rows a tensor's first dimension pads to a multiple of 2."""
    script = tmp_path / "sharding_sizes.py"
    script.write_text(SIZES)
    args = [*short_run("--cpu", "true"), "--ema_decay", "0"]
    launch(1, str(script), str(tmp_path / "one"), *args)
    launch(2, str(script), str(tmp_path / "two"), *args)
    whole = json.loads((tmp_path / "one-0.json").read_text())
    for rank in (0, 1):
        share = json.loads((tmp_path / f"two-{rank}.json").read_text())
        for name, size in share.items():
            assert 0.45 < size / whole[name] < 0.55, (name, rank, size, whole[name])


def test_recomputing_the_blocks_activations_changes_no_result(short_run, tmp_path):
    main(short_run(output_dir=tmp_path / "kept"))
    main(short_run("--activation_checkpointing", "true", output_dir=tmp_path / "recomputed"))
    assert logged(tmp_path / "recomputed") == logged(tmp_path / "kept")
    assert_same_end(tmp_path / "recomputed", tmp_path / "kept", 6)


def test_a_checkpoint_of_the_whole_model_resumes_on_2_processes_exactly(short_run, tmp_path):
    """Step 3's checkpoint, rewritten as a project without sharding writes it (its tensors in
    the file, the optimizer state keyed by position), resumes on 2 processes: each takes
    its shards of it, and the run ends as the one that was never stopped."""
    two = ("--cpu", "true", "--batch_size", "16")
    whole_run = tmp_path / "whole"
    launch(2, "-m", TRAIN, *short_run(*two, output_dir=whole_run))
    step_3 = checkpoint_path(whole_run / "checkpoints", 3)
    state = checkpoint_state(step_3)
    groups = state["optimizer"]["param_groups"]
    position = {name: i for i, name in enumerate(n for group in groups for n in group["params"])}
    state["optimizer"] = {  # by position, as optimizer.state_dict() keys it
        "state": {position[n]: s for n, s in state["optimizer"]["state"].items()},
        "param_groups": [g | {"params": [position[n] for n in g["params"]]} for g in groups],
    }
    progress = Progress(**state.pop("progress"))
    saved = save_checkpoint(tmp_path / "unsharded", progress, state, keep=1, is_best=False)
    assert "shards" not in load_checkpoint(saved)
    resumed = tmp_path / "resumed"
    args = short_run(*two, "--resume", str(saved), output_dir=resumed)
    output = launch(2, "-m", TRAIN, *args)
    assert output.count("holds the whole model, written without sharding") == 1  # rank 0's
    after_step_3 = [record for record in logged(whole_run) if record["step"] > 3]
    assert logged(resumed) == after_step_3
    assert_same_end(resumed, whole_run, 6)


def test_a_checkpoint_whose_shards_are_damaged_is_reported_and_the_previous_one_used(
    trained, caplog
):
    """DCP's files carry no checksum: the checkpoint's file keeps one per file of its shards
    folder. A flipped byte in the newest one's shard, or the previous one's missing
    metadata, is named in one line each, and resuming goes on from an older one."""
    directory = trained / "checkpoints"
    previous, newest = list_checkpoints(directory)[-2:]
    shard = next(shards_folder(newest).glob("*.distcp"))
    damaged = bytearray(shard.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    shard.write_bytes(damaged)
    caplog.set_level(logging.WARNING)
    assert find_resume_checkpoint(directory)[0] == previous
    mismatch = f"checksum of {shard.parent.name}/{shard.name} does not match"
    assert f"checkpoint '{newest}' has damaged shards ({mismatch})" in caplog.text
    (shards_folder(previous) / ".metadata").unlink()
    caplog.clear()
    assert find_resume_checkpoint(directory) is None
    assert f"({shards_folder(previous).name}/.metadata is missing)" in caplog.text


def test_a_full_disk_while_the_shards_are_written_is_one_line_and_the_run_resumes(
    trainers, trained, short_run, tmp_path
):
    """DCP's writer fails on a full disk as any write does: the run stops with one line naming
    the folder, the checkpoints written before are intact, and with room again the same
    command resumes from the newest, and its staged folder goes."""
    directory = trained / "checkpoints"
    before = {path: path.read_bytes() for path in list_checkpoints(directory)}
    longer = short_run("--max_steps", "9", "--checkpoint_every", "1")
    exitcode, lines = full_disk_run(trainers, longer, tmp_path, "state:tensor_states")
    assert exitcode == 1 and not any("Traceback" in line for line in lines), lines
    staged = directory / ".step-000007.shards.partial"
    assert [line for line in lines if line.startswith("error: ")] == [
        f"error: no space left writing '{staged}' (File too large): free space and run the "
        "same command again"
    ]
    assert {path: path.read_bytes() for path in list_checkpoints(directory)} == before
    assert main(longer)["steps"] == 9
    assert not staged.exists()
    assert load_checkpoint(list_checkpoints(directory)[-1])["progress"]["step"] == 9


def test_a_shards_folder_whose_file_was_never_written_goes_at_the_next_checkpoint(
    trained, short_run
):
    """A run stopped between renaming its shards folder and writing the file that names it
    leaves the folder alone: no checkpoint uses it, resuming takes the newest file's, and
    the next checkpoint's pruning removes it."""
    directory = trained / "checkpoints"
    orphan = directory / "step-000099.shards"
    shutil.copytree(shards_folder(list_checkpoints(directory)[-1]), orphan)
    assert main(short_run("--max_steps", "7", "--checkpoint_every", "1"))["steps"] == 7
    assert not orphan.exists()
    assert sorted(path.name for path in directory.glob("*.shards")) == [
        shards_folder(path).name for path in list_checkpoints(directory)
    ]
