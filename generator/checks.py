"""Static checks of a rendered project; each returns a list of problems, never raises.

Problems are reported together so one run shows everything wrong with a combination
(DESIGN principle 1: every combination reads as if written by hand for its answers).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml
from ruff.__main__ import find_ruff_bin

from generator import cpu
from generator.answers import Answer
from generator.render import ANSWERS_FILE

# Shared by every exporting choice, so they are flagged only in export_target=none renders.
_EXPORTING = ("export_at_end", "ExportError", "export_run")
# Shared by every tracker, so they are flagged only in tracker=none renders.
_TRACKING = ("start_tracker", "init_trackers", "accelerator.log(", "end_training", "log_with")

# Text that only the named choice may put into a rendered .py file. Keys must be choices in
# copier.yml (a repository test checks this, so a renamed choice can't silently drop its check).
CHOICE_MARKERS: dict[str, dict[Answer, tuple[str, ...]]] = {
    "mixed_precision": {"fp16": ("GradScaler", "fp16"), "bf16": ("bf16",)},
    "compile": {True: ("torch.compile", "_orig_mod")},
    "export_target": {
        "onnx": (*_EXPORTING, "onnx", "opset"),
        "torchscript": (*_EXPORTING, "torch.jit", "TorchScript"),
        "torch_export": (*_EXPORTING, "torch.export.save", "torch.export.load", ".pt2"),
    },
    "tracker": {
        "tensorboard": (*_TRACKING, "tensorboard", "TensorBoard", "EventAccumulator"),
        "wandb": (*_TRACKING, "wandb", "WANDB", "Weights & Biases"),
        "mlflow": (*_TRACKING, "mlflow", "MLFLOW", "MLflow"),
    },
}

# The binary itself: `python -m ruff` would start an interpreter to find it, twice a render.
RUFF = find_ruff_bin()
RUFF_TIMEOUT_S = 300  # seconds: ruff takes well under one on a project
_RUFF_CHECKS = (["format", "--check"], ["check", "--output-format", "concise"])
_JINJA = re.compile(r"(?<!\$)\{\{|\{%")  # GitHub Actions' `${{ }}` is rendered output
_TYPED_MARKER = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{\{|\{%")


def static_problems(
    project: Path, answers: Mapping[str, Answer], *, committed: bool = True
) -> list[str]:
    """Every static check: ruff, byte-compilation, whitespace, Jinja residue, stray choices.

    `committed=False` for a render from a template outside git (render.template_copy): its
    answers file has no `_commit` to check.
    """
    return many_static_problems({project: answers}, committed=committed)[project]


def many_static_problems(
    renders: Mapping[Path, Mapping[str, Answer]], *, committed: bool = True
) -> dict[Path, list[str]]:
    """static_problems of each project (path -> its answers), with ruff run once over all of
    them in one folder: each project's own configuration still applies (ruff takes the
    closest pyproject.toml of each file), and ruff's start is most of a render's checks."""
    ruff = many_ruff_problems(list(renders))
    problems = {}
    for project, answers in renders.items():
        texts = read_text_files(project)
        problems[project] = [
            *ruff[project],
            *compile_problems(texts),
            *whitespace_problems(texts),
            *jinja_problems(project, texts, answers),
            *choice_problems(texts, answers),
            *answers_file_problems(project, answers, committed),
        ]
    return problems


def read_text_files(project: Path) -> dict[Path, str]:
    """Every file that decodes as UTF-8 without NUL bytes, keyed by path relative to project."""
    texts: dict[Path, str] = {}
    for path in sorted(project.rglob("*")):
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if "\0" not in text:
            texts[path.relative_to(project)] = text
    return texts


def ruff_problems(project: Path) -> list[str]:
    """`ruff format --check` and `ruff check` with the rendered project's own configuration."""
    return many_ruff_problems([project])[project]


def many_ruff_problems(projects: Sequence[Path]) -> dict[Path, list[str]]:
    """`ruff format --check` and `ruff check` of each project with its own configuration.

    Several projects, which must share a parent folder, are checked from there in one run of
    each (ruff takes the closest pyproject.toml of each file); the few that fail are checked
    again alone, so that each one's problems read as a check of it alone prints them.
    """
    problems: dict[Path, list[str]] = {project: [] for project in projects}
    for project in projects:
        pyproject = project / "pyproject.toml"
        if not pyproject.is_file() or "[tool.ruff" not in pyproject.read_text(encoding="utf-8"):
            problems[project].append(
                "pyproject.toml: no [tool.ruff] section, so ruff would only use its defaults"
            )
    checked = [project for project in projects if not problems[project]]
    if len(checked) == 1:
        (project,) = checked
        for args in _RUFF_CHECKS:
            result = cpu.run(
                [RUFF, *args, "--no-cache", "."], cwd=project, timeout_s=RUFF_TIMEOUT_S
            )
            if result.returncode != 0:
                problems[project].append(f"ruff {args[0]} failed:\n{result.stdout.strip()}")
    elif checked:
        for project in _failing_together(checked):
            problems[project] += many_ruff_problems([project])[project]
    return problems


def _failing_together(projects: Sequence[Path]) -> list[Path]:
    """The projects that ruff's checks of them all, run once from their parent, name; all of
    them when a check fails naming none (ruff itself failed)."""
    parent = projects[0].parent
    if any(project.parent != parent for project in projects):
        raise ValueError("projects that ruff checks together must share a parent folder")
    names = [project.name for project in projects]
    failing: set[Path] = set()
    for args in _RUFF_CHECKS:
        result = cpu.run([RUFF, *args, "--no-cache", *names], cwd=parent, timeout_s=RUFF_TIMEOUT_S)
        if result.returncode != 0:
            named = {
                p
                for p in projects
                if re.search(rf"(^|\s){re.escape(p.name)}/", result.stdout, re.M)
            }
            failing |= named or set(projects)
    return [project for project in projects if project in failing]


def compile_problems(texts: Mapping[Path, str]) -> list[str]:
    """Byte-compile every .py file in memory (what compileall does, minus the .pyc files)."""
    problems = (_compile_problem(str(path), text) for path, text in texts.items())
    return [problem for problem in problems if problem]


@functools.lru_cache(maxsize=4096)
def _compile_problem(path: str, text: str) -> str | None:
    """Most files of one combination's render are those of another's, byte for byte: each
    text is compiled once however many renders hold it."""
    if not path.endswith(".py"):
        return None
    try:
        compile(text, path, "exec", dont_inherit=True)
    except SyntaxError as error:
        return f"{path}:{error.lineno}: does not compile: {error.msg}"
    return None


def whitespace_problems(texts: Mapping[Path, str]) -> list[str]:
    """Trailing whitespace anywhere; blank-line runs and edges outside Python files.

    ruff format owns blank lines in .py files (two are right between top-level definitions);
    elsewhere a run of blank lines is what a template tag leaves behind.
    """
    problems = []
    for path, text in texts.items():
        for number, line in enumerate(text.split("\n"), start=1):
            if line != line.rstrip():
                problems.append(f"{path}:{number}: trailing whitespace")
        if path.suffix == ".py" or not text:
            continue
        run = text.find("\n\n\n")
        if run != -1:
            problems.append(f"{path}:{text.count(chr(10), 0, run) + 2}: two or more blank lines")
        if text.startswith("\n"):
            problems.append(f"{path}:1: starts with a blank line")
        if not text.endswith("\n"):
            problems.append(f"{path}: does not end with a newline")
        elif text.endswith("\n\n"):
            problems.append(f"{path}: ends with a blank line")
    return problems


def jinja_problems(
    project: Path, texts: Mapping[Path, str], answers: Mapping[str, Answer] = {}
) -> list[str]:
    """Template syntax that survived rendering, in file contents or file names; the markers
    a user typed into a free-text answer (a description with `{{ }}`) are theirs."""
    typed = {
        marker
        for value in answers.values()
        if isinstance(value, str)
        for marker in _TYPED_MARKER.findall(value)
    }
    problems = []
    for path in sorted(project.rglob("*")):
        relative = path.relative_to(project)
        if path.suffix == ".jinja" or _JINJA.search(str(relative)):
            problems.append(f"{relative}: file name left unrendered")
    for path, text in texts.items():
        for number, line in enumerate(text.split("\n"), start=1):
            for marker in typed:
                line = line.replace(marker, "")
            if _JINJA.search(line):
                problems.append(f"{path}:{number}: Jinja marker left in: {line.strip()}")
    return problems


def choice_problems(texts: Mapping[Path, str], answers: Mapping[str, Answer]) -> list[str]:
    """Text in .py files that belongs to a choice not taken (CHOICE_MARKERS)."""
    problems = []
    for question, markers_by_choice in CHOICE_MARKERS.items():
        chosen = answers[question]
        allowed = set(markers_by_choice.get(chosen, ()))
        owners: dict[str, list[str]] = {}  # a marker may belong to several choices
        for choice, markers in markers_by_choice.items():
            for marker in markers:
                if choice != chosen and marker not in allowed:
                    owners.setdefault(marker, []).append(str(choice))
        for marker, choices in owners.items():
            for path, text in texts.items():
                if path.suffix == ".py" and marker in text:
                    number = text.count("\n", 0, text.index(marker)) + 1
                    problems.append(
                        f"{path}:{number}: {marker!r} belongs to {question}={'/'.join(choices)}, "
                        f"but {question}={chosen}"
                    )
    return problems


def answers_file_problems(
    project: Path, answers: Mapping[str, Answer], committed: bool = True
) -> list[str]:
    """The answers file `copier update` needs, recording the answers given."""
    path = project / ANSWERS_FILE
    if not path.is_file():
        return [f"{ANSWERS_FILE}: missing, so `copier update` can't work"]
    recorded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    problems = [
        f"{ANSWERS_FILE}: {name} is {recorded.get(name)!r}, expected {value!r}"
        for name, value in answers.items()
        if recorded.get(name) != value
    ]
    keys = ("_src_path", "_commit") if committed else ("_src_path",)
    problems += [f"{ANSWERS_FILE}: no {key}" for key in keys if key not in recorded]
    return problems
