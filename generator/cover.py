"""A small set of combinations that uses every choice of every question at least once.

Running each rendered project's tests and training is too slow for the whole matrix on a CPU;
this subset still exercises every choice, and always includes the defaults.
"""

from __future__ import annotations

from generator.answers import Answers, AnswerSpace


def covering(space: AnswerSpace) -> list[Answers]:
    """Greedy cover: the defaults first, then the combination that uses the most unused choices.

    Ties go to the earlier combination in matrix order, so the result is deterministic.
    """
    candidates = space.combinations()
    uncovered = {(axis.name, choice) for axis in space.axes for choice in axis.choices}
    chosen: list[Answers] = []
    best = space.defaults()
    while True:
        chosen.append(best)
        uncovered -= set(best.items())
        if not uncovered:
            return chosen
        best = max(candidates, key=lambda combo: len(uncovered & set(combo.items())))
