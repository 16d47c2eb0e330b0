"""The answer space of the template, read from copier.yml (its only source).

A matrix axis is every question with `choices` or of `type: bool`; questions hidden with
`when: false` are computed values, and free-text questions keep their defaults in the matrix.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import yaml

from generator import COPIER_YML

Answer = str | bool | int | float
Answers = dict[str, Answer]

_BOOL_WORDS = {"true": True, "false": False, "yes": True, "no": False, "1": True, "0": False}


def answer_text(value: Answer) -> str:
    """An answer as `--set` takes it and copier.yml writes it: `true`/`false` for a bool."""
    return str(value).lower() if isinstance(value, bool) else str(value)


class AnswerError(ValueError):
    """A user-supplied answer that copier.yml does not allow; the message is one line."""


@dataclass(frozen=True)
class Axis:
    """One question of the matrix: its choices in copier.yml order and its default."""

    name: str
    choices: tuple[Answer, ...]
    default: Answer

    @property
    def is_bool(self) -> bool:
        return self.choices == (True, False)

    def slug_part(self, value: Answer) -> str:
        """`compile`/`nocompile` for a bool, so a slug never reads as `true-false-...`."""
        if self.is_bool:
            return self.name if value else f"no{self.name}"
        return str(value)

    def parse(self, text: str) -> Answer:
        """The choice that `text` names; AnswerError listing the choices otherwise."""
        if self.is_bool:
            if text.lower() in _BOOL_WORDS:
                return _BOOL_WORDS[text.lower()]
            allowed = ", ".join(_BOOL_WORDS)
            raise AnswerError(f"{self.name} is true or false, got {text!r}; allowed: {allowed}")
        for choice in self.choices:
            if str(choice) == text:
                return choice
        allowed = ", ".join(str(c) for c in self.choices)
        raise AnswerError(f"{text!r} is not a choice of {self.name}; allowed: {allowed}")


@functools.cache
def _compiled(validators: tuple[str, ...]) -> tuple[jinja2.Template, ...]:
    """The validators as Jinja templates, compiled once: compiling them again for each of the
    matrix's combinations took most of a second per listing."""
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined)
    return tuple(environment.from_string(validator) for validator in validators)


@dataclass(frozen=True)
class AnswerSpace:
    """The questions a user can answer, and the matrix spanned by those with choices."""

    questions: tuple[str, ...]  # every question a user answers, in copier.yml order
    axes: tuple[Axis, ...]
    # The axes' validators (Jinja templates) that refuse a choice beside another one, e.g.
    # fp16 with sharding: a combination one of them refuses is not in the matrix.
    validators: tuple[str, ...] = ()

    @property
    def free_text(self) -> tuple[str, ...]:
        """Questions without choices: the matrix keeps their defaults."""
        axis_names = {axis.name for axis in self.axes}
        return tuple(name for name in self.questions if name not in axis_names)

    def defaults(self) -> Answers:
        return {axis.name: axis.default for axis in self.axes}

    def combinations(self) -> list[Answers]:
        """Every combination of the axes, in copier.yml order (the last axis varies fastest)."""
        names = [axis.name for axis in self.axes]
        values = itertools.product(*(axis.choices for axis in self.axes))
        combinations = [dict(zip(names, combo, strict=True)) for combo in values]
        return [combo for combo in combinations if not self.refusal(combo)]

    def refusal(self, answers: Mapping[str, Answer]) -> str:
        """What copier.yml's validators say against `answers` (one line), or "" if nothing."""
        for validator in _compiled(self.validators):
            said = validator.render(**answers).strip()
            if said:
                return " ".join(said.split())
        return ""

    def slug(self, answers: Mapping[str, Answer]) -> str:
        """A stable name for a combination, e.g. `image_classification-single-no-nocompile`."""
        return "-".join(axis.slug_part(answers[axis.name]) for axis in self.axes)

    def parse_sets(self, items: Iterable[str]) -> Answers:
        """Answers from `name=value` strings; AnswerError (one line) for any bad one."""
        axes = {axis.name: axis for axis in self.axes}
        answers: Answers = {}
        for item in items:
            name, sep, text = item.partition("=")
            if not sep:
                raise AnswerError(f"--set {item!r}: expected name=value")
            try:
                if name in axes:
                    answers[name] = axes[name].parse(text)
                elif name in self.free_text:
                    answers[name] = text
                else:
                    allowed = ", ".join(self.questions)
                    raise AnswerError(f"unknown question {name!r}; questions: {allowed}")
            except AnswerError as error:
                raise AnswerError(f"--set {item}: {error}") from None
        return answers


def load_space(path: Path = COPIER_YML) -> AnswerSpace:
    """Read the answer space; ValueError when copier.yml holds something the matrix can't span."""
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    questions: list[str] = []
    axes: list[Axis] = []
    validators: list[str] = []
    for name, spec in config.items():
        if name.startswith("_"):
            continue
        if not isinstance(spec, dict):  # the `name: default` shorthand is a free-text question
            questions.append(name)
            continue
        if spec.get("when", True) is False:
            continue
        questions.append(name)
        if spec.get("type") == "bool":
            choices: tuple[Answer, ...] = (True, False)
        elif "choices" in spec:
            if spec.get("multiselect"):
                raise ValueError(f"{path}: {name} is multiselect; the matrix spans single choices")
            choices = _choice_values(spec["choices"])
        else:
            continue
        default = spec.get("default")
        if default not in choices:
            raise ValueError(f"{path}: the default of {name} ({default!r}) is not among {choices}")
        axes.append(Axis(name, choices, default))
        if spec.get("validator"):
            validators.append(spec["validator"])
    return AnswerSpace(tuple(questions), tuple(axes), tuple(validators))


def _choice_values(choices: Any) -> tuple[Answer, ...]:
    """Values of copier's choice forms: a list, [label, value] pairs, or {label: value}."""
    if isinstance(choices, dict):
        items = list(choices.values())
    else:
        items = [c[1] if isinstance(c, list) else c for c in choices]
    # A value may be {value: ..., validator: ...} to make one choice conditional.
    return tuple(item["value"] if isinstance(item, dict) else item for item in items)
