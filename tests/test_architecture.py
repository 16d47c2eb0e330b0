"""The shape of the code: small modules with one job each (STYLE.md, points 3 and 14)."""

from __future__ import annotations

import ast
from pathlib import Path

import jinja2
import pytest
import yaml
from helpers import decision_tags, decision_tags_by_file

from generator import REPO_ROOT
from generator.answers import load_space
from generator.render import many_renders, package_of, render

MAX_MODULE_LINES = 300


def test_generator_modules_are_at_most_300_lines() -> None:
    sizes = {
        path.relative_to(REPO_ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted((REPO_ROOT / "generator").glob("*.py"))
    }
    too_long = [
        f"{name}: {lines} lines" for name, lines in sizes.items() if lines > MAX_MODULE_LINES
    ]
    assert sizes, "no modules found in generator/"
    assert not too_long, (
        f"generator modules over {MAX_MODULE_LINES} lines (split each by its jobs): "
        + "; ".join(too_long)
    )


# The template's training loop: train.py.jinja decides little by answer (an `{% if %}` or
# `{% elif %}` tag each decision), and every render's train.py and its train() stay short
# enough to read in one sitting; the other choices live in files of their own.
MAX_TRAIN_TAGS = 6
MAX_TRAIN_LINES = 300
MAX_TRAIN_FUNCTION_LINES = 120
TRAIN_TEMPLATE = REPO_ROOT / "template" / "src" / "{{package_name}}" / "train.py.jinja"


def test_train_template_decides_no_more_answers_inline_than_it_does_now() -> None:
    tags = decision_tags(TRAIN_TEMPLATE.read_text(encoding="utf-8"))
    assert tags <= MAX_TRAIN_TAGS, f"train.py.jinja has {tags} if/elif tags"


# Answers decided by file rather than by `if`: the counts today, which may only go down. The
# aims were at most 45 in template/src, 6 in any one file, and 4 in optim.py.jinja (each
# reached); train.py.jinja (MAX_TRAIN_TAGS above) aims at 4.
MAX_SRC_TAGS = 43
MAX_TAGS_PER_FILE = 6
MAX_TAGS_BY_FILE = {
    "train.py.jinja": MAX_TRAIN_TAGS,
    "config.py.jinja": 3,
    "optim.py.jinja": 4,
    "state.py.jinja": 0,
}
SRC_TEMPLATE = TRAIN_TEMPLATE.parent


def test_the_template_decides_no_more_answers_inline_than_it_does_now() -> None:
    tags = decision_tags_by_file(SRC_TEMPLATE)
    assert sum(tags.values()) <= MAX_SRC_TAGS, f"{sum(tags.values())} if/elif tags in src/"
    caps = {name: MAX_TAGS_BY_FILE.get(Path(name).name, MAX_TAGS_PER_FILE) for name in tags}
    over = {name: count for name, count in tags.items() if count > caps[name]}
    assert not over, f"if/elif tags over {MAX_TAGS_PER_FILE} (or {MAX_TAGS_BY_FILE}): {over}"


# The aim: 70 (tests/calls.py's LEAN holds what a test run skips, for every suite).
MAX_TEST_TAGS = 70
TESTS_TEMPLATE = REPO_ROOT / "template" / "tests"


def test_the_tests_decide_no_more_answers_inline_than_they_do_now() -> None:
    tags = sum(decision_tags_by_file(TESTS_TEMPLATE).values())
    assert tags <= MAX_TEST_TAGS, f"{tags} if/elif tags in tests/"


def public_interface(source: str) -> dict[str, list[str]]:
    """A module's public functions and classes, with their arguments and public methods."""
    interface = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            interface[node.name] = [arg.arg for arg in node.args.args]
        elif isinstance(node, ast.ClassDef):
            interface[node.name] = [
                f"{item.name}({', '.join(arg.arg for arg in item.args.args)})"
                for item in node.body
                if isinstance(item, ast.FunctionDef)
            ]
    return interface


def test_each_precision_renders_precision_py_with_one_interface() -> None:
    """The loop calls precision.py the same whatever the answer: fp16's version adds a
    gradient scaler behind the interface of the others. The files are rendered with
    copier.yml's Jinja settings (a whole project per answer would cost seconds each)."""
    envops = yaml.safe_load((REPO_ROOT / "copier.yml").read_text(encoding="utf-8"))["_envops"]
    settings = {key: envops[key] for key in ("trim_blocks", "lstrip_blocks")}
    environment = jinja2.Environment(**settings, undefined=jinja2.StrictUndefined)
    versions = {path.name: path for path in SRC_TEMPLATE.glob("*precision.py*")}
    assert len(versions) == 2, versions  # fp16's, and the one of no and bf16
    interfaces = {}
    for answers in load_space().combinations():
        precision, distributed = answers["mixed_precision"], answers["distributed"]
        (path,) = [
            p for name, p in versions.items() if ('== "fp16"' in name) == (precision == "fp16")
        ]
        source = environment.from_string(path.read_text(encoding="utf-8")).render(
            mixed_precision=precision, distributed=distributed
        )
        interfaces[precision, distributed] = public_interface(source)
    assert len(interfaces) == 8  # fp16 is not offered beside sharding
    assert len({str(interface) for interface in interfaces.values()}) == 1, interfaces
    assert {"build_adamw", "prepare", "StepPrecision"} <= interfaces["no", "single"].keys()


def function_lines(source: str, name: str) -> int:
    node = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and node.name == name
    )
    return node.end_lineno - node.lineno + 1


# The answers that add lines to train.py, all at once, for every task: the longest renders,
# and the plainest (single, no option) beside them.
LOADED = {"distributed": "multi", "mixed_precision": "fp16", "compile": True}
LOADED |= {"export_target": "onnx", "tracker": "wandb"}


@pytest.mark.parametrize("loaded", [False, True], ids=["plain", "loaded"])
def test_every_task_renders_a_short_train_py(tmp_path: Path, loaded: bool) -> None:
    space = load_space()
    task_axis = next(axis for axis in space.axes if axis.name == "task_type")
    sizes = {}
    with many_renders():
        for task in task_axis.choices:
            answers = space.defaults() | {"task_type": task} | (LOADED if loaded else {})
            project = render(answers, tmp_path / task)
            source = (project / "src" / package_of(project) / "train.py").read_text()
            sizes[task] = (len(source.splitlines()), function_lines(source, "train"))
    too_long = {
        task: size
        for task, size in sizes.items()
        if size[0] > MAX_TRAIN_LINES or size[1] > MAX_TRAIN_FUNCTION_LINES
    }
    assert not too_long, f"(train.py lines, train() lines) over ({MAX_TRAIN_LINES}, " + (
        f"{MAX_TRAIN_FUNCTION_LINES}): {too_long}"
    )


def test_each_process_count_renders_processes_py_with_one_interface(tmp_path: Path) -> None:
    """train.py calls processes.py the same for one process or several, whole or sharded:
    seeds, the writes of the main process, the model's distribution, the shared logs, the
    stop on a signal and the group's close."""
    interfaces = {}
    with many_renders():
        for distributed in ("single", "multi", "sharded"):
            answers = load_space().defaults() | {"distributed": distributed}
            project = render(answers, tmp_path / distributed)
            source = (project / "src" / package_of(project) / "processes.py").read_text()
            interfaces[distributed] = public_interface(source)
    assert interfaces["single"] == interfaces["multi"] == interfaces["sharded"], interfaces
    assert {"process_seed", "close_processes", "preemption"} <= interfaces["single"].keys()
