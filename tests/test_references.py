"""reference_projects/: what the template renders today, with results, and the check for drift.

The tests render the reference projects (a fraction of a second each) and run each one's own
suite where it lies; they never train them for their results: `python -m generator references
sync` does that, and its results are exempt from the check.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from generator import REPO_ROOT, reference_runs
from generator import references as references_module
from generator.answers import load_space
from generator.cli import main
from generator.cover import covering, features
from generator.launch import Options, processes
from generator.references import (
    COMMIT,
    INDEX,
    LOADED_TASK,
    REFERENCES_DIR,
    SRC_PATH,
    reference_combinations,
    references,
    sources_digest,
)
from generator.render import ANSWERS_FILE
from generator.results import (
    CURVES_PNG,
    FINE_TUNED_JSON,
    FINE_TUNED_PNG,
    RESULTS_JSON,
    RESULTS_MD,
    SOURCES,
)
from generator.selection import PAIR_SUITES, rest_sample, select, whole_suites
from generator.small_data import SMALL_DATA, SMALL_DATA_JSON

SPACE = load_space()
REFS = references(SPACE)
JUNK = shutil.ignore_patterns("__pycache__", "*.py[co]", ".pytest_cache", "outputs")


def copy_references(tmp_path: Path) -> Path:
    """A copy of reference_projects/ whose results record the digest of the copy's sources,
    as `sync` writes them (the tests of other problems then see no stale results)."""
    root = tmp_path / "reference_projects"
    shutil.copytree(REFERENCES_DIR, root, ignore=JUNK)
    for ref in REFS:
        for path in references_module.recorded_runs(ref):
            record_sources(root / ref.name / path, sources_digest(root / ref.name))
    return root


def record_sources(results: Path, sources: str | None) -> None:
    """Make the results JSON `results` record `sources` (none at all, if None)."""
    record = json.loads(results.read_text(encoding="utf-8"))
    record.pop(SOURCES, None)
    results.write_text(json.dumps(record | ({SOURCES: sources} if sources else {})), "utf-8")


def test_one_per_task_and_a_loaded_one() -> None:
    tasks = next(axis for axis in SPACE.axes if axis.name == "task_type").choices
    assert [ref.answers["task_type"] for ref in REFS[:-1]] == list(tasks)
    for ref in REFS[:-1]:  # the task's defaults, named after the task
        assert set(ref.answers) == {"project_name", "task_type"}
        assert ref.name == ref.answers["task_type"]
    loaded = REFS[-1]
    assert loaded.answers["task_type"] == LOADED_TASK
    # Every option on: each question apart from the task is answered with a non-default.
    for axis in SPACE.axes:
        if axis.name != "task_type":
            assert loaded.answers[axis.name] != axis.default, axis.name


def test_check_passes_on_the_committed_folder(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["references", "check"]) == 0, capsys.readouterr().out
    assert "in sync" in capsys.readouterr().out


def test_check_lists_modified_missing_and_extra_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_references(tmp_path)
    project = root / REFS[0].name
    package = yaml.safe_load((project / ANSWERS_FILE).read_text(encoding="utf-8"))["package_name"]
    with (project / "src" / package / "model.py").open("a", encoding="utf-8") as file:
        file.write("# edited by hand\n")
    (project / "Makefile").unlink()
    (project / "src" / package / "extra.py").write_text("", encoding="utf-8")
    # Ignored by the project's .gitignore: not compared.
    (project / "outputs").mkdir()
    (project / "outputs" / "summary.json").write_text("{}", encoding="utf-8")
    (project / "src" / package / "__pycache__").mkdir()
    # The results are exempt from the comparison.
    (project / RESULTS_MD).write_text("# other results\n", encoding="utf-8")

    assert main(["references", "check", "--root", str(root), "--only", REFS[0].name]) == 1
    lines = capsys.readouterr().out.splitlines()
    name = REFS[0].name
    assert lines[:3] == [
        f"{name}/Makefile: missing",
        f"{name}/src/{package}/extra.py: extra",
        f"{name}/src/{package}/model.py: differs",
    ]
    assert len(lines) == 4 and "3 file(s)" in lines[3] and "references sync" in lines[3]


def test_check_covers_the_answers_file_results_and_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_references(tmp_path)
    first, last = REFS[0].name, REFS[-1].name
    answers = root / first / ANSWERS_FILE
    answers.write_text(answers.read_text(encoding="utf-8").replace(SRC_PATH, "/elsewhere"))
    (root / last / CURVES_PNG).unlink()
    (root / "text_classification" / FINE_TUNED_PNG).unlink()  # the fine-tuning run's curves
    (root / "stray").mkdir()
    index = root / INDEX
    index.write_text(index.read_text(encoding="utf-8") + "edited\n", encoding="utf-8")

    assert main(["references", "check", "--root", str(root)]) == 1
    problems = capsys.readouterr().out.splitlines()[:-1]
    sync = "missing (run `python -m generator references sync`)"
    assert problems == [
        f"{first}/{ANSWERS_FILE}: differs",
        f"text_classification/{FINE_TUNED_PNG}: {sync}",
        f"{last}/{CURVES_PNG}: {sync}",
        "stray: extra (not a reference project)",
        f"{INDEX}: differs from the index of the results",
    ]


def test_check_refuses_results_trained_from_other_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Results are exempt from the comparison, but not from being of the template now."""
    root = copy_references(tmp_path)
    name = "text_classification"  # with fine-tuning and small-data runs: each file is checked
    record_sources(root / name / RESULTS_JSON, "0" * 64)
    record_sources(root / name / FINE_TUNED_JSON, None)  # results made before the digest
    record_sources(root / name / SMALL_DATA_JSON, "1" * 64)
    assert main(["references", "check", "--root", str(root), "--only", name]) == 1
    stale = [line for line in capsys.readouterr().out.splitlines() if "stale" in line]
    sync = f"(stale results); run `python -m generator references sync --only {name}`"
    other = "was trained from other src/ and configs/ than the template renders now"
    assert stale == [
        f"{name}/{FINE_TUNED_JSON}: records no digest of the src/ and configs/ it was "
        f"trained from {sync}",
        f"{name}/{RESULTS_JSON}: {other} {sync}",
        f"{name}/{SMALL_DATA_JSON}: {other} {sync}",
    ]


def test_the_sources_digest_covers_what_training_reads_and_nothing_else(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(REFERENCES_DIR / "text_classification", project, ignore=JUNK)
    digest = sources_digest(project)
    package = project / "src" / "text_classification"
    # Not read by training: the tests, the README, caches (.gitignore), the results.
    (project / "tests" / "test_data.py").write_text("changed", encoding="utf-8")
    (project / "README.md").write_text("changed", encoding="utf-8")
    (package / "__pycache__").mkdir(exist_ok=True)
    (package / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"cache")
    (project / RESULTS_JSON).write_text("{}", encoding="utf-8")
    assert sources_digest(project) == digest
    # Read by training: the package's code, a config file, a file's name.
    for change in (
        lambda: (package / "model.py").write_text(
            (package / "model.py").read_text(encoding="utf-8") + "\n", encoding="utf-8"
        ),
        lambda: (project / "configs" / "pretrained.yaml").write_text("lr: 1.0\n", "utf-8"),
        lambda: (package / "task.py").rename(package / "task2.py"),
    ):
        change()
        assert sources_digest(project) != digest
        digest = sources_digest(project)


def test_sync_records_the_digest_of_the_sources_it_trained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train_reference (what `sync` runs for each project) with the training stood in for:
    its results JSONs record the rendered project's digest, which `check` then accepts, and
    each run on a small dataset trains on data built for it, as the default run trains."""
    ref = next(ref for ref in REFS if ref.fine_tuning)
    project = tmp_path / "project"
    shutil.copytree(REFERENCES_DIR / ref.name, project, ignore=JUNK)
    shutil.rmtree(project / "results")
    (project / RESULTS_MD).unlink()
    summary = json.loads((REFERENCES_DIR / ref.name / RESULTS_JSON).read_text("utf-8"))["summary"]

    commands = []

    def train(command, cwd, env, *args, **kwargs):
        commands.append(command)
        if "--output_dir" not in command:  # the project's bag-of-words reference
            printed = "          bag_of_words  validation accuracy 0.9000\n"
            return subprocess.CompletedProcess(command, 0, printed, "")
        out = Path(command[command.index("--output_dir") + 1])
        out.mkdir(parents=True)
        (out / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
        (out / "run.json").write_text(json.dumps({"device": "cpu", "seed": 0}), "utf-8")
        (out / "curves.png").write_bytes(b"\x89PNG")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(reference_runs, "run", train)
    outcome = reference_runs.train_reference(ref, tmp_path, Options(tmp_path, "cpu"))
    assert outcome.ok, outcome.message
    for path in (RESULTS_JSON, FINE_TUNED_JSON, SMALL_DATA_JSON):
        record = json.loads((project / path).read_text(encoding="utf-8"))
        assert record[SOURCES] == sources_digest(project), path
    assert references_module.stale_results(project, ref, sources_digest(project)) == []
    runs = json.loads((project / SMALL_DATA_JSON).read_text(encoding="utf-8"))["runs"]
    assert [run["name"] for run in runs] == [run.name for run in SMALL_DATA[ref.name]]
    assert all(run["bag_of_words"] == 0.9 and run["summary"] == summary for run in runs)
    default, tuned, *small = commands[:2] + [c for c in commands[2:] if "--output_dir" in c]
    for run, command in zip(runs, small, strict=True):
        at = command.index("--data_dir")
        data = Path(command[at + 1])
        assert data.parent == tmp_path / "small-data" and (data / "train.csv").is_file()
        like = tuned if run["name"].endswith("fine-tuned") else default
        # As that run, but for the data and where it writes.
        assert command[:at] + command[at + 2 : -1] == like[:-1]
        assert f"--data_dir data/{run['name']}" in run["command"]
    assert "## On small real datasets" in (project / RESULTS_MD).read_text(encoding="utf-8")


def test_answers_file_is_normalised() -> None:
    for ref in REFS:
        project = REFERENCES_DIR / ref.name
        answers = yaml.safe_load((project / ANSWERS_FILE).read_text(encoding="utf-8"))
        assert answers["_commit"] == COMMIT
        assert answers["_src_path"] == SRC_PATH
        # `copier update` inside the project resolves _src_path from there: this repository.
        assert (project / SRC_PATH).resolve() == REPO_ROOT
        assert {k: answers[k] for k in ref.answers} == ref.answers


def test_results_and_index_name_every_project() -> None:
    index = (REFERENCES_DIR / INDEX).read_text(encoding="utf-8")
    assert "python -m generator references sync" in index
    assert "python -m generator references check" in index
    for ref in REFS:
        project = REFERENCES_DIR / ref.name
        results = (project / RESULTS_MD).read_text(encoding="utf-8")
        assert results.startswith(f"# Results: {ref.project_name}\n")
        assert CURVES_PNG in results and "samples/s" in results
        assert (project / CURVES_PNG).read_bytes().startswith(b"\x89PNG")
        assert (project / RESULTS_JSON).is_file()
        assert f"[{ref.name}]({ref.name}/)" in index
        assert f"({ref.name}/{RESULTS_MD})" in index
        # A fine-tuning run's section, curves and row in the index, where it has one.
        tuned = ref.fine_tuning is not None
        assert ("## Fine-tuning a pretrained model" in results) == tuned
        assert (project / FINE_TUNED_PNG).is_file() == tuned
        assert (f"({ref.name}/{RESULTS_MD}#fine-tuning-a-pretrained-model)" in index) == tuned
    assert [ref.name for ref in REFS if ref.fine_tuning] == ["text_classification"]


@pytest.mark.parametrize("action", ["sync", "check", "test"])
def test_unknown_name_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str
) -> None:
    root = tmp_path / "root"
    assert main(["references", action, "--root", str(root), "--only", "nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert f"references {action}: error:" in captured.err and "'nope'" in captured.err
    assert all(ref.name in captured.err for ref in REFS)
    assert not root.exists()


# --- the projects' own tests: each committed project's suite, run where it lies


@pytest.mark.slow
@pytest.mark.parametrize("name", [ref.name for ref in REFS])
def test_project_passes_its_own_tests(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["references", "test", "--only", name]) == 0, capsys.readouterr().out
    assert capsys.readouterr().out.startswith(f"pass  {name}: ")


def test_a_failing_project_test_fails_the_command_and_shows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = REFS[0].name
    tests = tmp_path / name / "tests"
    tests.mkdir(parents=True)
    (tests / "test_broken.py").write_text("def test_broken():\n    assert 1 == 2\n")
    assert main(["references", "test", "--root", str(tmp_path), "--only", name]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"FAIL  {name}: ") and "assert 1 == 2" in out
    assert sorted(path.name for path in tests.iterdir()) == ["test_broken.py"]  # nothing written


def test_rest_of_the_sample_covers_what_the_references_leave() -> None:
    """`check --project-tests rest` (make test) tests only what no reference project tests:
    the choices, and for each task its sharding at full precision and fp16 (PAIR_SUITES)."""
    tested = reference_combinations(SPACE)
    assert tested == [
        {a.name: (SPACE.defaults() | r.answers)[a.name] for a in SPACE.axes} for r in REFS
    ]
    _, pairwise_set = select(SPACE, pairwise_only=True)
    rest = rest_sample(SPACE, SPACE.combinations())
    whole = whole_suites(SPACE, rest)
    assert rest[: len(whole)] == whole == covering(SPACE, None, tested)
    assert all(combo in pairwise_set for combo in rest)  # the pairwise check runs them
    # The cheapest suites that do it: none compiles (a reference project does).
    assert not any(combo["compile"] for combo in rest)
    # Whole suites use every choice; each pair's suite, which runs only the tests its
    # answers add (tests/test_check.py), gives one task one of PAIR_SUITES.
    singles = {f for combo in SPACE.combinations() for f in features(combo)}
    assert {f for combo in [*tested, *whole] for f in features(combo)} == singles
    tasks = next(axis.choices for axis in SPACE.axes if axis.name == "task_type")
    pairs = rest[len(whole) :]
    for task, answers in itertools.product(tasks, PAIR_SUITES):
        wanted = {"task_type": task, **answers}
        having = [c for c in [*tested, *rest] if c.items() >= wanted.items()]
        assert len(having) == 1, (wanted, having)
    assert all(any(c.items() >= a.items() for a in PAIR_SUITES) for c in pairs)
    # Each pair as cheap as any with its answers: no tracker, no export, one process for fp16.
    assert all(c["tracker"] == "none" and c["export_target"] == "none" for c in pairs)
    assert all(processes(c) == 1 for c in pairs if c["mixed_precision"] == "fp16")


@pytest.mark.parametrize("jobs", [1, 2])
def test_reference_runs_use_one_thread_whatever_the_jobs(
    jobs: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """So that `sync --only NAME` records the low digits a full sync records."""
    seen = []

    def failing_run(command, cwd, env, *args, **kwargs):
        seen.append(env["OMP_NUM_THREADS"])
        raise OSError("not launched")

    monkeypatch.setattr(reference_runs, "run", failing_run)
    (tmp_path / "project").mkdir()
    shutil.copy(REFERENCES_DIR / REFS[0].name / ANSWERS_FILE, tmp_path / "project")
    outcome = reference_runs.train_reference(REFS[0], tmp_path, Options(tmp_path, "cpu", jobs=jobs))
    assert not outcome.ok and "not launched" in outcome.message
    assert seen == ["1"]
