"""The answer space read from copier.yml: axes, combinations, slugs, covering, --set."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from generator.answers import AnswerError, load_space
from generator.cover import covering

SAMPLE = """\
_subdirectory: template
name:
  type: str
  default: demo
shorthand: text
hidden:
  type: str
  when: false
  default: computed
task:
  type: str
  choices:
    "Images": image
    "Text": {value: text, validator: ""}
  default: text
size:
  type: int
  choices: [[Small, 1], [Large, 2]]
  default: 1
compile:
  type: bool
  default: false
mode:
  type: str
  choices: [fast, careful]
  default: fast
"""


@pytest.fixture
def sample(tmp_path: Path):
    path = tmp_path / "copier.yml"
    path.write_text(SAMPLE, encoding="utf-8")
    return load_space(path)


def test_axes_follow_copier_yml(sample) -> None:
    assert [axis.name for axis in sample.axes] == ["task", "size", "compile", "mode"]
    assert [axis.choices for axis in sample.axes] == [
        ("image", "text"),
        (1, 2),
        (True, False),
        ("fast", "careful"),
    ]
    assert sample.defaults() == {"task": "text", "size": 1, "compile": False, "mode": "fast"}
    assert sample.free_text == ("name", "shorthand")


def test_combinations_are_the_ordered_product(sample) -> None:
    combinations = sample.combinations()
    assert len(combinations) == 16
    assert combinations[0] == {"task": "image", "size": 1, "compile": True, "mode": "fast"}
    assert combinations[1]["mode"] == "careful"


def test_slugs_are_stable_and_unique(sample) -> None:
    slugs = [sample.slug(c) for c in sample.combinations()]
    assert slugs[0] == "image-1-compile-fast"
    assert sample.slug(sample.defaults()) == "text-1-nocompile-fast"
    assert len(set(slugs)) == len(slugs)


def test_a_default_outside_the_choices_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "copier.yml"
    path.write_text(SAMPLE.replace("default: fast", "default: slow"), encoding="utf-8")
    with pytest.raises(ValueError, match="default of mode"):
        load_space(path)


def test_parse_sets(sample) -> None:
    answers = sample.parse_sets(["size=2", "compile=yes", "mode=careful", "name=a=b"])
    assert answers == {"size": 2, "compile": True, "mode": "careful", "name": "a=b"}
    assert sample.parse_sets(["compile=0"]) == {"compile": False}


@pytest.mark.parametrize(
    ("item", "words"),
    [
        ("mode=slow", ["mode", "fast, careful"]),
        ("compile=maybe", ["compile", "true, false"]),
        ("colour=red", ["unknown question 'colour'", "name, shorthand, task"]),
        ("hidden=x", ["unknown question 'hidden'"]),
        ("mode", ["expected name=value"]),
    ],
)
def test_parse_sets_refuses(sample, item: str, words: list[str]) -> None:
    with pytest.raises(AnswerError) as error:
        sample.parse_sets([item])
    message = str(error.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_covering_uses_every_choice_and_starts_with_defaults(sample) -> None:
    chosen = covering(sample)
    assert chosen[0] == sample.defaults()
    used = {pair for combo in chosen for pair in combo.items()}
    assert used == {(axis.name, c) for axis in sample.axes for c in axis.choices}
    assert len(chosen) == max(len(axis.choices) for axis in sample.axes)
    assert covering(sample) == chosen


def test_the_real_answer_space() -> None:
    space = load_space()
    combinations = space.combinations()
    every = math.prod(len(axis.choices) for axis in space.axes)
    # copier.yml's validator refuses fp16 beside sharding: a third of the sharded ones
    sharded = every // len({c["distributed"] for c in combinations})
    assert len(combinations) == every - sharded // 3
    pairs = {(c["distributed"], c["mixed_precision"]) for c in combinations}
    assert ("sharded", "fp16") not in pairs and ("sharded", "bf16") in pairs
    assert space.defaults() in combinations
    slugs = {space.slug(c) for c in combinations}
    assert len(slugs) == len(combinations)
    assert {"project_name", "package_name"} <= set(space.free_text)
    assert "reserved_package_names" not in space.questions
    used = {pair for combo in covering(space) for pair in combo.items()}
    assert used == {(axis.name, c) for axis in space.axes for c in axis.choices}


def test_a_validator_that_refuses_a_pair_of_choices_says_so_in_one_line() -> None:
    space = load_space()
    refused = space.defaults() | {"distributed": "sharded", "mixed_precision": "fp16"}
    said = space.refusal(refused)
    assert said.startswith("mixed_precision fp16 is not offered with distributed sharded")
    assert "\n" not in said
    assert space.refusal(space.defaults()) == ""


def test_covering_leaves_out_choices_covered_elsewhere(sample) -> None:
    first = sample.axes[0]
    covered = [sample.defaults() | {first.name: choice} for choice in first.choices]
    chosen = covering(sample, covered=covered)
    used = {pair for combo in chosen for pair in combo.items()}
    rest = {(axis.name, c) for axis in sample.axes[1:] for c in axis.choices if c != axis.default}
    assert rest <= used
    assert len(chosen) == max(len(axis.choices) - 1 for axis in sample.axes[1:])
    assert covering(sample, covered=sample.combinations()) == []


def test_covering_pairs_uses_every_combination_of_their_choices(sample) -> None:
    first, second = sample.axes[0].name, sample.axes[1].name
    chosen = covering(sample, pairs=[(first, second)])
    met = {(combo[first], combo[second]) for combo in chosen}
    assert met == {(a, b) for a in sample.axes[0].choices for b in sample.axes[1].choices}
    assert len(chosen) < len(covering(sample, pairs=[(first, second)]) + sample.combinations())
