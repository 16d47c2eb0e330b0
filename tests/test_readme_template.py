"""The rendered README's template: a short skeleton, and what one answer owns in files named
by the answer (STYLE.md, points 11 and 12b), which copier never renders into a project."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import yaml
from helpers import decision_tags

from generator import REPO_ROOT
from generator.answers import load_space
from generator.render import many_renders, render

README_TEMPLATE = REPO_ROOT / "template" / "README.md.jinja"
INCLUDES = REPO_ROOT / "includes"
SPACE = load_space()

# The counts today, which may only go down; the goal was at most 500 lines and 30 `{% if %}`
# or `{% elif %}` tags. A task's sections, a tracker's paragraphs and the sections of one
# choice (several GPUs, export) are included from includes/ instead of branched on here.
MAX_README_LINES = 464
MAX_README_TAGS = 24


def included_parts(folder: str, answer: str) -> set[str]:
    """The parts that the README's template and its partials include by the answer's name,
    as `{% include "includes/FOLDER/" ~ answer ~ "/PART.md.jinja" %}`."""
    sources = [README_TEMPLATE, *INCLUDES.rglob("*.md.jinja")]
    pattern = re.escape(f'"includes/{folder}/" ~ {answer} ~ "/') + r'([\w/]+)\.md\.jinja"'
    found = {
        part for path in sources for part in re.findall(pattern, path.read_text(encoding="utf-8"))
    }
    assert found, f"README.md.jinja includes nothing from includes/{folder}/"
    return found


def choices(name: str) -> tuple:
    return next(axis.choices for axis in SPACE.axes if axis.name == name)


def test_readme_template_is_a_short_skeleton() -> None:
    text = README_TEMPLATE.read_text(encoding="utf-8")
    lines, tags = len(text.splitlines()), decision_tags(text)
    assert lines <= MAX_README_LINES, f"README.md.jinja has {lines} lines"
    assert tags <= MAX_README_TAGS, f"README.md.jinja has {tags} if/elif tags"


def test_every_task_and_tracker_has_the_readme_parts_the_skeleton_includes() -> None:
    """A new task or tracker fails here, naming the files it lacks, not in some render."""
    pretrained = yaml.safe_load((REPO_ROOT / "copier.yml").read_text(encoding="utf-8"))[
        "pretrained_backbone"
    ]["default"]
    task_parts = included_parts("tasks", "task_type") - {"readme/fine_tuning"}
    missing = []
    for task in choices("task_type"):
        folder = INCLUDES / "tasks" / task
        has_backbone = jinja2.Environment().from_string(pretrained).render(task_type=task)
        wanted = task_parts | ({"readme/fine_tuning"} if has_backbone == "True" else set())
        present = {
            path.relative_to(folder).as_posix().removesuffix(".md.jinja")
            for path in folder.glob("readme/*.md.jinja")
        }
        missing += [f"includes/tasks/{task}/{part}.md.jinja" for part in wanted - present]
        missing += [f"includes/tasks/{task}/{part}.md.jinja: unused" for part in present - wanted]
    for tracker in set(choices("tracker")) - {"none"}:
        folder = INCLUDES / "readme" / "trackers" / tracker
        for part in included_parts("readme/trackers", "tracker"):
            if not (folder / f"{part}.md.jinja").is_file():
                missing.append(f"includes/readme/trackers/{tracker}/{part}.md.jinja")
    assert not missing, missing


def test_a_render_holds_the_included_text_and_no_include_file(tmp_path: Path) -> None:
    """The answers that include the most (a pretrained backbone, a tracker, several GPUs,
    an export), rendered by copier: the README holds each part, and no partial is a file."""
    answers = SPACE.defaults() | {"task_type": "text_classification", "distributed": "multi"}
    answers |= {"export_target": "onnx", "tracker": "wandb"}
    with many_renders():
        project = render(answers, tmp_path / "project")
    readme = (project / "README.md").read_text(encoding="utf-8")
    for heading in ("Your own data", "Fine-tuning a pretrained model", "Inference", "Export"):
        assert f"\n## {heading}\n" in readme, heading
    assert "\n## Several GPUs and machines\n" in readme
    assert "wandb sync outputs/run/wandb/offline-run-*" in readme
    assert "{%" not in readme and ".md.jinja" not in readme
    leaked = [
        path.relative_to(project).as_posix()
        for path in project.rglob("*")
        if path.name.endswith(".jinja") or "includes" in path.relative_to(project).parts
    ]
    assert not leaked, f"template partials rendered into the project: {leaked}"
