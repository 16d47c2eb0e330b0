"""A small set of combinations that uses every choice of every question at least once, and
every combination of choices of the question pairs named.

Running each rendered project's tests and training is too slow for the whole matrix on a CPU;
this subset still exercises every choice, and always includes the defaults.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from generator.answers import Answer, Answers, AnswerSpace

# The pairs whose every combination some project's own tests must run: the tests of each
# task check what mixed precision and several processes change (tolerances, equivalence).
TESTED_PAIRS = (("task_type", "mixed_precision"), ("task_type", "distributed"))

Feature = frozenset[tuple[str, Answer]]  # one choice, or one choice of each question of a pair


def features(combo: Answers, pairs: Sequence[tuple[str, str]] = ()) -> set[Feature]:
    """The choices `combo` uses, one by one and as the pairs `pairs` names."""
    singles = {frozenset([choice]) for choice in combo.items()}
    return singles | {
        frozenset((q, combo[q]) for q in pair) for pair in pairs if set(pair) <= combo.keys()
    }


def covering(
    space: AnswerSpace,
    candidates: Sequence[Answers] | None = None,
    covered: Iterable[Answers] = (),
    pairs: Sequence[tuple[str, str]] = (),
) -> list[Answers]:
    """Greedy cover: the defaults first, then the combination that uses the most unused
    features (choices, and combinations of choices of the question pairs in `pairs`).

    `candidates` (default: every combination) may be a selection, such as the pairwise set;
    then the features it contains are covered, starting with its first combination when the
    defaults are not among them. `covered` names combinations tested elsewhere (the reference
    projects): the cover then uses only the features they leave, without forcing in the
    defaults, and is empty when nothing is left. Ties go to the earlier candidate, so the
    result is deterministic.

    Of the combinations that use the most unused features, the cheapest (cost) is taken:
    the cover is what `make test` runs the suites of.
    """
    candidates = space.combinations() if candidates is None else list(candidates)
    done = {feature for combo in covered for feature in features(combo, pairs)}
    uncovered = {f for combo in candidates for f in features(combo, pairs)} - done
    chosen: list[Answers] = []
    if candidates and not done:
        chosen.append(space.defaults() if space.defaults() in candidates else candidates[0])
        uncovered -= features(chosen[0], pairs)
    while uncovered:
        best = max(
            candidates,
            key=lambda combo: (len(uncovered & features(combo, pairs)), -cost(combo)),
        )
        chosen.append(best)
        uncovered -= features(best, pairs)
    return chosen


def cost(combo: Answers) -> int:
    """A rough price of checking a combination, its own suite or its check's stages: the
    work each option adds (compiling counts twice: a compiled run spends most of its time
    compiling, and the resume compiles again)."""
    return (
        2 * bool(combo.get("compile"))
        + (combo.get("distributed", "single") != "single")
        + (combo.get("tracker", "none") != "none")
        + (combo.get("export_target", "none") != "none")
    )
