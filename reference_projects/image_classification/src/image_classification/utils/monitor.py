"""What the loop watches without slowing down: training time, log windows, throughput,
divergence, preemption signals; and the package's log lines, which never break its
progress bar."""

import contextlib
import logging
import math
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from tqdm import tqdm

from .errors import UserError


class TrainingDiverged(UserError, RuntimeError):
    """The loss became NaN or infinite; the checkpoints written before it are kept."""


@dataclass
class Pause:
    seconds: float = 0.0


class TrainingClock:
    """Seconds of training: a clock that stops while the loop evaluates or checkpoints, so
    that throughput and data wait describe training steps alone. `paused_s` holds the
    seconds it stood, by what it stood for."""

    def __init__(self, device: torch.device):
        self.device = device
        self.paused_s = {"eval": 0.0, "checkpoint": 0.0}
        self.started = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - sum(self.paused_s.values())

    def wall_s(self) -> float:
        """Seconds since the clock started, pauses included."""
        return time.perf_counter() - self.started

    @contextlib.contextmanager
    def paused(self, kind: str) -> Iterator[Pause]:
        """Time spent inside is `kind` (eval, checkpoint), not training; its seconds are the
        Pause's once it ends."""
        if self.device.type == "cuda":  # the steps queued before it are training time
            torch.cuda.synchronize(self.device)  # (evaluation and saving wait for them anyway)
        pause, start = Pause(), time.perf_counter()
        try:
            yield pause
        finally:
            pause.seconds = time.perf_counter() - start
            self.paused_s[kind] += pause.seconds


class Throughput:
    """Samples per second of training, from the end of the run's first step (which compiles
    and warms up) to the last log step, on the training clock."""

    def __init__(self, clock: TrainingClock):
        self.clock = clock
        self.start: float | None = None
        self.end = 0.0
        self.samples = 0

    def step_done(self, samples_so_far: int) -> None:
        """The first step (compilation, warm-up) is not timed: timing starts after it."""
        if self.start is None:
            self.start = self.clock.now()
            self.samples = -samples_so_far  # the first log record counts them, untimed

    def logged(self, samples: int) -> None:
        self.samples += samples
        self.end = self.clock.now()

    def per_second(self) -> float | None:
        seconds = self.end - self.start if self.start is not None else 0.0
        return self.samples / seconds if seconds > 0 and self.samples > 0 else None


class LogWindow:
    """The steps between two log steps: their losses stay on the device until close().

    Turning a loss into a Python float waits for the device to finish; doing it once per
    log interval instead of once per step keeps the GPU busy. The window holds one loss
    tensor per step, as many as have run: its size never depends on log_every, which a
    resumed run may change.
    """

    def __init__(
        self, device: torch.device, first_step: int, losses: list[float], clock: TrainingClock
    ):
        self.first_step = first_step  # the window holds steps first_step + 1, first_step + 2, ...
        self.losses = [torch.tensor(loss, device=device) for loss in losses]
        self.step_loss: torch.Tensor | None = None  # the step in progress, over its micro-batches
        self.samples, self.data_s = 0, 0.0
        self.clock = clock
        self.started = clock.now()

    @property
    def steps(self) -> int:
        return len(self.losses)

    def restart(self, first_step: int) -> None:
        """Empty the window for the steps after `first_step`, once it is closed."""
        self.losses = []
        self.first_step = first_step
        self.samples, self.data_s = 0, 0.0
        self.started = self.clock.now()

    def add_loss(self, loss: torch.Tensor) -> None:
        """One micro-batch's loss, already scaled by its share of the step."""
        loss = loss.float()
        self.step_loss = loss if self.step_loss is None else self.step_loss + loss

    def end_step(self) -> None:
        self.losses.append(self.step_loss)
        self.step_loss = None

    def pending_losses(self) -> list[float]:
        """The window's losses as floats, after checking them; saved with a checkpoint."""
        losses = torch.stack(self.losses).tolist() if self.losses else []
        self._check_finite(losses)
        return losses

    def close(self, epoch: int, grad_norm: torch.Tensor, lr: float) -> dict[str, Any]:
        losses = self.pending_losses()
        elapsed = self.clock.now() - self.started  # training only
        samples = self.counted_samples()
        return {
            "step": self.first_step + self.steps,
            "epoch": epoch,
            "loss": sum(losses) / len(losses),
            "lr": lr,
            "grad_norm": grad_norm.item(),  # before clipping, so thresholds can be chosen from it
            "samples": samples,
            "samples_per_s": samples / elapsed,
            "data_wait": self.data_s / elapsed,  # share of the time spent waiting for batches
        }

    def counted_samples(self) -> int:
        """The samples of the window's steps so far, as its record counts them."""
        return self.samples

    def _check_finite(self, losses: list[float]) -> None:
        for offset, loss in enumerate(losses, start=1):
            if not math.isfinite(loss):
                raise TrainingDiverged(
                    f"the loss became {loss} at step {self.first_step + offset}; the checkpoints "
                    "before it are kept. Lower --lr or --max_grad_norm, or find the op with "
                    "--detect_anomaly true"
                )


class Preemption:
    """SIGTERM or SIGUSR1 (a scheduler preempting the job), or Ctrl-C, asks the loop to stop
    cleanly: it finishes its step, writes a checkpoint and exits, with EXIT_CODE after a
    scheduler's signal and INTERRUPTED after Ctrl-C. Running the same command again resumes
    from that checkpoint. A second Ctrl-C stops at once (KeyboardInterrupt).
    """

    EXIT_CODE = 75  # EX_TEMPFAIL: a temporary failure, run me again
    INTERRUPTED = 128 + signal.SIGINT  # as a shell reports a command stopped by Ctrl-C
    SIGNALS = tuple(
        getattr(signal, name) for name in ("SIGTERM", "SIGUSR1", "SIGINT") if hasattr(signal, name)
    )

    def __init__(self) -> None:
        self.requested: int | None = None  # the signal received, if any
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "Preemption":
        for signum in self.SIGNALS:
            self._previous[signum] = signal.signal(signum, self._request)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _request(self, signum: int, frame: object) -> None:
        self.requested = signum
        self.second_ctrl_c_stops_at_once(signum)

    def agree(self) -> None:
        """Called at each log step: a process alone stops on its own signal, and has
        nothing to agree on."""

    @staticmethod
    def second_ctrl_c_stops_at_once(signum: int) -> None:
        if signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)


class Preempted(Exception):
    """Raised after the checkpoint of the step the loop stopped at is written."""

    def __init__(self, signum: int, step: int):
        if signum == signal.SIGINT:
            said, self.exit_code = "interrupted (Ctrl-C)", Preemption.INTERRUPTED
        else:
            said, self.exit_code = f"stopped by signal {signum}", Preemption.EXIT_CODE
        super().__init__(
            f"{said} after step {step}, which is checkpointed: run the same command again to resume"
        )


def stopped_at_once() -> SystemExit:
    """The exit of a run stopped by a second Ctrl-C (or one outside the loop): one line, and
    Ctrl-C's exit code."""
    print(
        "interrupted: stopped at once, without a checkpoint of this step; run the same "
        "command again to resume from the last one",
        file=sys.stderr,
    )
    return SystemExit(Preemption.INTERRUPTED)


class ProgressReport:
    """Progress on stderr: a tqdm bar on a terminal. In a file (a SLURM or CI log), which would
    keep every refresh of a bar, one log line at a log step every `every_s` seconds at most,
    and at the last step."""

    def __init__(self, total: int, initial: int, shown: bool = True, every_s: float = 30.0):
        self.total, self.every_s, self.last_line = total, every_s, -math.inf
        self.shown, self.terminal = shown, sys.stderr.isatty()
        self.bar = tqdm(
            total=total,
            initial=initial,
            unit="step",
            dynamic_ncols=True,
            disable=not (shown and self.terminal),
        )

    def show(self, step: int, record: dict[str, Any]) -> None:
        """The training record of log step `step`: its loss, learning rate and speed."""
        loss, lr = record["loss"], record["lr"]
        if self.terminal:
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}")
            return
        due = time.monotonic() >= self.last_line + self.every_s or step == self.total
        if self.shown and due:
            self.last_line = time.monotonic()
            log = logging.getLogger(__name__.partition(".")[0])
            line = f"step {step}/{self.total} | loss {loss:.4f} | lr {lr:.2e}"
            log.info("%s | %s", line, speed(record))

    def __enter__(self) -> "ProgressReport":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.bar.close()


def speed(record: dict[str, Any]) -> str:
    """A record's throughput as a log line shows it: samples/s, then the rates the task adds
    where it logs them (tokens/s, and MFU on a GPU of known peak)."""
    shown = [f"{record['samples_per_s']:,.0f} samples/s"]
    if "tokens_per_s" in record:
        shown.append(f"{record['tokens_per_s']:,.0f} tokens/s")
    if "mfu" in record:
        shown.append(f"MFU {record['mfu']:.1%}")
    return " | ".join(shown)


def configure_logging(level: int) -> None:
    """The package's log lines go to stderr through tqdm.write, so they never break the
    progress bar."""
    handler = _TqdmHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    log = logging.getLogger(__name__.partition(".")[0])
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False


class _TqdmHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        tqdm.write(self.format(record), file=sys.stderr)
