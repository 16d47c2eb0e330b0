"""What each evaluation decides (evaluate.py): whether a metric beats the best so far, which
step the best checkpoint is of, and when early stopping or a sweep's pruner ends the run."""

import logging

import pytest

from image_classification_loaded import evaluate
from image_classification_loaded.checkpoint import Progress
from image_classification_loaded.evaluate import EarlyStopping, improves


@pytest.fixture(params=[True, False], ids=["higher_is_better", "lower_is_better"])
def better(request, monkeypatch):
    """`better(value, by)`: a metric `by` better than `value`, with the task's metric made to
    point each way, as accuracy (higher) and loss (lower) do."""
    monkeypatch.setattr(evaluate.task, "HIGHER_IS_BETTER", request.param)
    sign = 1.0 if request.param else -1.0
    return lambda value, by: value + sign * by


@pytest.fixture
def logged(caplog):
    """evaluate.py's log lines (the package's logger stops propagation once a run has set up
    logging; caplog listens at the root)."""
    package_log = logging.getLogger(evaluate.__name__.partition(".")[0])
    package_log.propagate, propagated = True, package_log.propagate
    caplog.set_level(logging.INFO, logger=evaluate.log.name)
    yield lambda: [record.getMessage() for record in caplog.records]
    package_log.propagate = propagated


def test_improving_means_better_by_more_than_the_margin(better):
    assert improves(better(1.0, -5.0), None)  # the first evaluation is the best so far
    assert improves(better(1.0, 0.25), 1.0)
    assert not improves(1.0, 1.0)  # equal is no improvement
    assert not improves(better(1.0, -0.25), 1.0)
    assert improves(better(1.0, 0.5), 1.0, by=0.25)
    assert not improves(better(1.0, 0.25), 1.0, by=0.25)  # by exactly the margin: not more


def record_all(stopping: EarlyStopping, metrics: list[float]) -> list[tuple]:
    """Record `metrics` at steps 1, 2, ...: after each, the best step, the evaluations
    without improvement so far, and whether the run stops."""
    progress, seen = Progress(), []
    for step, metric in enumerate(metrics, start=1):
        progress.step = step
        stopping.record(progress, metric)
        seen.append((progress.best_step, progress.stale_evaluations, stopping.stops(progress)))
    return seen


def test_the_best_is_the_best_so_far_and_only_the_margin_resets_patience(better):
    """Any improvement makes a new best (its checkpoint is kept as the best); only one by
    more than min_delta (0.5) resets the count that early stopping waits on."""
    a_little, worse, a_lot = better(1.0, 0.25), better(1.0, -1.0), better(1.0, 1.0)
    seen = record_all(EarlyStopping(patience=3, min_delta=0.5), [1.0, a_little, worse, a_lot])
    assert seen == [(1, 0, False), (2, 1, False), (2, 2, False), (4, 0, False)]
    seen = record_all(EarlyStopping(patience=3, min_delta=0.5), [1.0, worse, worse, worse])
    assert seen == [(1, 0, False), (1, 1, False), (1, 2, False), (1, 3, True)]


def test_patience_one_stops_at_the_first_evaluation_without_improvement_and_zero_never(
    better,
):
    assert record_all(EarlyStopping(patience=1, min_delta=0.0), [1.0, 1.0]) == [
        (1, 0, False),
        (1, 1, True),
    ]
    never = record_all(EarlyStopping(patience=0, min_delta=0.0), [1.0] * 5)
    assert [stops for _, _, stops in never] == [False] * 5


def test_early_stopping_says_why_it_stops(logged):
    record_all(EarlyStopping(patience=2, min_delta=0.5), [1.0, 1.0, 1.0])
    assert logged() == [
        "stopping early: 2 evaluations without an improvement of more than 0.5 "
        "(--early_stopping_patience, --early_stopping_min_delta)"
    ]


class PrunesFrom:
    """A sweep's pruner, as TrialPruning answers: it stops the trial from `step` on."""

    def __init__(self, step: int):
        self.step = step

    def prunes(self, step: int, metric: float) -> bool:
        return step >= self.step


def test_a_pruned_trial_stops_and_says_so_once(logged):
    """Pruning stops a run that patience alone would not (0: never), with its own line."""
    seen = record_all(EarlyStopping(patience=0, min_delta=0.0, pruning=PrunesFrom(3)), [1.0] * 3)
    assert [stops for _, _, stops in seen] == [False, False, True]
    assert logged() == ["pruned: the sweep's pruner stops this trial at step 3"]
