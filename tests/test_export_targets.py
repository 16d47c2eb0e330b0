"""Every export target for every task type (and, for the default task, with torch.compile on
and off): the fast dev run exports the artifact and verifies it against PyTorch, and
`python -m <package>.export` does it again from the best checkpoint. (Each rendered project's
tests/test_export.py shows that an artifact which disagrees fails the check; the pairwise
check in `make test` pairs every export target with compile for every task.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import reproduce, run_in

from generator.answers import Answers, load_space
from generator.render import package_of, render

SPACE = load_space()
AXES = {axis.name: axis for axis in SPACE.axes}
DEFAULT_TASK = SPACE.defaults()["task_type"]
CASES: list[Answers] = [
    SPACE.defaults() | {"task_type": task, "export_target": target, "compile": compiled}
    for task in AXES["task_type"].choices
    for target in AXES["export_target"].choices
    if target != "none"
    for compiled in AXES["compile"].choices
    if task == DEFAULT_TASK or not compiled
]

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("answers", CASES, ids=[SPACE.slug(c) for c in CASES])
def test_export_passes_parity(tmp_path: Path, answers: Answers) -> None:
    project = render(answers, tmp_path / "project")
    package, out, context = package_of(project), tmp_path / "out", reproduce(answers)

    train = ["-m", f"{package}.train", "--fast_dev_run", "true", "--output_dir", str(out)]
    run_in(project, train, context)
    meta = json.loads((out / "export" / "model.json").read_text(encoding="utf-8"))
    assert meta["format"] == answers["export_target"], context
    assert (out / "export" / meta["file"]).is_file(), context
    assert {"batch_sizes", "max_abs_error", "max_rel_error", "atol", "rtol"} <= set(
        meta["verified"]
    ), context
    assert meta["preprocess"] == json.loads(
        (out / "model" / "preprocess.json").read_text(encoding="utf-8")
    ), context

    export = ["-m", f"{package}.export", "--output_dir", str(out), "--checkpoint", "best"]
    result = run_in(project, export, context)
    assert "agrees with PyTorch" in result.stdout, f"{context}\n{result.stdout}"
    best = (out / "checkpoints" / "best").read_text(encoding="utf-8").strip()
    meta = json.loads((out / "export" / "model.json").read_text(encoding="utf-8"))
    assert Path(meta["checkpoint"]).name == best, context
