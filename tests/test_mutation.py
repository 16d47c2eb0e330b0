"""`python -m generator mutate`: refusals before anything runs, mutmut's settings, and the
report read back from mutmut's result files (the run itself takes hours: not here)."""

from __future__ import annotations

import json

import pytest
import tomllib

from generator import mutation
from generator.cli import main
from generator.references import REFERENCES_DIR


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["nope"], "no reference project named 'nope'; choose from: image_classification"),
        (["tabular_regression", "--modules", "optim,nosuch"], "has no src/tabular_regression/"),
        (["tabular_regression", "--modules", ","], "choose from: optim, loaders"),
    ],
)
def test_bad_arguments_are_one_line_and_run_nothing(argv, said, tmp_path, capsys) -> None:
    assert main(["mutate", *argv, "--workdir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "w").exists()


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
    paths = mutation.module_paths("tabular_regression", ["optim", "average"])
    mutation._configure(pyproject, paths)
    settings = tomllib.loads(pyproject.read_text())["tool"]["mutmut"]
    assert settings["only_mutate"] == [
        "src/tabular_regression/optim.py",
        "src/tabular_regression/average.py",
    ]
    assert "not sweep" in settings["pytest_add_cli_args"]  # minutes a test, launched runs
    assert settings["process_isolation"] == "forkserver"


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
    report = mutation.as_markdown("tabular_regression", [result], ["a header line"])
    assert "| average | 4 | 1 | 1 | 1 | 1 | 50% |" in report and "- average: the run" in report
    assert "## Survivor `pkg.average.x_f__mutmut_2`" in report and "+ a - b" in report
    assert mutation.ModuleResult("none").kill_rate is None  # nothing judged: no rate


def test_a_later_run_replaces_its_modules_and_keeps_the_others() -> None:
    first = [mutation.ModuleResult("state", {"m1": "killed"}, run="first")]
    first.append(mutation.ModuleResult("average", {"m2": "survived"}, {"m2": "diff"}, "first"))
    later = [mutation.ModuleResult("average", {"m2": "killed"}, run="later")]
    merged = mutation.merged(mutation.as_json(first), later)
    assert [(r.module, r.run) for r in merged] == [("average", "later"), ("state", "first")]
    assert merged[0].diffs == {} and merged[1].statuses == {"m1": "killed"}
