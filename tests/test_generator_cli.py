"""`python -m generator`: listing and selecting combinations, rendering, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from generator import REPO_ROOT, commands
from generator.answers import load_space
from generator.cli import main
from generator.selection import select

SPACE = load_space()


def test_matrix_lists_one_slug_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [SPACE.slug(c) for c in SPACE.combinations()]


def test_matrix_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["answers"] for row in rows] == SPACE.combinations()
    assert [row["slug"] for row in rows] == [SPACE.slug(c) for c in SPACE.combinations()]


def test_module_entry_point() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "generator", "matrix"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert SPACE.slug(SPACE.defaults()) in result.stdout.splitlines()


def test_render_with_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    axis = next(axis for axis in SPACE.axes if axis.choices[-1] != axis.default)
    dest = tmp_path / "project"
    sets = ["--set", f"{axis.name}={axis.choices[-1]}", "--set", "project_name=Digit Lab"]
    assert main(["render", str(dest), *sets]) == 0
    assert capsys.readouterr().out.strip() == str(dest)
    answers = yaml.safe_load((dest / ".copier-answers.yml").read_text(encoding="utf-8"))
    assert answers[axis.name] == axis.choices[-1]
    assert answers["project_name"] == "Digit Lab"
    assert answers["package_name"] == "digit_lab"
    others = {a.name: a.default for a in SPACE.axes if a.name != axis.name}
    assert {name: answers[name] for name in others} == others


@pytest.mark.parametrize(
    ("item", "words"),
    [
        ("mixed_precision=fp8", ["mixed_precision", "'fp8'", "allowed:"]),
        ("compile=maybe", ["compile", "allowed: true, false"]),
        ("no_such_question=1", ["unknown question 'no_such_question'", "project_name"]),
        ("package_name=class", ["package_name", "keyword"]),
    ],
)
def test_bad_set_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], item: str, words: list[str]
) -> None:
    dest = tmp_path / "project"
    assert main(["render", str(dest), "--set", item]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    for word in words:
        assert word in captured.err
    assert not dest.exists()


@pytest.mark.parametrize(
    ("dest", "words"),
    [
        ("", "is a folder that holds files"),
        ("keep.txt", "is a file"),
        ("keep.txt/project", "is under"),
    ],
)
def test_render_refuses_a_destination_that_is_not_a_new_or_empty_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dest: str, words: str
) -> None:
    (tmp_path / "keep.txt").write_text("mine\n", encoding="utf-8")
    assert main(["render", str(tmp_path / dest)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    assert captured.err.startswith(f"python -m generator render: error: destination {tmp_path}")
    assert words in captured.err and "render writes into a new or empty folder" in captured.err
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]
    assert (tmp_path / "keep.txt").read_text(encoding="utf-8") == "mine\n"


def test_matrix_pairwise_lists_the_covering_set(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "--pairwise"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        SPACE.slug(c) for c in select(SPACE, pairwise_only=True)[1]
    ]


def test_matrix_set_and_shard_narrow_the_listing(capsys: pytest.CaptureFixture[str]) -> None:
    listed = []
    for index in (1, 2, 3):
        assert main(["matrix", "--set", "compile=true", "--shard", f"{index}/3"]) == 0
        listed += capsys.readouterr().out.splitlines()
    expected = [SPACE.slug(c) for c in SPACE.combinations() if c["compile"] is True]
    assert sorted(listed) == sorted(expected)


@pytest.mark.parametrize("selection", ["--all", "--gpu-matrix"])
@pytest.mark.parametrize("command", ["matrix", "check"])
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--shard", "5/4"], ["--shard '5/4'", "1 <= I <= N", "1/4"]),
        (["--shard", "two"], ["--shard 'two'", "expected I/N"]),
        (["--shard", "0/4"], ["--shard '0/4'", "1 <= I <= N"]),
        (["--shard", "1/0"], ["--shard '1/0'", "1 <= I <= N"]),
        (["--shard", "x"], ["--shard 'x'", "expected I/N"]),
        (["--set", "tracker=neptune"], ["'neptune'", "allowed: none, tensorboard"]),
        (["--set", "nope=1"], ["unknown question 'nope'", "task_type"]),
    ],
)
def test_bad_selection_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
    selection: str,
    command: str,
    args: list[str],
    words: list[str],
) -> None:
    assert main([command, selection, *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith(
        f"python -m generator {command}"
    )
    for word in words:
        assert word in captured.err


def test_check_needs_a_selection(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check"]) == 2
    assert "--all, --pairwise, --gpu-matrix or --set" in capsys.readouterr().err


def test_check_refuses_an_empty_shard(capsys: pytest.CaptureFixture[str]) -> None:
    fixed = [arg for axis in SPACE.axes for arg in ("--set", f"{axis.name}={axis.default}")]
    assert main(["check", *fixed, "--shard", "2/2"]) == 2
    assert "shard 2/2 of 1 combinations is empty" in capsys.readouterr().err


def test_check_on_cuda_without_a_gpu_stops_before_rendering(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commands, "visible_gpus", lambda: 0)
    assert main(["check", "--pairwise", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "torch sees 0" in err


@pytest.mark.parametrize("args", [["--jobs", "0"], ["--steps", "-1"], ["--device", "tpu"]])
def test_check_options_are_validated_by_argparse(args: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["check", "--pairwise", *args])
    assert exit_.value.code == 2
