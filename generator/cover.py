"""A small set of combinations that uses every choice of every question at least once.

Running each rendered project's tests and training is too slow for the whole matrix on a CPU;
this subset still exercises every choice, and always includes the defaults.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from generator.answers import Answer, Answers, AnswerSpace


def covering(
    space: AnswerSpace,
    candidates: Sequence[Answers] | None = None,
    covered: Iterable[tuple[str, Answer]] = (),
) -> list[Answers]:
    """Greedy cover: the defaults first, then the combination that uses the most unused choices.

    `candidates` (default: every combination) may be a selection, such as the pairwise set;
    then the choices it contains are covered, starting with its first combination when the
    defaults are not among them. `covered` names choices exercised elsewhere (the reference
    projects' own tests): the cover then uses only the choices they leave, without forcing in
    the defaults, and is empty when nothing is left. Ties go to the earlier candidate, so the
    result is deterministic.
    """
    candidates = space.combinations() if candidates is None else list(candidates)
    covered = set(covered)
    uncovered = {choice for combo in candidates for choice in combo.items()} - covered
    chosen: list[Answers] = []
    if candidates and not covered:
        chosen.append(space.defaults() if space.defaults() in candidates else candidates[0])
        uncovered -= set(chosen[0].items())
    while uncovered:
        best = max(candidates, key=lambda combo: len(uncovered & set(combo.items())))
        chosen.append(best)
        uncovered -= set(best.items())
    return chosen
