"""A pairwise (all-pairs) covering set: every two choices of any two questions appear together.

Most faults in a template come from one choice or from two choices meeting (fp16 with compile,
an exporter with a tracker), so checking every pair catches most of what the full matrix
would, with a few dozen combinations instead of hundreds.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from generator.answers import Answer, Answers, AnswerSpace
from generator.cover import cost

Choice = tuple[str, Answer]


def pairs_of(answers: Mapping[str, Answer], names: Sequence[str]) -> frozenset[tuple[Choice, ...]]:
    """Each choice of a combination alone, and each two together, for the questions in `names`.

    The singles matter only where a question has no partner (a one-question matrix, or every
    other question fixed with --set): its choices must still all be covered.
    """
    choices = [(name, answers[name]) for name in names]
    return frozenset([(choice,) for choice in choices] + list(itertools.combinations(choices, 2)))


def pairwise(
    space: AnswerSpace,
    candidates: Sequence[Answers] | None = None,
    first: Sequence[Answers] = (),
) -> list[Answers]:
    """Greedy all-pairs cover of `candidates` (default: every combination of `space`).

    Starts with the defaults (the combination most users get) when they are a candidate and
    the candidates in `first` (combinations the set must hold, such as those whose own tests
    run), then repeatedly takes the candidate that covers the most pairs not yet covered,
    ties going to the cheapest to check (cover.cost: most pairs can be covered without
    compiling), then to the earliest in matrix order, so the result depends only on
    copier.yml.
    Only pairs that some candidate contains need covering, so candidates restricted with
    `--set` work as is.
    Scanning every candidate per row is cheap for a matrix of thousands of combinations.
    """
    candidates = space.combinations() if candidates is None else list(candidates)
    if not candidates:
        return []
    names = [axis.name for axis in space.axes]
    pair_sets = [pairs_of(combo, names) for combo in candidates]
    uncovered = set().union(*pair_sets)
    defaults = space.defaults()
    best = next((i for i, combo in enumerate(candidates) if combo == defaults), 0)
    chosen: list[Answers] = []
    for combo in [candidates[best], *first]:
        if combo in candidates and combo not in chosen:
            chosen.append(combo)
            uncovered -= pair_sets[candidates.index(combo)]
    while uncovered:
        best = max(
            range(len(candidates)),
            key=lambda i: (len(uncovered & pair_sets[i]), -cost(candidates[i])),
        )
        chosen.append(candidates[best])
        uncovered -= pair_sets[best]
    return chosen
