"""Search hyperparameters with Optuna, every trial a real training run, nothing lost.

    python -m image_classification_loaded.sweep [--space configs/sweep.yaml]
        [--trials 20] [--study_dir outputs/sweep] [--storage URL] [--workers 1]
        [--pruner median] [--startup_trials 5] [--seed 0] [--report] [--field value ...]

Each trial trains, with the fields the space suggests and the fixed `--field value`
arguments, into study_dir/trial-NNNN as the train command would, so any trial can be
inspected, resumed, exported or predicted with. The study (TPE sampler seeded with --seed,
a median pruner at evaluations once --startup_trials have finished) lives in --storage: by
default SQLite in study_dir, for one machine; several machines share a PostgreSQL or MySQL
URL.

Run the same command again after any interruption: finished trials are kept; a trial
stopped with its sweep (SIGTERM: it checkpoints, the sweep exits 75) or killed with it
(SIGKILL, a reboot: once its heartbeat is older than 2 x --heartbeat_s) runs again as a
new trial that continues in the same folder from its last checkpoint; then the sweep goes
on to --trials finished (complete or pruned) trials. sweep.md, best.yaml and the plots
in study_dir say how it went (also at any time with --report).
"""

import argparse
import json
import logging
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback, fail_stale_trials
from optuna.study import MaxTrialsCallback
from optuna.trial import TrialState

from . import task
from .config import ConfigError, TrainConfig, load_config
from .search.pruning import PRUNER, study_pruner
from .search.report import write_report
from .search.space import Dimension, as_arguments, read_space
from .search.trials import Trials, add_trial_options, trial_options
from .utils.cli import Parser, at_least
from .utils.monitor import Preemption, configure_logging

log = logging.getLogger(__name__)
# The retry of an interrupted trial is experimental in Optuna; this command relies on it.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
PACKAGE = __package__  # also when run as `python -m PACKAGE.sweep`, where __name__ is __main__
STUDY = "sweep"  # the study's name in its storage
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


class TrialFailed(RuntimeError):
    """A trial's training exited with an error (a diverged loss, say); the sweep goes on."""


class SweepStopped(RuntimeError):
    """The sweep was asked to stop (SIGTERM); its running trial checkpointed."""

    def __init__(self, trial: int | None, signum: int):
        where = "" if trial is None else f" in trial {trial}"
        super().__init__(f"stopped by signal {signum}{where}")
        self.trial = trial


def main(argv: list[str] | None = None) -> optuna.Study:
    configure_logging(logging.INFO)
    args, fixed = _parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    try:
        load_config(fixed)  # the fixed fields alone must be a valid configuration
        space = read_space(args.space, fixed)
        study = open_study(args, space)
    except ConfigError as error:
        raise SystemExit(f"error: {error}") from None
    if not args.report:
        processes = Trials()
        try:
            if not args.worker:  # a worker's sweep has waited already
                _wait_for_interrupted(study, args.heartbeat_s)
            if args.workers > 1:
                run_workers(args, fixed, processes)
            else:
                run_trials(study, args, space, fixed, processes)
        except SweepStopped as stop:
            log.warning("%s; run the same command again to continue", stop)
            raise SystemExit(Preemption.EXIT_CODE) from None
        finally:
            processes.restore()
    if not args.worker:  # the sweep that started the workers reports once they end
        write_report(study, args.study_dir, fixed)
    return study


def open_study(args: Any, space: list[Dimension]) -> optuna.Study:
    """The study in --storage, created on first use; one that searched another space is
    refused, as its trials would mislead the sampler."""
    args.study_dir.mkdir(parents=True, exist_ok=True)
    url = args.storage or f"sqlite:///{(args.study_dir / 'study.db').resolve()}"
    # Optuna's advice for SQLite: one machine, not over NFS, a generous lock timeout for
    # concurrent writers (--workers); several machines use a database server.
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else None
    storage = RDBStorage(
        url,
        engine_kwargs=engine,
        heartbeat_interval=args.heartbeat_s,
        grace_period=2 * args.heartbeat_s,
        heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(
            inherit_intermediate_values=True
        ),
    )
    pruner = {"name": args.pruner, "startup_trials": args.startup_trials}
    study = optuna.create_study(
        study_name=STUDY,
        storage=storage,
        direction="maximize" if task.HIGHER_IS_BETTER else "minimize",
        pruner=study_pruner(pruner),
        load_if_exists=True,
    )
    # Seeded, and offset by the trials so far: a sweep run again draws new parameters
    # instead of repeating the first run's.
    study.sampler = optuna.samplers.TPESampler(seed=args.seed + len(study.trials))
    searched = [dimension.describe() for dimension in space]
    previous = study.user_attrs.get("space")
    if previous is None:
        study.set_user_attr("space", searched)
    elif previous != searched:
        raise ConfigError(
            f"the study in {url} searched another space ({'; '.join(previous)}): continue it "
            "with that space file, or start a new study with another --study_dir"
        )
    study.set_user_attr("url", url)
    study.set_user_attr(PRUNER, pruner)  # for the runs, which report to it
    return study


def run_trials(
    study: optuna.Study, args: Any, space: list[Dimension], fixed: list[str], processes: Any
) -> None:
    """Run trials until --trials have finished; a trial whose training fails (a diverged
    loss, say) is recorded as failed and the sweep goes on, up to --trials failures."""
    if _finished(study) >= args.trials:
        return

    def objective(trial: optuna.Trial) -> float:
        return run_trial(trial, args, space, fixed, processes)

    def stop_after_failures(study: optuna.Study, trial: Any) -> None:
        if len(study.get_trials(deepcopy=False, states=(TrialState.FAIL,))) >= args.trials:
            log.error("%d trials failed: stopping; see their sweep.log", args.trials)
            study.stop()

    finished = MaxTrialsCallback(args.trials, states=FINISHED)
    verbosity = optuna.logging.get_verbosity()
    try:
        study.optimize(objective, callbacks=[finished, stop_after_failures], catch=(TrialFailed,))
    except SweepStopped as stop:
        # Optuna marked the trial failed; it runs again, from its checkpoint, next time.
        interrupted = study.get_trials(deepcopy=False)[stop.trial]
        RetryHeartbeatStaleTrialCallback(inherit_intermediate_values=True)(study, interrupted)
        raise
    finally:
        optuna.logging.set_verbosity(verbosity)


def _stopped(trial: int, signum: int) -> SweepStopped:
    """The stop of a running sweep. Optuna logs an objective's exception as a failed trial,
    with its traceback: this trial has not failed (it runs again from its checkpoint), and
    main() says in one line why the sweep stopped, so Optuna's warnings are silenced."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return SweepStopped(trial, signum)


def run_trial(
    trial: optuna.Trial, args: Any, space: list[Dimension], fixed: list[str], processes: Any
) -> float:
    """Train one trial in its folder; its best evaluation is the trial's value."""
    if processes.requested:  # between two trials: this one starts next time
        raise _stopped(trial.number, processes.requested)
    params = {dimension.name: dimension.suggest(trial) for dimension in space}
    frozen = trial.study.get_trials(deepcopy=False)[trial.number]
    first = RetryHeartbeatStaleTrialCallback.retried_trial_number(frozen)  # a trial run again
    output_dir = args.study_dir / f"trial-{trial.number if first is None else first:04d}"
    output_dir.mkdir(parents=True, exist_ok=True)
    trial.set_user_attr("output_dir", str(output_dir))
    spec = f"{STUDY}/{trial.number}@{trial.study.user_attrs['url']}"
    argv = ["--output_dir", str(output_dir), *fixed, *as_arguments(params), "--sweep_trial", spec]
    log.info("trial %d: %s -> %s", trial.number, params, output_dir)
    code = processes.run_trial(argv, output_dir / "sweep.log", args)
    if processes.requested:  # whatever the launcher made of the run's exit 75
        raise _stopped(trial.number, processes.requested)
    if code != 0:
        raise TrialFailed(f"trial {trial.number} exited with {code}: see {output_dir}/sweep.log")
    summary = json.loads((output_dir / "summary.json").read_text())
    trial.set_user_attr("steps", summary["steps"])
    trial.set_user_attr("wall_s", summary["wall_s"])
    if summary["pruned"]:
        raise optuna.TrialPruned(f"pruned at step {summary['steps']}")
    return summary["best_value"]


def run_workers(args: Any, fixed: list[str], processes: Any) -> None:
    """--workers K: K sweeps of this study, each a process with its own sampler seed."""
    options = ["--space", str(args.space), "--trials", str(args.trials)]
    options += ["--study_dir", str(args.study_dir), "--pruner", args.pruner]
    options += ["--startup_trials", str(args.startup_trials)]
    options += ["--heartbeat_s", str(args.heartbeat_s), "--worker"]
    options += trial_options(args)
    options += ["--storage", args.storage] if args.storage else []
    sweep = [sys.executable, "-m", f"{PACKAGE}.sweep", *options, *fixed]
    codes = processes.run([[*sweep, "--seed", str(args.seed + i)] for i in range(args.workers)])
    if processes.requested:
        raise SweepStopped(None, processes.requested)
    if any(codes):
        raise SystemExit(f"error: the sweep's workers exited with {codes}")


def _wait_for_interrupted(study: optuna.Study, heartbeat_s: int) -> None:
    """A trial left running by a killed sweep is failed (and queued again) once its
    heartbeat is stale: wait that long for any running trial, as a restart usually follows
    an interruption; trials that other live sweeps run keep beating and are left alone."""
    deadline = time.monotonic() + 3 * heartbeat_s
    while study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        fail_stale_trials(study)
        if time.monotonic() > deadline:
            return
        time.sleep(1)


def _finished(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


# The help of this command's options (--help)
_SPACE = "the fields searched and their ranges (default: %(default)s)"
_TRIALS = "finished (complete or pruned) trials to reach (default: %(default)s)"
_STUDY = "trial-NNNN folders, study.db and the report go here (default: %(default)s)"
_WORKERS = "sweeps run side by side on this machine, sharing the study (default: %(default)s)"
_PRUNER = "stop a trial whose evaluations fall below the median (default: %(default)s)"
_STARTUP = "trials that finish before any is pruned (default: %(default)s)"
_SEED = "seeds the TPE sampler, not the trials' training (default: %(default)s)"
_HEARTBEAT = "seconds between a trial's heartbeats (default: %(default)s)"


def _parser() -> Parser:
    """This command's own options; every other argument is a config field (load_config)."""
    parser = Parser("sweep", "Search hyperparameters with Optuna, each trial a training run.")
    option = parser.add_argument
    option("--space", type=Path, default=Path("configs/sweep.yaml"), metavar="FILE", help=_SPACE)
    option("--trials", type=at_least(1, int), default=20, metavar="N", help=_TRIALS)
    option("--study_dir", type=Path, default=Path("outputs/sweep"), metavar="DIR", help=_STUDY)
    option("--storage", metavar="URL", help="default: sqlite:///STUDY_DIR/study.db")
    option("--workers", type=at_least(1, int), default=1, metavar="K", help=_WORKERS)
    option("--pruner", choices=("median", "none"), default="median", help=_PRUNER)
    option("--startup_trials", type=at_least(0, int), default=5, metavar="N", help=_STARTUP)
    option("--seed", type=at_least(0, int), default=0, metavar="S", help=_SEED)
    option("--heartbeat_s", type=at_least(1, int), default=10, metavar="S", help=_HEARTBEAT)
    add_trial_options(option)
    option("--report", action="store_true", help="write the report and exit")
    option("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_config_fields(
        TrainConfig, "Every other --field value is a field of TrainConfig, fixed in every trial"
    )
    return parser


if __name__ == "__main__":
    main()
