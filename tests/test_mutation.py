"""`python -m generator mutate`: refusals before anything runs, mutmut's settings, and the
report read back from mutmut's result files (the run itself takes hours: not here)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import tomllib

from generator import launched_mutants, mutation, mutation_text
from generator.cli import main
from generator.references import REFERENCES_DIR


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["nope"], "no reference project named 'nope'; choose from: image_classification"),
        (["tabular_regression", "--modules", "optim,nosuch"], "has no src/tabular_regression/"),
        (["tabular_regression", "--modules", ","], "choose from: optim, precision, loaders"),
        (
            ["tabular_regression", "--modules", "optim", "--launched", "tests/test_nosuch.py"],
            "--launched: tabular_regression has no test file tests/test_nosuch.py",
        ),
        (
            ["tabular_regression", "--modules", "optim", "--launched", "src/tabular_regression"],
            "its tests/test_*.py",
        ),
    ],
)
def test_bad_arguments_are_one_line_and_run_nothing(argv, said, tmp_path, capsys) -> None:
    assert main(["mutate", *argv, "--workdir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "w").exists()


def test_resume_without_a_workdir_is_refused(tmp_path, capsys) -> None:
    report = tmp_path / "report"
    assert main(["mutate", "tabular_regression", "--resume", "--report", str(report)]) == 2
    err = capsys.readouterr().err
    assert "--resume: give --workdir" in err and len(err.strip().splitlines()) == 1
    assert not report.exists()


def test_resume_keeps_the_copy_and_what_it_recorded_and_refuses_another(
    tmp_path, monkeypatch
) -> None:
    """A resumed run keeps the copy, where mutmut's records say which mutants are left; a
    run without --resume starts over; the copy of another version of the reference, or of
    other modules, is refused in one line."""
    references = tmp_path / "references"
    shutil.copytree(
        REFERENCES_DIR / "tabular_regression",
        references / "tabular_regression",
        ignore=shutil.ignore_patterns("outputs"),
    )
    monkeypatch.setattr(mutation, "REFERENCES_DIR", references)
    monkeypatch.setattr(mutation, "run_mutmut", lambda *args: None)
    monkeypatch.setattr(mutation, "_read", lambda *args: None)
    workdir = tmp_path / "work"

    def run(*modules: str, resume: bool = True) -> None:
        mutation.mutate("tabular_regression", list(modules), workdir, 1, [], resume=resume)

    run("average")  # nothing to resume yet: a new copy
    copy = workdir / "tabular_regression"
    recorded = copy / "mutants" / "src" / "tabular_regression" / "average.py.meta"
    recorded.parent.mkdir(parents=True)
    recorded.write_text("{}")
    configured = (copy / "pyproject.toml").read_text()
    run("average")
    assert recorded.is_file() and (copy / "pyproject.toml").read_text() == configured
    with pytest.raises(ValueError, match="--resume: .* of other --modules or of another version"):
        run("average", "optim")
    (references / "tabular_regression" / "src" / "tabular_regression" / "average.py").write_text(
        "# changed\n"
    )
    with pytest.raises(ValueError, match="run without --resume to start over"):
        run("average")
    run("average", resume=False)
    assert not recorded.exists()
    assert (copy / "src" / "tabular_regression" / "average.py").read_text() == "# changed\n"


def test_a_report_path_that_is_a_file_is_refused(tmp_path, capsys) -> None:
    (tmp_path / "file").write_text("")
    assert main(["mutate", "tabular_regression", "--report", str(tmp_path / "file")]) == 2
    assert "--report" in capsys.readouterr().err


def test_a_report_it_cannot_merge_into_is_refused_before_the_run(tmp_path, capsys) -> None:
    (tmp_path / "tabular_regression.json").write_text('{"state": {"statuses": {}}}')
    argv = ["mutate", "tabular_regression", "--report", str(tmp_path)]
    assert main([*argv, "--workdir", str(tmp_path / "w")]) == 2
    assert "not a report of this command" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()  # nothing copied, nothing run


def test_mutmut_reads_the_modules_and_leaves_out_the_sweeps(tmp_path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text((REFERENCES_DIR / "tabular_regression" / "pyproject.toml").read_text())
    for folder in ("src", "configs", "outputs"):  # what the tests read beside src/ is copied
        (tmp_path / folder).mkdir()
    (tmp_path / "README.md").write_text("")
    paths = mutation.module_paths("tabular_regression", ["optim", "average"])
    mutation._configure(pyproject, paths)
    settings = tomllib.loads(pyproject.read_text())["tool"]["mutmut"]
    assert settings["only_mutate"] == [
        "src/tabular_regression/optim.py",
        "src/tabular_regression/average.py",
    ]
    assert "not sweep" in settings["pytest_add_cli_args"]  # minutes a test, launched runs
    # its ranks run in the job's folder, where mutmut's stats run fails: --launched counts it
    assert "--ignore=tests/test_slurm.py" in settings["pytest_add_cli_args"]
    assert settings["process_isolation"] == "forkserver"
    assert settings["also_copy"] == ["README.md", "configs", "pyproject.toml"]


def test_the_report_counts_each_status_and_shows_each_survivor(tmp_path, monkeypatch) -> None:
    meta = tmp_path / "mutants" / "src" / "pkg" / "average.py.meta"
    meta.parent.mkdir(parents=True)
    codes = {"pkg.average.x_f__mutmut_1": 1, "pkg.average.x_f__mutmut_2": 0}
    codes |= {"pkg.average.x_g__mutmut_1": 33, "pkg.average.x_g__mutmut_2": 36}
    meta.write_text(json.dumps({"exit_code_by_key": codes}))
    shown = []

    def show(command, **kwargs):
        shown.append(command[-1])
        return type("Done", (), {"stdout": f"- a + b\n+ a - b  ({command[-1]})\n"})()

    monkeypatch.setattr(mutation.subprocess, "run", show)
    result = mutation._read(tmp_path, "pkg", "average", {})
    assert shown == ["pkg.average.x_f__mutmut_2"]  # the survivor's diff only
    assert (result.count("killed"), result.count("survived"), result.count("timeout")) == (1, 1, 1)
    assert result.kill_rate == pytest.approx(1 / 2)  # a timeout is to run again, not a kill
    result.run = "the run"
    report = mutation_text.as_markdown("tabular_regression", [result], ["a header line"], [])
    assert "| average | 4 | 1 | 1 | 0 | 1 | 1 | 50% |" in report and "- average: the run" in report
    assert "## Survivor `pkg.average.x_f__mutmut_2`" in report and "+ a - b" in report
    assert mutation.ModuleResult("none").kill_rate is None  # nothing judged: no rate


def test_a_later_run_replaces_its_modules_and_keeps_the_others() -> None:
    first = [mutation.ModuleResult("state", {"m1": "killed"}, run="first")]
    first.append(mutation.ModuleResult("average", {"m2": "survived"}, {"m2": "diff"}, "first"))
    later = [mutation.ModuleResult("average", {"m2": "killed"}, run="later")]
    merged = mutation_text.merged(mutation_text.as_json(first), later)
    assert [(r.module, r.run) for r in merged] == [("average", "later"), ("state", "first")]
    assert merged[0].diffs == {} and merged[1].statuses == {"m1": "killed"}


SURVIVOR = "--- a.py\n+++ a.py\n@@ -1 +1 @@\n-    x = f(a, b)\n+    x = f(a, None)\n"


def test_an_explained_survivor_is_equivalent_until_its_change_is_another(tmp_path) -> None:
    result = mutation.ModuleResult("state", {"m1": "killed", "m2": "survived", "m3": "survived"})
    result.diffs = {"m2": SURVIVOR, "m3": SURVIVOR}
    assert mutation.changed_lines(SURVIVOR) == "x = f(a, None)"
    fits = mutation.Equivalent("x = f(a, None)", "b is unused here")
    assert mutation.explain([result], {"m2": fits}) == []
    assert result.equivalent == {"m2": "b is unused here"} and result.gaps == ["m3"]
    assert result.kill_rate == pytest.approx(1 / 2)  # equivalents aside
    report = mutation_text.as_markdown("tabular_regression", [result], [], [])
    assert "| state | 3 | 1 | 1 | 1 | 0 | 0 | 50% |" in report
    assert report.index("## Survivor `m3`") < report.index("## Equivalent `m2`")
    assert "b is unused here" in report
    # Renumbered: the name now belongs to another change, so it is a gap again, and said.
    stale = mutation.explain([result], {"m2": mutation.Equivalent("x = f(None, b)", "why")})
    assert stale == ["m2"] and result.equivalent == {} and result.gaps == ["m2", "m3"]
    assert "- `m2`" in mutation_text.as_markdown("tabular_regression", [result], [], stale)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('["m1"]\nchange = "x"\n', "wants exactly `change` and `why`"),
        ('["m1"]\nchange = "x"\nwhy = " "\n', "wants exactly `change` and `why`"),
        ("[m1\n", "not TOML"),
    ],
)
def test_a_bad_explanation_file_is_refused_before_the_run(tmp_path, capsys, text, said) -> None:
    (tmp_path / mutation.EQUIVALENTS).write_text(text)
    argv = ["mutate", "tabular_regression", "--report", str(tmp_path)]
    assert main([*argv, "--workdir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert said in err and mutation.EQUIVALENTS in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "w").exists()


def test_rewrite_applies_the_explanations_to_the_report_without_a_run(tmp_path) -> None:
    earlier = [mutation.ModuleResult("state", {"m1": "killed", "m2": "survived"}, run="first")]
    earlier[0].diffs = {"m2": SURVIVOR}
    (tmp_path / "tabular_regression.json").write_text(json.dumps(mutation_text.as_json(earlier)))
    (tmp_path / mutation.EQUIVALENTS).write_text(
        '["m2"]\nchange = "x = f(a, None)"\nwhy = "b is unused here"\n'
    )
    argv = ["mutate", "tabular_regression", "--rewrite", "--report", str(tmp_path)]
    assert main([*argv, "--workdir", str(tmp_path / "w")]) == 0
    report = (tmp_path / "tabular_regression.md").read_text()
    assert "| state | 2 | 1 | 0 | 1 | 0 | 0 | 100% |" in report and "- state: first" in report
    assert not (tmp_path / "w").exists()


def test_rewrite_without_a_report_is_refused(tmp_path, capsys) -> None:
    argv = ["mutate", "tabular_regression", "--rewrite", "--report", str(tmp_path)]
    assert main(argv) == 2
    assert "no report to rewrite" in capsys.readouterr().err


def test_the_committed_explanations_fit_the_committed_reports() -> None:
    """Every explanation in docs/mutation names a survivor of a committed report, with the
    change that survivor's diff shows: none is stale, none explains a killed mutant."""
    equivalents = mutation.load_equivalents(mutation.REPORT_DIR / mutation.EQUIVALENTS)
    diffs = {}
    for report in mutation.REPORT_DIR.glob("*.json"):
        for entry in json.loads(report.read_text()).values():
            diffs |= entry["survivors"]
    for name, equivalent in equivalents.items():
        assert name in diffs, f"{name}: explained but not a survivor of any report"
        assert mutation.changed_lines(diffs[name]) == equivalent.change, name


def test_a_kill_rate_is_rounded_down_so_a_survivor_never_reads_100_percent():
    assert [mutation_text.percent_down(rate) for rate in (262 / 263, 1.0, 0.899, 0.29)] == [
        "99%",
        "100%",
        "89%",
        "29%",
    ]


def launched_project(tmp_path, codes: dict[str, int]):
    """A project as mutmut leaves it: its outputs/, and mutants/ with the module's record
    beside the files also_copy copies there (tests, configs)."""
    project = tmp_path / "project"
    (project / "outputs").mkdir(parents=True)
    (project / "mutants" / "tests").mkdir(parents=True)
    (project / "mutants" / "tests" / "test_two.py").write_text("")
    (project / "mutants" / "configs").mkdir()
    meta = project / "mutants" / "src" / "pkg" / "distributed.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"exit_code_by_key": codes, "durations_by_key": {}}))
    return project, meta


def test_launched_tests_run_each_mutant_no_test_reached_beside_the_mutated_sources(
    tmp_path, monkeypatch
) -> None:
    """Only the `no tests` mutants run, each active (MUTANT_UNDER_TEST) in the tests and the
    processes they launch, in mutmut's mutants/ (the project's files beside src/); pass: survived,
    fail: killed, too slow: timeout, each written into mutmut's own record."""
    codes = {"pkg.distributed.x_f__mutmut_1": 33, "pkg.distributed.x_f__mutmut_2": 5}
    codes |= {"pkg.distributed.x_g__mutmut_1": 33, "pkg.distributed.x_g__mutmut_2": 1}
    project, meta = launched_project(tmp_path, codes)
    exits = {"": 0, "pkg.distributed.x_f__mutmut_1": 1, "pkg.distributed.x_f__mutmut_2": 0}
    ran = []

    def pytest_run(command, cwd, env, timeout, **quiet):
        ran.append((env["MUTANT_UNDER_TEST"], command[-1], cwd, timeout is None))
        assert (cwd / "tests" / "test_two.py").is_file() and (cwd / "configs").is_dir()
        assert not (cwd / "outputs").exists()
        if env["MUTANT_UNDER_TEST"] not in exits:
            raise launched_mutants.subprocess.TimeoutExpired(command, timeout)
        return type("Done", (), {"returncode": exits[env["MUTANT_UNDER_TEST"]]})()

    monkeypatch.setattr(launched_mutants.subprocess, "run", pytest_run)
    launched_mutants.run_launched(project, "pkg", ["distributed"], ["tests/test_two.py"])
    mutants = project / "mutants"
    assert ran == [
        ("", "tests/test_two.py", mutants, True),  # unmutated first, without a limit
        ("pkg.distributed.x_f__mutmut_1", "tests/test_two.py", mutants, False),
        ("pkg.distributed.x_f__mutmut_2", "tests/test_two.py", mutants, False),
        ("pkg.distributed.x_g__mutmut_1", "tests/test_two.py", mutants, False),
    ]
    assert json.loads(meta.read_text())["exit_code_by_key"] == {
        "pkg.distributed.x_f__mutmut_1": 1,  # killed
        "pkg.distributed.x_f__mutmut_2": 0,  # survived
        "pkg.distributed.x_g__mutmut_1": 36,  # timeout
        "pkg.distributed.x_g__mutmut_2": 1,  # mutmut's own verdict, kept
    }


def test_launched_tests_that_fail_unmutated_stop_before_any_mutant(tmp_path, monkeypatch):
    project, meta = launched_project(tmp_path, {"pkg.distributed.x_f__mutmut_1": 33})
    ran = []

    def failing(command, cwd, env, timeout, **quiet):
        ran.append(env["MUTANT_UNDER_TEST"])
        return type("Done", (), {"returncode": 1})()

    monkeypatch.setattr(launched_mutants.subprocess, "run", failing)
    with pytest.raises(ValueError, match="failed without a mutant .pytest exit 1."):
        launched_mutants.run_launched(project, "pkg", ["distributed"], ["tests/test_two.py"])
    assert ran == [""]
    assert json.loads(meta.read_text())["exit_code_by_key"] == {"pkg.distributed.x_f__mutmut_1": 33}


CHILD = """def double(x: int) -> int:
    return x * 2
"""
LAUNCHING_TEST = """import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def test_a_launched_process_doubles():
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    command = [sys.executable, "-c", "from pkg.child import double; print(double(21))"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "42"
"""


def test_real_mutmut_then_launched_tests_kill_what_only_a_launched_process_runs(tmp_path):
    """The real thing on a tiny project: its one function runs only in a process that its
    test launches (importing it, as torchrun's workers import the project), so mutmut
    reaches no mutant in-process and stops early; every mutant is then `no tests`, and
    --launched's run kills each, which proves the launched process ran the mutant (the
    original passes)."""
    project = tmp_path / "project"
    (project / "src" / "pkg").mkdir(parents=True)
    (project / "src" / "pkg" / "__init__.py").write_text("")
    (project / "src" / "pkg" / "child.py").write_text(CHILD)
    (project / "tests").mkdir()
    (project / "tests" / "test_child.py").write_text(LAUNCHING_TEST)
    (project / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["src"]\n')
    mutation._configure(project / "pyproject.toml", ["src/pkg/child.py"])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    mutation.run_mutmut(project, "pkg", ["child"], 1, env)
    unreached = mutation._read(project, "pkg", "child", env).statuses
    assert unreached and set(unreached.values()) == {"no tests"}, unreached
    launched_mutants.run_launched(project, "pkg", ["child"], ["tests/test_child.py"])
    statuses = mutation._read(project, "pkg", "child", env).statuses
    assert statuses.keys() == unreached.keys() and set(statuses.values()) == {"killed"}
