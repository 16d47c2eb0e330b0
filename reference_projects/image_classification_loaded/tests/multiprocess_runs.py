"""Training runs in several processes, for test_distributed.py (not a test module itself).

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/multiprocess_runs.py PLAN

Launched like the README's command, every process runs each run of the JSON file PLAN in
turn through `train.main` (what `-m PACKAGE.train` runs), so the processes start
once for all the runs, in one process group. A run trains the model without BatchNorm
unless it says `as_built`. A run may name the step during which each
process receives SIGTERM, as a scheduler preempting the job sends it to every process; the
run then ends with the exit code `-m PACKAGE.train` would exit with, and the
next run starts. A plan may then time a collective: rank 0 calls one that rank 1 never
joins, to time how long the process group waits. Each process writes what it saw to
`report-RANK.json`: for each run, the steps it trained, its exit code and digests of the
weights it ended with.
"""

import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
from accelerate.state import AcceleratorState, GradientState, PartialState
from torch import distributed, nn
from torch.distributed.tensor import DTensor

from image_classification_loaded import optim, train
from image_classification_loaded.utils.monitor import Preemption


def without_batchnorm(build_model):
    """build_model with BatchNorm replaced by identity, for comparing 2 processes with 1.

    SyncBatchNorm needs GPUs, and per-process BatchNorm statistics differ from the global
    batch's, so on the CPU only a model without BatchNorm can match exactly.
    """

    def build(cfg, preprocess) -> nn.Module:
        model = build_model(cfg, preprocess)
        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if isinstance(child, nn.modules.batchnorm._BatchNorm):
                    setattr(module, name, nn.Identity())
        return model

    return build


def remembering(model_on_device, trained: list[nn.Module]):
    """train._model_on_device, appending to `trained` the model each run trains (as built,
    which DDP and the optimizer update in place, unlike a model that export builds)."""

    def on_device(*args):
        model, raw_model, average = model_on_device(*args)
        trained.append(raw_model)
        return model, raw_model, average

    return on_device


def digest(tensors) -> str:
    """One hash of the tensors' bytes, in order: equal only for bit-for-bit equal tensors."""
    sha = hashlib.sha256()
    for tensor in tensors:
        # A sharded parameter (a DTensor) counts whole: its shards gathered (a collective)
        tensor = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
        sha.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return sha.hexdigest()


def watch_writes(root: str, writes: list[str]) -> None:
    """Record every file this process opens for writing, renames, removes or creates in root;
    a rename by the name it is given (a checkpoint's, not its temporary file's)."""
    write_modes = set("wax+")
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT

    def hook(event: str, args: tuple) -> None:
        if event not in ("open", "os.rename", "os.remove", "os.mkdir") or not args:
            return
        path = args[1] if event == "os.rename" else args[0]
        if not isinstance(path, str | bytes | os.PathLike):
            return
        if event == "open":
            mode, flags = args[1], args[2]
            writing = write_modes & set(mode) if isinstance(mode, str) else flags & write_flags
            if not writing:
                return
        if ".shards.partial" in os.fsdecode(path):  # every process writes its own shards
            return
        if os.fsdecode(path).startswith(root):
            writes.append(f"{event} {os.fsdecode(path)}")

    sys.addaudithook(hook)


def watch_steps(learning_rate, steps: list[int], sigterm_step: int | None):
    """learning_rate, noting in `steps` each step it is asked for (1, 2, ...), and sending
    this process SIGTERM during step `sigterm_step`, between its backward and optimizer step."""

    def rate(done: int, *args) -> float:  # done: the steps already trained
        steps.append(done + 1)
        if done + 1 == sigterm_step:
            os.kill(os.getpid(), signal.SIGTERM)
        return learning_rate(done, *args)

    return rate


def timed_collective(report: Path) -> dict:
    """Rank 0 waits in a collective that rank 1 never joins: it must fail, not hang, after
    the timeout its group was set up with."""
    if distributed.get_rank() != 0:
        deadline = time.monotonic() + 120  # far past any timeout the tests set
        while not report.exists() and time.monotonic() < deadline:
            time.sleep(0.1)  # stays alive and silent until rank 0 has given up
        return {}
    start = time.monotonic()
    try:
        distributed.all_reduce(torch.ones(1))
        result = {"failed": False}
    except Exception as error:  # gloo raises RuntimeError subclasses that vary by version
        result = {"failed": True, "after_s": time.monotonic() - start, "error": str(error)[:300]}
    return result


def main(plan_path: str) -> None:
    plan = json.loads(Path(plan_path).read_text())
    rank = int(os.environ["RANK"])
    writes: list[str] = []
    watch_writes(plan["root"], writes)
    trained: list[nn.Module] = []
    train._model_on_device = remembering(train._model_on_device, trained)
    as_built, stripped = train.build_model, without_batchnorm(train.build_model)
    learning_rate = optim.learning_rate
    # One process group for every run, as set up by the first (with its dist_timeout_s):
    # a run ends by closing it, which here would leave the next runs none to join.
    PartialState.destroy_process_group = lambda self, group=None: None
    runs = []
    for run in plan["runs"]:
        steps: list[int] = []
        sigterm_step = run["sigterm_during_step"][rank] if "sigterm_during_step" in run else None
        optim.learning_rate = watch_steps(learning_rate, steps, sigterm_step)
        train.build_model = as_built if run.get("as_built") else stripped
        exit_code = 0
        try:
            train.main(run["args"])
        except SystemExit as stopped:
            if stopped.code != Preemption.EXIT_CODE:
                raise
            exit_code = stopped.code
        model = trained[-1]
        weights = {"parameters": digest(model.parameters()), "buffers": digest(model.buffers())}
        runs.append({"steps": steps, "exit_code": exit_code, "weights": weights})
        AcceleratorState._reset_state(reset_partial_state=True)  # as a new process would
        GradientState._reset_state()
        PartialState._reset_state()
    report = Path(plan["reports"]) / f"report-{rank}.json"
    if not plan["time_collective"]:
        report.write_text(json.dumps({"writes": writes, "runs": runs}))
        return
    result = timed_collective(Path(plan["reports"]) / "report-0.json")
    report.write_text(json.dumps({"writes": writes, "runs": runs, "collective": result}))
    if rank == 0:
        # No teardown: a group whose collective timed out, closed (by destroy_process_group
        # or at exit) while the other process still holds it, can abort this process in
        # gloo's C++ ("terminate called without an active exception", SIGABRT).
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
