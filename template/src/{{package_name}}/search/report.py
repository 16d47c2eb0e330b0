"""What a sweep leaves in its study_dir for a person to read: sweep.md, every trial (number,
state, parameters, value, steps, wall time) with the best first; best.yaml, the best
trial's fields (`python -m PACKAGE.train --config best.yaml` trains it again); and Optuna's
plots through matplotlib: history.png (each trial's value, and the best so far),
importances.png (how much each parameter mattered) and slices.png (the value against each
parameter), the last two once two trials have completed.
"""

import logging
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import optuna
import yaml
from matplotlib import pyplot as plt
from optuna.trial import FrozenTrial, TrialState
from optuna.visualization import matplotlib as plots

from ..config import load_config
from .space import as_arguments, fixed_names

log = logging.getLogger(__name__)
# How a trial's state reads in sweep.md.
STATES = {
    TrialState.COMPLETE: "complete",
    TrialState.PRUNED: "pruned",
    TrialState.RUNNING: "running",
    TrialState.WAITING: "waiting",
    TrialState.FAIL: "failed",
}
PLOTS = {
    "history.png": plots.plot_optimization_history,
    "importances.png": plots.plot_param_importances,
    "slices.png": plots.plot_slice,
}


def write_report(study: optuna.Study, study_dir: Path, fixed: list[str]) -> None:
    trials = study.get_trials(deepcopy=False)
    (study_dir / "sweep.md").write_text(_table(study, trials))
    complete = [trial for trial in trials if trial.state == TrialState.COMPLETE]
    if complete:
        best = study.best_trial
        cfg = asdict(load_config([*fixed, *as_arguments(best.params)]))
        names = [*fixed_names(fixed), *best.params]
        fields = {name: cfg[name] for name in names if name not in ("output_dir", "sweep_trial")}
        (study_dir / "best.yaml").write_text(
            f"# Trial {best.number} of {study_dir}, value {best.value:.6g}: the fields it set.\n"
            + yaml.safe_dump(fields, sort_keys=False)
        )
    # Optuna marks its matplotlib plots experimental, and an empty one has no legend.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, plot in PLOTS.items():
            if len(complete) >= 2 or name == "history.png":
                _save(plot, study, study_dir / name)
    log.info("sweep: %d trials; see %s", len(trials), study_dir / "sweep.md")


def _table(study: optuna.Study, trials: list[FrozenTrial]) -> str:
    sign = 1 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1

    def order(trial: FrozenTrial) -> tuple:
        finished = trial.state == TrialState.COMPLETE
        return (not finished, -sign * trial.value if finished else 0, trial.number)

    lines = [
        f"# Sweep: {study.study_name}, {study.direction.name.lower()} the value, best first",
        "",
        "| trial | state | parameters | value | steps | wall s | folder |",
        "|---|---|---|---|---|---|---|",
    ]
    for trial in sorted(trials, key=order):
        lines.append(_row(trial))
    return "\n".join(lines) + "\n"


def _row(trial: FrozenTrial) -> str:
    params = ", ".join(f"{name}={_short(value)}" for name, value in trial.params.items())
    value = f"{trial.value:.6g}" if trial.value is not None else ""
    attrs: dict[str, Any] = trial.user_attrs
    wall = f"{attrs['wall_s']:.1f}" if "wall_s" in attrs else ""
    cells = [trial.number, STATES.get(trial.state, trial.state.name.lower()), params, value]
    cells += [attrs.get("steps", ""), wall, attrs.get("output_dir", "")]
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _save(plot: Any, study: optuna.Study, path: Path) -> None:
    try:
        axes = plot(study)
    except (ValueError, RuntimeError) as error:  # e.g. too few trials for importances
        log.info("sweep: no %s (%s)", path.name, error)
        return
    figure = (axes.flat[0] if hasattr(axes, "flat") else axes).get_figure()
    figure.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(figure)
