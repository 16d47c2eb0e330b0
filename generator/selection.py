"""Which combinations a command works on: all, pairwise or the GPU matrix, narrowed by --set,
split by --shard.

`matrix` and `check` select through here, so a shard listed by one is the shard run by the other;
`check` takes the sample of combinations that also run their own tests here too.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from generator.answers import Answer, AnswerError, Answers, AnswerSpace
from generator.cover import TESTED_PAIRS, cost, covering
from generator.pairwise import pairs_of, pairwise
from generator.references import reference_combinations

T = TypeVar("T")

SAMPLES = ("sample", "pairwise", "rest", "all", "none")  # the choices of `check --project-tests`

_SHARD = re.compile(r"^(\d+)/(\d+)$")

# The questions whose answers do not change what runs on the device: a tracker writes what
# the host already holds. `--gpu-matrix` runs every combination of the other questions, and
# gives these each of their choices against each choice of every other question.
DEVICE_FREE = ("tracker",)

# Names other than the default, for renders that prove what users type: the shortest and
# the longest package name the validator takes (a line holding the name must be formatted
# alike at both ends).
USER_NAMES: tuple[Answers, ...] = (
    {"project_name": "Q", "package_name": "q"},
    {
        "project_name": "Satellite Crop Yield Segmentation Models",
        "package_name": "satellite_crop_yield_segmentation_models",
    },
)


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (1-based) of a list of combinations.

    The combinations are dealt to the shards like cards, in an order shuffled by a hash of
    their slugs: dealing in matrix order would give every shard the same choice of the last
    question whenever `count` shares a factor with its number of choices (4 shards of a
    matrix whose last question has 4 choices: one tracker each), and slow choices would pile
    up in one shard. The hash is of the slug, so the split is the same on every machine.
    """

    index: int = 1
    count: int = 1

    @classmethod
    def parse(cls, text: str) -> Shard:
        """`I/N` with 1 <= I <= N; AnswerError (one line) saying what is valid otherwise."""
        match = _SHARD.match(text.strip())
        if match:
            index, count = int(match[1]), int(match[2])
            if 1 <= index <= count:
                return cls(index, count)
        raise AnswerError(
            f"--shard {text!r}: expected I/N with whole numbers 1 <= I <= N, e.g. 1/4 ... 4/4"
        )

    def take(self, items: Sequence[T], key: Callable[[T], str]) -> list[T]:
        """This shard's items, in their original order; `key` names an item (its slug)."""
        dealt = sorted(
            range(len(items)), key=lambda i: hashlib.sha256(key(items[i]).encode()).digest()
        )
        return [items[i] for i in sorted(dealt[self.index - 1 :: self.count])]


def select(
    space: AnswerSpace,
    sets: Sequence[str] = (),
    *,
    pairwise_only: bool = False,
    gpu_matrix: bool = False,
    shard: Shard = Shard(),
) -> tuple[Answers, list[Answers]]:
    """The `--set` answers (free text included) and the combinations they leave, in order.

    `--set` fixes questions; every combination of the others is selected, or a pairwise
    cover of them, or the GPU matrix of them (device_product). The shard is taken last, so
    the N shards of any selection partition it.
    """
    assert not (pairwise_only and gpu_matrix), "one selection at a time (cli makes them exclusive)"
    fixed = space.parse_sets(sets)
    chosen = matching(space.combinations(), fixed)
    if pairwise_only:
        chosen = pairwise(space, chosen, first=rest_sample(space, chosen))
    elif gpu_matrix:
        chosen = device_product(space, chosen)
    return fixed, shard.take(chosen, space.slug)


def device_product(space: AnswerSpace, candidates: Sequence[Answers]) -> list[Answers]:
    """What `--gpu-matrix` selects from `candidates`: one combination for each combination
    of the questions that change what runs on the device (all but DEVICE_FREE), with
    device-free answers that make each of their choices meet each choice of every other
    question.

    Greedy: the defaults first when they are a candidate (the combination most users get),
    then, in matrix order, each device combination takes the device-free answers that meet
    the most choices and pairs of choices not met yet, ties going to the cheapest to check
    (cover.cost), then to the earliest. Where the device combinations are too few for every
    pair (--set fixing all but a question or two), more candidates are added the same way.
    The result keeps matrix order and depends only on copier.yml and `candidates`.
    """
    names = [axis.name for axis in space.axes]
    device = [name for name in names if name not in DEVICE_FREE]
    pair_sets = [pairs_of(combo, names) for combo in candidates]
    uncovered: set = set().union(set(), *pair_sets)
    groups: dict[tuple[Answer, ...], list[int]] = {}  # device answers: their candidates
    for i, combo in enumerate(candidates):
        groups.setdefault(tuple(combo[name] for name in device), []).append(i)
    chosen: list[int] = []

    def take(options: Sequence[int]) -> None:
        best = max(options, key=lambda i: (len(uncovered & pair_sets[i]), -cost(candidates[i])))
        chosen.append(best)
        uncovered.difference_update(pair_sets[best])

    if space.defaults() in candidates:
        take([list(candidates).index(space.defaults())])
    for options in groups.values():
        if not set(options) & set(chosen):
            take(options)
    while uncovered:
        take([i for i in range(len(candidates)) if i not in chosen])
    return [candidates[i] for i in sorted(chosen)]


def check_selection(
    space: AnswerSpace,
    sets: Sequence[str],
    shard: str,
    *,
    pairwise_only: bool = False,
    gpu_matrix: bool = False,
    project_tests: str = "sample",
) -> tuple[list[Answers], list[Answers]]:
    """What `check` runs: this shard's combinations, and the sample that runs its own tests.

    `shard` is the `--shard` text and `project_tests` one of SAMPLES. The sample is taken
    from the whole selection, before the shard. The free-text answers `--set` gives (a
    project name, say) go into every combination; the pairwise check, unless `--set` names
    the project or package, renders each with one of USER_NAMES, to prove the names users
    type as well as the default. AnswerError (one line) for an empty shard.
    """
    parsed = Shard.parse(shard)
    fixed, selection = select(space, sets, pairwise_only=pairwise_only, gpu_matrix=gpu_matrix)
    if project_tests == "rest":
        # From every combination the --set answers leave: --pairwise and --all hold them.
        sample = rest_sample(space, matching(space.combinations(), fixed))
    elif project_tests == "sample":
        sample = covering(space, selection, (), TESTED_PAIRS)
    elif project_tests == "pairwise":
        # The set `--pairwise` checks: every two choices of any two questions meet in a
        # combination whose own tests pass.
        sample = pairwise(space, selection, first=rest_sample(space, selection))
    else:
        sample = selection if project_tests == "all" else []
    combinations = parsed.take(selection, space.slug)
    if not combinations:
        raise AnswerError(f"shard {shard} of {len(selection)} combinations is empty")
    combinations = [fixed | answers for answers in combinations]
    sample = [fixed | answers for answers in sample]
    if pairwise_only and not {"project_name", "package_name"} & fixed.keys():
        combinations = with_user_names(space, combinations)
        sample = with_user_names(space, sample)
    return combinations, sample


# What the pairs' suites prove for each task, past the reference projects and the whole
# suites, running only the tests these answers add (check.added_tests):
# - its model sharded over 2 processes, its own unit of sharding (transformer blocks, CNN or
#   U-Net stages), without mixed precision: 2 processes must then train as 1 within the
#   order of float sums, which a missed gradient sync or a wrong split of the data or of
#   the metric's reduction (code DDP shares) would fail by percents;
# - fp16's loss scaling, on its loss.
# DDP's wrapper and bf16's looser tolerances are the same for every task: DDP's whole suite
# runs for one task, bf16's in the loaded reference, and every task trains, resumes and
# exports with each in the pairwise check; the nightly matrix runs every pairing's suite.
PAIR_SUITES: tuple[Answers, ...] = (
    {"distributed": "sharded", "mixed_precision": "no"},
    {"mixed_precision": "fp16"},
)


def rest_sample(space: AnswerSpace, candidates: Sequence[Answers]) -> list[Answers]:
    """The combinations of `candidates` whose own tests `check --project-tests rest` runs:
    the cheapest cover of what the reference projects' suites leave untested. The pairwise
    set starts with them, so that it holds them whatever the pairs would pick.

    First the whole suites of the choices the references leave (whole_suites), then, for
    each task and each of PAIR_SUITES that no reference or whole suite gives it, the
    cheapest combination with both, whose suite runs only the tests its answers add to its
    task's default project (check.added_tests). Its other tests are the default project's,
    run by the task's reference suite, and the check's stages train, resume and export it
    like every combination.
    """
    whole = whole_suites(space, candidates)
    return whole + pair_suites(space, candidates, [*reference_combinations(), *whole])


def pair_suites(
    space: AnswerSpace, candidates: Sequence[Answers], covered: Sequence[Answers]
) -> list[Answers]:
    """For each of PAIR_SUITES and each task, unless a combination of `covered` has both,
    the first of the cheapest `candidates` that has both (none where none has)."""
    tasks = next((axis.choices for axis in space.axes if axis.name == "task_type"), ())
    chosen: list[Answers] = []
    for answers in PAIR_SUITES:
        for task in tasks:
            wanted = {"task_type": task, **answers}
            if not matching(covered, wanted) and (options := matching(candidates, wanted)):
                chosen.append(min(options, key=cost))
    return chosen


def whole_suites(space: AnswerSpace, sample: Sequence[Answers]) -> list[Answers]:
    """Of `sample` (the rest sample), the combinations whose whole suites run: the cheapest
    that use every choice the reference projects leave. The others run their added tests."""
    names = [axis.name for axis in space.axes]  # not the free text `--set` or USER_NAMES gave
    return _cover_by(space, sample, names, reference_combinations())


def sweep_sample(space: AnswerSpace, sample: Sequence[Answers]) -> list[Answers]:
    """Of the rest sample's whole suites, those that also run a whole-sweep test (the
    pytest marker `sweep`: minutes of trials each): the cheapest that use every choice the
    reference projects' suites leave those tests. A sweep runs the same for every task; what
    it meets is the launcher, the tracker, the precision and the export of its trials. The
    reference suites run every sweep test; these run the one whose trials share a study side
    by side (`shared_study`), where two runs log to one tracker at once."""
    # Not the task: a sweep runs the same for each (the reference suites that run the
    # tests give it both directions of a metric, see references.SWEEP_TEST_REFERENCES).
    names = [axis.name for axis in space.axes if axis.name != "task_type"]
    sample = whole_suites(space, sample)  # test_sweep.py is not among the added tests
    return _cover_by(space, sample, names, reference_combinations(space, sweeping_only=True))


def _cover_by(
    space: AnswerSpace, sample: Sequence[Answers], names: Sequence[str], covered: Sequence[Answers]
) -> list[Answers]:
    """The cover of `sample` by its answers to `names` alone, past what `covered` uses of
    them: each as the first combination of `sample` that gives those answers."""

    def choices(combo: Answers) -> Answers:
        return {name: combo[name] for name in names if name in combo}

    chosen = covering(space, [choices(c) for c in sample], [choices(c) for c in covered])
    return [next(c for c in sample if choices(c) == wanted) for wanted in chosen]


def matching(combinations: Sequence[Answers], fixed: Mapping[str, Answer]) -> list[Answers]:
    """The combinations that agree with every fixed answer to a question with choices."""
    return [c for c in combinations if all(c[k] == v for k, v in fixed.items() if k in c)]


def with_user_names(space: AnswerSpace, combinations: Sequence[Answers]) -> list[Answers]:
    """Each combination with one of USER_NAMES, picked by a hash of its slug: the same name
    for a combination in any selection or shard."""
    return [
        USER_NAMES[hashlib.sha256(space.slug(c).encode()).digest()[0] % len(USER_NAMES)] | c
        for c in combinations
    ]
