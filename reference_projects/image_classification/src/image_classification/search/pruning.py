"""Pruning: a run of a sweep (sweep.py) reports each evaluation to its Optuna trial, and
stops at that evaluation when the study's pruner says the trial will not beat the others.
A run outside a sweep (`sweep_trial` unset) does neither, at no cost.

Evaluation calls `prunes` through EarlyStopping (evaluate.py); a pruned run ends as an
early-stopped one does: a checkpoint of that step, model/, and summary.json saying so.
"""

from typing import Any

import optuna
from accelerate import Accelerator

PRUNER = "pruner"  # the study's user attribute naming its pruner


class NoPruning:
    """A run outside a sweep: nothing is reported, nothing is pruned."""

    def prunes(self, step: int, metric: float) -> bool:
        return False


class TrialPruning:
    """The Optuna trial `spec` names ("STUDY/NUMBER@STORAGE_URL", set by sweep.py)."""

    def __init__(self, spec: str, accelerator: Accelerator):
        trial, _, storage_url = spec.partition("@")
        study_name, _, number = trial.rpartition("/")
        storage = optuna.storages.get_storage(storage_url)
        study_id = storage.get_study_id_from_name(study_name)
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, int(number))
        pruner = study_pruner(storage.get_study_user_attrs(study_id)[PRUNER])
        study = optuna.load_study(study_name=study_name, storage=storage, pruner=pruner)
        self.trial: Any = optuna.Trial(study, trial_id)
        self.accelerator = accelerator

    def prunes(self, step: int, metric: float) -> bool:
        """Report `metric` at `step`; whether the pruner stops the trial here."""
        self.trial.report(metric, step)
        return self.trial.should_prune()


def study_pruner(spec: dict[str, Any]) -> Any:
    """The pruner of a sweep's --pruner and --startup_trials; its study records them
    (PRUNER), as Optuna keeps no pruner in its storage, so that its runs judge their trials
    the same way. The median pruner stops a trial whose evaluation is worse than the median
    of the finished trials' at the same step, once `startup_trials` have finished."""
    if spec["name"] == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=spec["startup_trials"])
    return optuna.pruners.NopPruner()


def trial_pruning(sweep_trial: str | None, accelerator: Accelerator) -> NoPruning | TrialPruning:
    return NoPruning() if sweep_trial is None else TrialPruning(sweep_trial, accelerator)
