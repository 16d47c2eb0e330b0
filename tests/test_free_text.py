"""What users type: any name and text the validators accept renders a clean project that
carries the text unchanged; what they refuse gets copier's one-line error naming the rule.

Fixed renders use a 1- and a 40-character package name (the shortest and the longest the
validator takes: lines that hold the name must be formatted alike at both ends) with text
that needs escaping in every format; the property-based test draws names and text at
random, across every task and a covering set of the other answers.
"""

from __future__ import annotations

import keyword
from collections.abc import Iterator
from pathlib import Path

import copier
import pytest
import tomllib
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from generator.answers import COPIER_YML, Answers, load_space
from generator.checks import static_problems
from generator.cover import covering
from generator.render import ANSWERS_FILE, many_renders, render, template_copy
from generator.selection import USER_NAMES, select, with_user_names

SPACE = load_space()
TASKS = next(axis.choices for axis in SPACE.axes if axis.name == "task_type")
COVER = covering(SPACE)
NASTY = ' Say "hi" \\ back # {{ x }} {% y %} é 漢 *b* _i_ <b> & [l](u) `c` ~s~ |t| '
RESERVED = set(yaml.safe_load(COPIER_YML.read_text())["reserved_package_names"]["default"].split())


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with many_renders():  # see tests/test_matrix.py
        yield template_copy(tmp_path_factory.mktemp("template") / "copy")


def text_problems(project: Path, given_answers: dict[str, str]) -> list[str]:
    """Where a structured file does not parse or does not carry the text as typed."""
    problems = []
    meta = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    author = meta["authors"][0]
    carried = {
        "description": meta["description"],
        "author_name": author["name"],
        "author_email": author["email"],
    }
    recorded = yaml.safe_load((project / ANSWERS_FILE).read_text(encoding="utf-8"))
    for name, value in given_answers.items():
        if name in carried and carried[name] != value:
            problems.append(f"pyproject.toml: {name} is {carried[name]!r}, typed {value!r}")
        if recorded[name] != value:
            problems.append(f"{ANSWERS_FILE}: {name} is {recorded[name]!r}, typed {value!r}")
    tokens = (
        MarkdownIt("commonmark")
        .enable(["table", "strikethrough"])
        .parse((project / "README.md").read_text(encoding="utf-8"))
    )
    title = tokens[1].children  # heading_open, inline, heading_close, ...
    shown = "".join(t.content for t in title if t.type == "text")
    if shown != given_answers["project_name"]:
        problems.append(f"README.md: the title shows {shown!r}")
    description = given_answers["description"].strip()
    if description:
        paragraph = "".join(t.content for t in tokens[4].children if t.type == "text")
        if tokens[3].type != "paragraph_open" or paragraph != description:
            problems.append(f"README.md: the description shows {paragraph!r}")
    return problems


def check_render(template: Path, dest: Path, answers: Answers, typed: dict[str, str]) -> None:
    project = render({**answers, **typed}, dest, template=template)
    problems = static_problems(project, {**answers, **typed}, committed=False)
    problems += text_problems(project, typed)
    assert not problems, "\n".join([f"answers: {answers | typed}", *problems])


NAMES = dict(zip(("shortest", "longest"), USER_NAMES, strict=True))


@pytest.mark.parametrize("length", NAMES)
@pytest.mark.parametrize("index", range(len(COVER)), ids=[SPACE.slug(c) for c in COVER])
def test_the_shortest_and_longest_names_render_clean(template, tmp_path, index, length):
    typed = NAMES[length] | {"description": NASTY, "author_name": 'O\'Brien "Bob" \\'}
    check_render(template, tmp_path / "project", COVER[index], typed)


def test_every_task_renders_clean_with_both_names(template, tmp_path):
    for task in TASKS:
        for length, names in NAMES.items():
            answers = COVER[0] | {"task_type": task}
            typed = names | {"description": NASTY, "author_name": "Ünal"}
            check_render(template, tmp_path / f"{task}-{length}", answers, typed)


package_names = st.from_regex(r"[a-z_][a-z0-9_]{0,39}", fullmatch=True).filter(
    lambda name: not keyword.iskeyword(name) and name not in RESERVED
)
project_names = st.from_regex(r"[A-Za-z]([A-Za-z0-9 ._-]{0,58}[A-Za-z0-9])?", fullmatch=True)
# Any printable text: the validators refuse control characters (line breaks among them).
free_text = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=120)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,  # the same examples in every CI run; the @examples pin the known cases
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    project_name=project_names,
    package_name=package_names,
    description=free_text,
    author_name=free_text.filter(str.strip),
    author_email=st.emails(),
    task=st.sampled_from(TASKS),
    others=st.sampled_from(COVER),
)
@example("Vision 2", "vision_2", "\\", "\\\\", "a@b.co", "text_classification", COVER[0])
@example("ab", "ab", ' "quoted" ', "'", '"x"@y.org', "tabular_regression", COVER[-1])
@example("Z", "z", "# {{ not jinja }} #", "日本 語", "u@d.io", "language_modeling", COVER[1])
def test_any_accepted_answer_renders_clean(
    template,
    tmp_path_factory,
    project_name,
    package_name,
    description,
    author_name,
    author_email,
    task,
    others,
):
    typed = {
        "project_name": project_name,
        "package_name": package_name,
        "description": description,
        "author_name": author_name,
        "author_email": author_email,
    }
    dest = tmp_path_factory.mktemp("drawn") / "project"
    check_render(template, dest, others | {"task_type": task}, typed)


@pytest.mark.parametrize(
    ("answer", "value", "rule"),
    [
        ("package_name", "x" * 41, "at most 40 characters, got 41"),
        ("package_name", "Torch", "lowercase Python identifier"),
        ("package_name", "class", "is a Python keyword"),
        ("package_name", "json", "would shadow the module 'json'"),
        ("project_name", "A" * 61, "at most 60 characters, got 61"),
        ("project_name", " lead", "must start with a letter"),
        ("description", "two\nlines", "single line of printable text"),
        ("description", "a\ttab", "single line of printable text"),
        ("author_name", "  ", "must not be empty"),
        ("author_name", "bell\x07", "printable text on one line"),
        ("author_email", "me@host", "must look like name@example.com"),
    ],
)
def test_a_refused_answer_names_the_rule(template, tmp_path, answer, value, rule):
    with pytest.raises(ValueError) as refused:
        copier.run_copy(
            str(template),
            str(tmp_path / "p"),
            data={answer: value},
            vcs_ref="HEAD",
            defaults=True,
            quiet=True,
        )
    message = str(refused.value)
    assert rule in message and f"question '{answer}'" in message
    assert not (tmp_path / "p").exists() or not any((tmp_path / "p").iterdir())


def test_the_pairwise_check_renders_with_both_user_names() -> None:
    _, pairwise_set = select(SPACE, pairwise_only=True)
    named = with_user_names(SPACE, pairwise_set)
    assert [{k: c[k] for k in pairwise_set[0]} for c in named] == pairwise_set
    assert {c["package_name"] for c in named} == {n["package_name"] for n in USER_NAMES}
    assert with_user_names(SPACE, pairwise_set[3:5]) == named[3:5]  # the same in any shard
