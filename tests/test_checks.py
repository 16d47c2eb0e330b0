"""The static checks find what they claim to find (a check that never fails proves nothing)."""

from __future__ import annotations

from pathlib import Path

from generator.checks import (
    answers_file_problems,
    choice_problems,
    compile_problems,
    jinja_problems,
    many_ruff_problems,
    read_text_files,
    ruff_problems,
    whitespace_problems,
)

PYPROJECT = '[project]\nname = "p"\n\n[tool.ruff]\nline-length = 100\n'


def write(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def test_clean_files_pass(tmp_path: Path) -> None:
    project = write(
        tmp_path,
        {
            "pyproject.toml": PYPROJECT,
            "src/p/a.py": '"""A."""\n\nimport os\n\n\ndef f() -> str:\n    return os.sep\n',
            "ci.yml": "run: echo ${{ matrix.python }}\n",
            "data.bin": b"\x00\x01{{",
        },
    )
    texts = read_text_files(project)
    assert Path("data.bin") not in texts
    assert ruff_problems(project) == []
    assert compile_problems(texts) == []
    assert whitespace_problems(texts) == []
    assert jinja_problems(project, texts) == []


def test_whitespace_problems(tmp_path: Path) -> None:
    texts = {
        Path("a.md"): "# A\n\n\n\ntext \n",
        Path("b.toml"): "\nx = 1",
        Path("c.yml"): "x: 1\n\n",
        Path("d.py"): "x = 1\n\n\ny = 2\t\n",
    }
    problems = whitespace_problems(texts)
    assert problems == [
        "a.md:5: trailing whitespace",
        "a.md:2: two or more blank lines",
        "b.toml:1: starts with a blank line",
        "b.toml: does not end with a newline",
        "c.yml: ends with a blank line",
        "d.py:4: trailing whitespace",
    ]


def test_jinja_and_compile_problems(tmp_path: Path) -> None:
    project = write(
        tmp_path,
        {
            "README.md": "# {{ project_name }}\n",
            "x.py.jinja": "x = 1\n",
            "y.py": "{% if compile %}\n",
        },
    )
    texts = read_text_files(project)
    assert len(jinja_problems(project, texts)) == 3
    assert [p.split(":")[0] for p in compile_problems(texts)] == ["y.py"]


def test_ruff_problems(tmp_path: Path) -> None:
    write(tmp_path / "bare", {"a.py": "x = 1\n"})
    assert "no [tool.ruff]" in ruff_problems(tmp_path / "bare")[0]
    write(tmp_path / "dirty", {"pyproject.toml": PYPROJECT, "a.py": "import os\nx=1\n"})
    problems = ruff_problems(tmp_path / "dirty")
    assert [p.split(" failed")[0] for p in problems] == ["ruff format", "ruff check"]


def test_ruff_checks_projects_together_each_with_what_it_alone_would_say(tmp_path: Path) -> None:
    write(tmp_path / "clean", {"pyproject.toml": PYPROJECT, "a.py": "x = 1\n"})
    write(tmp_path / "dirty", {"pyproject.toml": PYPROJECT, "a.py": "import os\nx=1\n"})
    # A stricter configuration of its own: what it allows, the others' does not, and back.
    strict = PYPROJECT + '\n[tool.ruff.lint.per-file-ignores]\n"b.py" = ["F401"]\n'
    write(tmp_path / "own", {"pyproject.toml": strict, "b.py": "import os\n"})
    write(tmp_path / "bare", {"a.py": "x = 1\n"})
    projects = [tmp_path / name for name in ("clean", "dirty", "own", "bare")]
    together = many_ruff_problems(projects)
    assert together == {project: ruff_problems(project) for project in projects}
    assert together[tmp_path / "clean"] == [] and together[tmp_path / "own"] == []
    assert "a.py:1:8: F401" in together[tmp_path / "dirty"][1]
    assert "no [tool.ruff]" in together[tmp_path / "bare"][0]


def test_choice_problems() -> None:
    texts = {
        Path("train.py"): "scaler = torch.amp.GradScaler()\nmodel = torch.compile(model)\n",
        Path("README.md"): "fp16 and bf16 are choices of the template\n",
    }
    answers = {
        "mixed_precision": "no",
        "compile": False,
        "export_target": "none",
        "tracker": "none",
    }
    problems = choice_problems(texts, answers)
    assert problems == [
        "train.py:1: 'GradScaler' belongs to mixed_precision=fp16, but mixed_precision=no",
        "train.py:2: 'torch.compile' belongs to compile=True, but compile=False",
    ]
    answers = {
        "mixed_precision": "fp16",
        "compile": True,
        "export_target": "none",
        "tracker": "none",
    }
    assert choice_problems(texts, answers) == []


def test_choice_problems_of_markers_shared_by_several_choices() -> None:
    texts = {Path("export.py"): "from .artifact import ExportError\nimport onnxruntime\n"}
    answers = {"mixed_precision": "no", "compile": False, "export_target": "torchscript"}
    answers["tracker"] = "none"
    assert choice_problems(texts, answers) == [
        "export.py:2: 'onnx' belongs to export_target=onnx, but export_target=torchscript",
    ]
    answers["export_target"] = "none"
    assert choice_problems(texts, answers) == [
        "export.py:1: 'ExportError' belongs to export_target=onnx/torchscript/torch_export, "
        "but export_target=none",
        "export.py:2: 'onnx' belongs to export_target=onnx, but export_target=none",
    ]


def test_choice_problems_of_trackers() -> None:
    texts = {Path("tracking.py"): "import wandb\naccelerator.init_trackers(PROJECT)\n"}
    answers = {"mixed_precision": "no", "compile": False, "export_target": "none"}
    assert choice_problems(texts, answers | {"tracker": "wandb"}) == []
    assert choice_problems(texts, answers | {"tracker": "mlflow"}) == [
        "tracking.py:1: 'wandb' belongs to tracker=wandb, but tracker=mlflow",
    ]
    assert choice_problems(texts, answers | {"tracker": "none"}) == [
        "tracking.py:2: 'init_trackers' belongs to tracker=tensorboard/wandb/mlflow, "
        "but tracker=none",
        "tracking.py:1: 'wandb' belongs to tracker=wandb, but tracker=none",
    ]


def test_answers_file_problems(tmp_path: Path) -> None:
    assert "missing" in answers_file_problems(tmp_path, {"compile": False})[0]
    (tmp_path / ".copier-answers.yml").write_text("_src_path: x\ncompile: true\n")
    assert answers_file_problems(tmp_path, {"compile": False}) == [
        ".copier-answers.yml: compile is True, expected False",
        ".copier-answers.yml: no _commit",
    ]
    # A render from a template folder outside git (render.template_copy) has no commit.
    assert answers_file_problems(tmp_path, {"compile": True}, committed=False) == []
