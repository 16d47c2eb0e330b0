"""A small set of combinations that uses every choice of every question at least once.

Running each rendered project's tests and training is too slow for the whole matrix on a CPU;
this subset still exercises every choice, and always includes the defaults.
"""

from __future__ import annotations

from collections.abc import Sequence

from generator.answers import Answers, AnswerSpace


def covering(space: AnswerSpace, candidates: Sequence[Answers] | None = None) -> list[Answers]:
    """Greedy cover: the defaults first, then the combination that uses the most unused choices.

    `candidates` (default: every combination) may be a selection, such as the pairwise set;
    then the choices it contains are covered, starting with its first combination when the
    defaults are not among them. Ties go to the earlier candidate, so the result is
    deterministic.
    """
    candidates = space.combinations() if candidates is None else list(candidates)
    if not candidates:
        return []
    uncovered = {choice for combo in candidates for choice in combo.items()}
    chosen: list[Answers] = []
    best = space.defaults() if space.defaults() in candidates else candidates[0]
    while True:
        chosen.append(best)
        uncovered -= set(best.items())
        if not uncovered:
            return chosen
        best = max(candidates, key=lambda combo: len(uncovered & set(combo.items())))
