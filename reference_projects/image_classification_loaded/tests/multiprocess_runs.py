"""Training runs in several processes, for test_distributed.py (not a test module itself).

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/multiprocess_runs.py PLAN

Launched like the README's command, every process runs each run of the JSON file PLAN in
turn through `train.main` (what `-m image_classification_loaded.train` runs), so the processes start
once for all the runs, in one process group. Then rank 0 calls a collective that rank 1
never joins, to time how long the process group waits. Each process writes what it saw to
`report-RANK.json`.
"""

import json
import os
import sys
import time
from pathlib import Path

import torch
from accelerate.state import AcceleratorState, GradientState, PartialState
from torch import distributed, nn

from image_classification_loaded import train


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


def watch_writes(root: str, writes: list[str]) -> None:
    """Record every file this process opens for writing, renames, removes or creates in root."""
    write_modes = set("wax+")
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT

    def hook(event: str, args: tuple) -> None:
        if event not in ("open", "os.rename", "os.remove", "os.mkdir") or not args:
            return
        path = args[0]
        if not isinstance(path, str | bytes | os.PathLike):
            return
        if event == "open":
            mode, flags = args[1], args[2]
            writing = write_modes & set(mode) if isinstance(mode, str) else flags & write_flags
            if not writing:
                return
        if os.fsdecode(path).startswith(root):
            writes.append(f"{event} {os.fsdecode(path)}")

    sys.addaudithook(hook)


def timed_collective(seconds: float, report: Path) -> dict:
    """Rank 0 waits in a collective that rank 1 never joins: it must fail, not hang."""
    if distributed.get_rank() != 0:
        deadline = time.monotonic() + seconds + 60
        while not report.exists() and time.monotonic() < deadline:
            time.sleep(0.1)  # stays alive and silent until rank 0 has given up
        return {}
    start = time.monotonic()
    try:
        distributed.all_reduce(torch.ones(1))
        return {"failed": False}
    except Exception as error:  # gloo raises RuntimeError subclasses that vary by version
        return {"failed": True, "after_s": time.monotonic() - start, "error": str(error)[:300]}


def main(plan_path: str) -> None:
    plan = json.loads(Path(plan_path).read_text())
    rank = int(os.environ["RANK"])
    writes: list[str] = []
    if rank != 0:
        watch_writes(plan["root"], writes)
    train.build_model = without_batchnorm(train.build_model)
    # One process group for every run, as set up by the first (with its dist_timeout_s):
    # a run ends by closing it, which here would leave the next runs none to join.
    PartialState.destroy_process_group = lambda self, group=None: None
    for args in plan["runs"]:
        train.main(args)
        AcceleratorState._reset_state(reset_partial_state=True)  # as a new process would
        GradientState._reset_state()
        PartialState._reset_state()
    report = Path(plan["reports"]) / f"report-{rank}.json"
    result = timed_collective(plan["timeout_s"], Path(plan["reports"]) / "report-0.json")
    report.write_text(json.dumps({"writes": writes, "collective": result}))


if __name__ == "__main__":
    main(sys.argv[1])
