"""Every combination of choices renders into a project that reads as if written by hand; the
pairwise set covers every pair of choices, and shards split any selection exactly."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import reproduce

from generator import REPO_ROOT
from generator.answers import AnswerError, Answers, AnswerSpace, Axis, load_space
from generator.checks import CHOICE_MARKERS, many_static_problems
from generator.pairwise import pairwise
from generator.render import many_renders, render, template_copy
from generator.selection import Shard, check_selection, select

SPACE = load_space()
COMBINATIONS = SPACE.combinations()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The working tree's template, copied once outside git: copier reads it in place instead
    of cloning a repository for each of the renders (a third of a render's time). The answers
    file's `_commit` is then missing; tests/test_check.py and test_references.py check it.
    Each text of the template is compiled once for all the renders (most of the rest), and
    copier asks git nothing about destinations outside a repository (render.many_renders)."""
    with many_renders():
        yield template_copy(tmp_path_factory.mktemp("template") / "copy")


# The combinations in groups, so that ruff checks a group's renders in one run (its start is
# most of a render's checks); the groups are many, for the xdist workers to share.
GROUPS = 48


@pytest.mark.parametrize("group", range(GROUPS), ids=lambda g: f"group-{g + 1}-of-{GROUPS}")
def test_every_combination_is_clean(tmp_path: Path, group: int, template: Path) -> None:
    renders = {
        render(answers, tmp_path / SPACE.slug(answers), template=template): answers
        for answers in COMBINATIONS[group::GROUPS]
    }
    found = many_static_problems(renders, committed=False)
    failures = [
        "\n".join([reproduce(renders[project]), *problems])
        for project, problems in found.items()
        if problems
    ]
    assert not failures, "\n\n".join(failures)


def test_many_renders_write_what_a_render_writes(tmp_path: Path) -> None:
    answers = SPACE.defaults() | {"distributed": "multi", "export_target": "onnx"}
    plain = render(answers, tmp_path / "plain", template=template_copy(tmp_path / "t"))
    with many_renders():
        render(answers, tmp_path / "warm", template=tmp_path / "t")  # compiles the texts
        fast = render(answers, tmp_path / "fast", template=tmp_path / "t")

    def tree(root: Path) -> dict[str, tuple[bytes, int]]:
        files = (path for path in sorted(root.rglob("*")) if path.is_file())
        return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mode) for p in files}

    assert tree(fast) == tree(plain)


def test_choice_markers_name_real_choices() -> None:
    axes = {axis.name: axis for axis in SPACE.axes}
    for question, markers in CHOICE_MARKERS.items():
        assert question in axes, f"CHOICE_MARKERS: {question} is not a question with choices"
        stale = set(markers) - set(axes[question].choices)
        assert not stale, f"CHOICE_MARKERS[{question!r}]: {stale} are not choices"


# --- pairwise and shards: what `matrix` and `check` select

# Synthetic spaces, so the properties hold beyond today's copier.yml: the answer space once
# every planned choice lands, one with a single-choice question, and a lone question.
SYNTHETIC = {
    "planned": (5, 2, 3, 2, 4, 4),
    "even": (3, 3, 3, 3),
    "single_choice": (4, 1, 3),
    "one_question": (3,),
}


def synthetic_space(sizes: tuple[int, ...]) -> AnswerSpace:
    axes = tuple(
        Axis(f"q{i}", tuple(f"c{j}" for j in range(size)), f"c{size - 1}")
        for i, size in enumerate(sizes)
    )
    return AnswerSpace(tuple(axis.name for axis in axes), axes)


def missing_pairs(space: AnswerSpace, chosen: list[Answers]) -> list[str]:
    """Choices, alone and in twos across questions, that no chosen combination holds, of
    those some combination holds (copier.yml's validators refuse a pair, such as sharding
    with fp16: no combination holds it)."""
    missing = [
        f"{a.name}={x}"
        for a in space.axes
        for x in a.choices
        if not any(c[a.name] == x for c in chosen)
    ]
    allowed = space.combinations()
    for a, b in itertools.combinations(space.axes, 2):
        held = {(c[a.name], c[b.name]) for c in allowed}
        for x, y in itertools.product(a.choices, b.choices):
            if (x, y) in held and not any(c[a.name] == x and c[b.name] == y for c in chosen):
                missing.append(f"{a.name}={x} with {b.name}={y}")
    return missing


@pytest.mark.parametrize(
    "space", [SPACE, *map(synthetic_space, SYNTHETIC.values())], ids=["copier.yml", *SYNTHETIC]
)
def test_pairwise_covers_every_pair(space: AnswerSpace) -> None:
    chosen = pairwise(space)
    assert not missing_pairs(space, chosen)
    assert chosen[0] == space.defaults()
    assert all(combo in space.combinations() for combo in chosen)
    assert len({space.slug(c) for c in chosen}) == len(chosen), "a combination twice"


def test_pairwise_is_much_smaller_than_the_matrix() -> None:
    space = synthetic_space(SYNTHETIC["planned"])
    # The lower bound is 5 x 4 = 20 (every task meets every exporter); greedy stays close.
    assert 20 <= len(pairwise(space)) <= 30 < len(space.combinations()) == 960


def test_pairwise_with_fixed_answers_covers_the_rest() -> None:
    space = synthetic_space(SYNTHETIC["planned"])
    _, chosen = select(space, ["q1=c0", "q4=c2"], pairwise_only=True)
    assert all(c["q1"] == "c0" and c["q4"] == "c2" for c in chosen)
    rest = AnswerSpace(space.questions, tuple(a for a in space.axes if a.name not in ("q1", "q4")))
    assert not missing_pairs(rest, chosen)


def test_pairwise_does_not_depend_on_hash_seeds() -> None:
    """Sets of strings iterate in a per-process order; the cover must not follow it."""
    outputs = [
        subprocess.run(
            [sys.executable, "-m", "generator", "matrix", "--pairwise"],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        for seed in ("1", "2")
    ]
    assert outputs[0] == outputs[1]
    assert outputs[0].splitlines() == [SPACE.slug(c) for c in select(SPACE, pairwise_only=True)[1]]


@pytest.mark.parametrize(
    ("count", "pairwise_only"),
    # Each shard of the pairwise set computes the set again (a tenth of a second): 27 shards
    # of its 27 combinations stand for many.
    [*((n, False) for n in (1, 2, 3, 4, 7, 200)), *((n, True) for n in (1, 2, 3, 4, 7, 27))],
)
def test_shards_cover_the_selection_exactly_once(count: int, pairwise_only: bool) -> None:
    _, selection = select(SPACE, pairwise_only=pairwise_only)
    shards = [
        select(SPACE, pairwise_only=pairwise_only, shard=Shard(i, count))[1]
        for i in range(1, count + 1)
    ]
    slugs = Counter(SPACE.slug(c) for shard in shards for c in shard)
    assert slugs == Counter(SPACE.slug(c) for c in selection)
    assert max(map(len, shards)) - min(map(len, shards)) <= 1, "shards should be balanced"


@pytest.mark.parametrize("text", ["0/4", "5/4", "1/0", "a/b", "2", "1/2/3", "-1/2", " /3", "1.0/2"])
def test_bad_shard_says_what_is_valid(text: str) -> None:
    with pytest.raises(AnswerError, match=r"expected I/N with whole numbers 1 <= I <= N") as error:
        Shard.parse(text)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("count", [2, 4, 8])
def test_every_shard_gets_every_choice(count: int) -> None:
    """Dealt in matrix order, 4 shards would each get a single tracker (it has 4 choices)."""
    for index in range(1, count + 1):
        _, shard = select(SPACE, shard=Shard(index, count))
        for axis in SPACE.axes:
            assert {c[axis.name] for c in shard} == set(axis.choices), (index, axis.name)


def test_the_whole_matrix_can_test_its_pairwise_set_across_shards() -> None:
    """`check --all --project-tests pairwise`: the combinations whose own tests run are the
    pairwise set (every pair of answers meets in a tested suite), however it is sharded."""
    shards = [check_selection(SPACE, [], f"{i}/4", project_tests="pairwise") for i in (1, 2, 3, 4)]
    _, pairwise_set = select(SPACE, pairwise_only=True)
    for _, sample in shards:
        assert [SPACE.slug(c) for c in sample] == [SPACE.slug(c) for c in pairwise_set]
    tested = [SPACE.slug(c) for combinations, sample in shards for c in combinations if c in sample]
    assert sorted(tested) == sorted(SPACE.slug(c) for c in pairwise_set)
    assert not missing_pairs(SPACE, pairwise_set)
