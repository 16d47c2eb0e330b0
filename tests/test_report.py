"""`python -m generator report merge`: the shards of a check (the nightly matrix's jobs)
become one report, and shards that do not belong together are refused in one line."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from generator.check import Result, Stage
from generator.cli import main
from generator.provenance import committed_trees, template_commit, template_trees
from generator.report import write_report

STAGES = ("render", "lint", "train", "resume")


def result(slug: str, failing: str | None = None) -> Result:
    stages = [Stage(name, "fail" if name == failing else "pass", 1.5) for name in STAGES]
    answers = {"task_type": slug.split("-")[0], "distributed": "single"}
    return Result(slug, answers, stages, log_tail="the log" if failing else "")


def shard(root: Path, index: int, results: list[Result], **meta) -> Path:
    meta = {
        "command": f"python -m generator check --all --shard {index}/2",
        "device": "cpu",
        "jobs": 2,
        "server": True,
        "steps": 2,
        "wall_s": 100.0 * index,
        "cpu_s": 150.0,
        "commit": "0" * 40,
    } | meta
    write_report(root / f"shard-{index}", results, meta)
    return root / f"shard-{index}"


def test_shards_merge_into_one_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = shard(tmp_path, 1, [result("a-1"), result("b-1")])
    second = shard(tmp_path, 2, [result("c-1")])
    out = tmp_path / "merged"
    shards = [str(first), str(second / "report.json")]  # a folder or its report.json
    assert main(["report", "merge", *shards, "--report", str(out)]) == 0
    merged = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert [row["slug"] for row in merged["results"]] == ["a-1", "b-1", "c-1"]
    assert (merged["passed"], merged["failed"]) == (3, 0)
    assert merged["wall_s"] == 200.0 and merged["cpu_s"] == 300.0  # at once; CPU adds up
    assert merged["commit"] == "0" * 40 and len(merged["shards"]) == 2
    assert merged["command"].startswith("python -m generator report merge")
    original = json.loads((first / "report.json").read_text(encoding="utf-8"))["results"][0]
    assert merged["results"][0] == original  # stages, notes, log tail and reproduce kept
    assert "3 combinations on cpu, 3 passed, 0 failed" in (out / "report.md").read_text("utf-8")
    assert "3 passed, 0 failed in 2 shard(s)" in capsys.readouterr().out


def test_a_failure_in_any_shard_fails_the_merge(tmp_path: Path) -> None:
    first = shard(tmp_path, 1, [result("a-1")])
    second = shard(tmp_path, 2, [result("b-1", failing="train")])
    assert main(["report", "merge", str(first), str(second), "--report", str(tmp_path / "m")]) == 1
    markdown = (tmp_path / "m" / "report.md").read_text(encoding="utf-8")
    assert "## `b-1`: train failed" in markdown and "the log" in markdown


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"commit": "1" * 40}, "different commits"),
        ({"device": "cuda"}, "different devices"),
        ({}, "a-1 is in both"),
    ],
    ids=["commit", "device", "overlap"],
)
def test_shards_that_do_not_belong_together_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict, expected: str
) -> None:
    first = shard(tmp_path, 1, [result("a-1")])
    second = shard(tmp_path, 2, [result("a-1" if not change else "b-1")], **change)
    out = tmp_path / "merged"
    assert main(["report", "merge", str(first), str(second), "--report", str(out)]) == 2
    error = capsys.readouterr().err
    assert expected in error and error.count("\n") == 1
    assert not out.exists(), "a refused merge writes nothing"


def test_shards_of_one_template_merge_across_commits_and_of_two_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trees = {"copier.yml": "a" * 40, "template": "b" * 40, "includes": "c" * 40}
    first = shard(tmp_path, 1, [result("a-1")], trees=trees)
    second = shard(tmp_path, 2, [result("b-1")], trees=trees, commit="1" * 40)
    out = tmp_path / "merged"
    assert main(["report", "merge", str(first), str(second), "--report", str(out)]) == 0
    merged = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert merged["trees"] == trees and merged["commits"] == ["0" * 40, "1" * 40]
    third = shard(tmp_path, 3, [result("c-1")], trees=trees | {"template": "d" * 40})
    assert main(["report", "merge", str(first), str(third), "--report", str(out)]) == 2
    assert "of different templates (tree hashes)" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["not json", "[]", '{"results": []}'])
def test_a_file_that_is_not_a_report_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    (tmp_path / "report.json").write_text(text, encoding="utf-8")
    assert main(["report", "merge", str(tmp_path), "--report", str(tmp_path / "m")]) == 2
    error = capsys.readouterr().err
    assert "not a" in error and "report" in error and error.count("\n") == 1


def test_reports_name_the_commit_they_checked() -> None:
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", template_commit())


def git(root: Path, *args: str) -> str:
    command = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def test_the_template_trees_are_the_working_trees_content_whatever_is_committed(
    tmp_path: Path,
) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "template").mkdir()
    (tmp_path / "includes").mkdir()
    (tmp_path / "copier.yml").write_text("a: 1\n")
    (tmp_path / "template" / "train.py").write_text("print(1)\n")
    (tmp_path / "includes" / "part.jinja").write_text("x\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "first")
    assert template_trees(tmp_path) == committed_trees("HEAD", tmp_path)
    (tmp_path / "template" / "train.py").write_text("print(2)\n")  # uncommitted
    (tmp_path / "template" / "new.py").write_text("")  # untracked
    changed = template_trees(tmp_path)
    assert changed["template"] != committed_trees("HEAD", tmp_path)["template"]
    assert {k: v for k, v in changed.items() if k != "template"} == {
        k: v for k, v in committed_trees("HEAD", tmp_path).items() if k != "template"
    }
    status = git(tmp_path, "status", "--porcelain")
    assert status == " M template/train.py\n?? template/new.py\n"  # its own index untouched
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "second")
    assert committed_trees("HEAD", tmp_path) == changed  # the same content, the same hashes


def test_a_commit_is_dirty_for_the_templates_changes_only(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    for path in ("copier.yml", "template/train.py", "includes/part.jinja", "README.md"):
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text("x\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "first")
    head = git(tmp_path, "rev-parse", "HEAD").strip()
    assert template_commit(tmp_path) == head
    # A matrix run writes its shards' reports into its checkout: not a change of template.
    (tmp_path / "docs" / "matrix").mkdir(parents=True)
    (tmp_path / "docs" / "matrix" / "report.json").write_text("{}")
    (tmp_path / "README.md").write_text("changed\n")
    assert template_commit(tmp_path) == head
    for path in ("copier.yml", "template/new.py", "includes/part.jinja"):
        (tmp_path / path).write_text("changed\n")
        assert template_commit(tmp_path) == f"{head}+dirty", path
        git(tmp_path, "checkout", "-q", "--", ".")
        git(tmp_path, "clean", "-qfd", "template")
