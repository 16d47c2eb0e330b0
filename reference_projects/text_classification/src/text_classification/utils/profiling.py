"""The profiler switch: torch.profiler when asked for, otherwise an object that does nothing."""

from pathlib import Path

import torch


class NoProfiler:
    """Stands in for torch.profiler.profile, so the loop calls step() either way."""

    def __enter__(self) -> "NoProfiler":
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def step(self) -> None:
        return None


def build_profiler(enabled: bool, trace_dir: Path) -> torch.profiler.profile | NoProfiler:
    """Trace 3 optimizer steps after 2 of warm-up; open trace.json in Perfetto or chrome://tracing."""
    if not enabled:
        return NoProfiler()
    trace_dir.mkdir(parents=True, exist_ok=True)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(trace_dir / "trace.json")),
        record_shapes=True,
    )
