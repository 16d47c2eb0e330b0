"""`copier update` brings a newer release into a project without eating the user's work.

The tests build a throwaway template repository from this checkout's working tree (so they
test the template as it is now, uncommitted edits included): that state is release v1, a
commit that changes lines users also keep and adds a file is release v2, and a commit on top
is a pre-release. A project rendered from v1 gets user edits, is committed, and is updated.
Git runs with a throwaway identity and without the machine's git configuration.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import copier
import pytest
import yaml
from helpers import project_env, run_in

from generator import REPO_ROOT
from generator.checks import ruff_problems
from generator.render import ANSWERS_FILE, TEMPLATE_FOLDERS, package_of, render

V1, V2, PRERELEASE = "v1.0.0", "v1.1.0", "v1.2.0rc1"
IDENTITY = {
    "GIT_AUTHOR_NAME": "Template Test",
    "GIT_AUTHOR_EMAIL": "template-test@example.com",
    "GIT_COMMITTER_NAME": "Template Test",
    "GIT_COMMITTER_EMAIL": "template-test@example.com",
}
# Lines that v2 of the template and the user both write; the first lines of module docstrings,
# so no edit can break the code.
TRAIN_V2 = "Train the model; this line is from template v2."
TRAIN_USER = "Train the model; the user rewrote this line."
CONFIG_USER = "Training configuration, as the user keeps it."
CONFIG_V2 = 'TEMPLATE_V2 = "added at the end of config.py by template v2"\n'
MODEL_USER = "The user's own model."
ADDED_IN_V2 = "utils/added_in_v2.py"
ADDED_IN_PRERELEASE = "utils/added_in_prerelease.py"
CONFLICT = re.compile(
    r"^<<<<<<< [^\n]*\n(?P<before>.*?)(?:^\|\|\|\|\|\|\| [^\n]*\n.*?)?"
    r"^=======\n(?P<after>.*?)^>>>>>>> [^\n]*\n",
    re.MULTILINE | re.DOTALL,
)
# The rendered project's own tests that exist for every answer and run in seconds: they
# import config.py, model.py and train.py, and train for a few steps.
QUICK_TESTS = ["tests/test_config.py", "tests/test_modules.py"]
TIMEOUT_S = 600  # a bound so a hang fails the test; never a timing assertion


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert result.returncode == 0, f"git {' '.join(args)} in {cwd}:\n{result.stderr}"
    return result.stdout


def copier_cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run copier's command line the way a user does, in the project folder."""
    return subprocess.run(
        [sys.executable, "-m", "copier", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


@pytest.fixture(scope="module", autouse=True)
def isolated_git(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Environment of this module's tests: git and copier see no user or system settings.

    Autouse and module-scoped, so it is in place before the template repository is built and
    for copier's in-process git commands; the machine's configuration is never touched.
    Yields the environment it replaced, for reading this checkout.
    """
    original = dict(os.environ)
    with pytest.MonkeyPatch.context() as patch:
        for name in [*(name for name in os.environ if name.startswith("GIT_")), "XDG_CONFIG_HOME"]:
            patch.delenv(name, raising=False)
        patch.delenv("COPIER_SETTINGS_PATH", raising=False)
        for name, value in IDENTITY.items():
            patch.setenv(name, value)
        patch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
        patch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
        patch.setenv("GIT_CONFIG_NOSYSTEM", "1")
        yield original


def copy_working_tree(dest: Path, env: dict[str, str]) -> None:
    """copier.yml, template/ and includes/ as in this checkout, uncommitted edits included."""
    command = ["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--"]
    listed = git(REPO_ROOT, *command, "copier.yml", *TEMPLATE_FOLDERS, env=env)
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is still listed
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    assert (dest / "copier.yml").is_file() and (dest / "template").is_dir()


def template_file(repo: Path, rendered: str) -> Path:
    """The template file that renders to `rendered` (a path in the project)."""
    candidates = [repo / "template" / rendered, repo / "template" / f"{rendered}.jinja"]
    found = [path for path in candidates if path.is_file()]
    assert len(found) == 1, f"expected one of template/{rendered}[.jinja]; adapt this test"
    return found[0]


def replace_docstring_opening(path: Path, words: str) -> None:
    """Replace the words on the first line of the module docstring of `path`."""
    first, rest = path.read_text(encoding="utf-8").split("\n", 1)
    assert first.startswith('"""'), f"{path}: expected a module docstring on line 1"
    closing = '"""' if first.count('"""') == 2 else ""
    path.write_text(f'"""{words}{closing}\n{rest}', encoding="utf-8")


def commit_all(repo: Path, message: str, tag: str | None = None) -> None:
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "--no-verify", "--message", message)
    if tag:
        git(repo, "tag", tag)


@pytest.fixture(scope="module")
def template_repo(tmp_path_factory: pytest.TempPathFactory, isolated_git: dict[str, str]) -> Path:
    repo = tmp_path_factory.mktemp("template") / "repo"
    copy_working_tree(repo, isolated_git)
    git(repo, "init", "--quiet")
    commit_all(repo, "The template as it is in the working tree", tag=V1)

    package = "src/{{package_name}}"
    replace_docstring_opening(template_file(repo, f"{package}/train.py"), TRAIN_V2)
    config = template_file(repo, f"{package}/config.py")
    config.write_text(config.read_text(encoding="utf-8") + f"\n\n{CONFIG_V2}", encoding="utf-8")
    new_file = repo / "template" / package / ADDED_IN_V2
    new_file.write_text('"""Added in template v2: new files reach existing projects."""\n')
    commit_all(repo, "Release 2: a changed line, an appended line and a new file", tag=V2)

    prerelease = repo / "template" / package / ADDED_IN_PRERELEASE
    prerelease.write_text('"""Only in a pre-release, which updates skip by default."""\n')
    commit_all(repo, "A pre-release", tag=PRERELEASE)
    return repo


def answers(project: Path) -> dict[str, object]:
    return yaml.safe_load((project / ANSWERS_FILE).read_text(encoding="utf-8"))


def render_release(template: Path, dest: Path, **data: object) -> Path:
    """Render release v1 into `dest` and commit it, as a user starting a project does."""
    copier.run_copy(
        str(template), str(dest), data=data, vcs_ref=V1, defaults=True, unsafe=False, quiet=True
    )
    git(dest, "init", "--quiet")
    commit_all(dest, "Start from the template")
    return dest


def source(project: Path, name: str) -> Path:
    return project / "src" / package_of(project) / name


def edit_like_a_user(project: Path) -> None:
    """One edit the template's v2 also makes (a conflict), one it does not, a new file and a
    deleted one; then commit, as `copier update` requires a clean working tree."""
    replace_docstring_opening(source(project, "train.py"), TRAIN_USER)
    replace_docstring_opening(source(project, "config.py"), CONFIG_USER)
    (project / "NOTES.md").write_text("Mine.\n", encoding="utf-8")
    workflow = project / ".github" / "workflows" / "ci.yml"
    assert workflow.is_file(), "the test deletes the rendered CI workflow; pick another file"
    workflow.unlink()
    commit_all(project, "User edits")


def take_template_side(path: Path) -> None:
    """Resolve inline conflicts the way a user keeping the template's version would."""
    text = path.read_text(encoding="utf-8")
    path.write_text(CONFLICT.sub(lambda match: match["after"], text), encoding="utf-8")


def unmerged(project: Path) -> list[str]:
    return git(project, "diff", "--name-only", "--diff-filter=U").split()


def test_update_merges_a_release_into_an_edited_project(
    template_repo: Path, tmp_path: Path
) -> None:
    project = render_release(template_repo, tmp_path / "project")
    assert answers(project)["_commit"] == V1
    edit_like_a_user(project)

    result = copier_cli(project, "update", "--defaults", "--conflict", "inline", "--vcs-ref", V2)
    assert result.returncode == 0, result.stderr

    assert answers(project)["_commit"] == V2
    # Template changes arrive: an appended line and a new file.
    config = source(project, "config.py").read_text(encoding="utf-8")
    assert config.endswith(CONFIG_V2)
    assert source(project, ADDED_IN_V2).is_file()
    # The user's edit to a line the template did not change is kept.
    assert config.startswith(f'"""{CONFIG_USER}')
    # The line both changed holds both versions between inline markers, and git knows.
    train = source(project, "train.py").read_text(encoding="utf-8")
    assert len(CONFLICT.findall(train)) == 1, train[:600]
    conflict = CONFLICT.search(train)
    assert conflict is not None
    assert TRAIN_USER in conflict["before"] and TRAIN_V2 in conflict["after"]
    assert unmerged(project) == [f"src/{package_of(project)}/train.py"]
    # The user's own file stays, and a template file the user deleted is not brought back.
    assert (project / "NOTES.md").read_text(encoding="utf-8") == "Mine.\n"
    assert not (project / ".github" / "workflows" / "ci.yml").exists()
    assert not source(project, ADDED_IN_PRERELEASE).exists()


def test_resolved_update_passes_lint_and_its_tests(template_repo: Path, tmp_path: Path) -> None:
    project = render_release(template_repo, tmp_path / "project")
    edit_like_a_user(project)

    # No ref: what a user's plain `copier update` gets, the newest release by PEP 440 with
    # pre-releases left out.
    copier.run_update(
        str(project), vcs_ref=None, defaults=True, overwrite=True, unsafe=False, quiet=True
    )
    assert answers(project)["_commit"] == V2
    assert not source(project, ADDED_IN_PRERELEASE).exists()

    conflicted = [project / name for name in unmerged(project)]
    assert conflicted, "expected the edited docstring line to conflict"
    for path in conflicted:
        take_template_side(path)
    assert not any("<<<<<<<" in path.read_text(encoding="utf-8") for path in conflicted)
    assert ruff_problems(project) == []
    run_in(project, ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *QUICK_TESTS], "")


def make(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`make ARGS` in the project with this interpreter, its tools first on PATH (as in an
    activated environment), and pre-commit's cache in the test's HOME."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    command = ["make", *args, f"PYTHON={sys.executable}"]
    return subprocess.run(
        command, cwd=project, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )


def test_check_update_finds_the_newer_release_and_make_update_brings_it(
    template_repo: Path, tmp_path: Path
) -> None:
    project = render_release(template_repo, tmp_path / "project")
    # What the scheduled template-update workflow runs: exit 2 while a newer release exists.
    assert copier_cli(project, "check-update", "--quiet").returncode == 2
    found = copier_cli(project, "check-update", "--output-format", "json")
    assert json.loads(found.stdout)["update_available"] is True, found.stdout + found.stderr

    updated = make(project, "update")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert answers(project)["_commit"] == V2
    assert source(project, ADDED_IN_V2).is_file()
    commit_all(project, "Update to v2")
    assert copier_cli(project, "check-update", "--quiet").returncode == 0


@pytest.mark.slow
def test_make_lint_fails_while_an_update_leaves_a_conflict_or_a_rej_file(
    template_repo: Path, tmp_path: Path
) -> None:
    project = render_release(template_repo, tmp_path / "project")
    clean = make(project, "lint")  # every hook of .pre-commit-config.yaml, on a fresh render
    assert clean.returncode == 0, clean.stdout + clean.stderr
    edit_like_a_user(project)
    assert make(project, "update", "ARGS=--conflict inline").returncode == 0
    assert unmerged(project), "expected the edited docstring line to conflict"

    conflicted = make(project, "lint")
    assert conflicted.returncode != 0
    assert re.search(
        r"no conflict markers left by copier update or git\.+Failed", conflicted.stdout
    )
    for name in unmerged(project):
        take_template_side(project / name)
    git(project, "add", "--all")
    assert make(project, "lint").returncode == 0

    (project / "pyproject.toml.rej").write_text("@@ a change copier could not apply\n")
    left = make(project, "lint")
    assert left.returncode != 0 and "./pyproject.toml.rej" in left.stdout
    assert re.search(r"no \.rej files left by copier update\.+Failed", left.stdout)


def test_update_refuses_uncommitted_changes(template_repo: Path, tmp_path: Path) -> None:
    project = render_release(template_repo, tmp_path / "project")
    train = source(project, "train.py")
    replace_docstring_opening(train, TRAIN_USER)
    edited = train.read_text(encoding="utf-8")

    result = copier_cli(project, "update", "--defaults", "--vcs-ref", V2)
    assert result.returncode != 0
    assert "dirty" in result.stderr.lower(), result.stderr
    assert train.read_text(encoding="utf-8") == edited
    assert answers(project)["_commit"] == V1


def test_changing_an_answer_adds_its_files_and_keeps_user_code(
    template_repo: Path, tmp_path: Path
) -> None:
    project = render_release(template_repo, tmp_path / "project", tracker="none")
    tracking = source(project, "tracking.py")
    assert not tracking.exists()
    replace_docstring_opening(source(project, "model.py"), MODEL_USER)
    commit_all(project, "User edits the model")

    # `:current:` keeps the project's release, so only the answer changes.
    result = copier_cli(
        project, "update", "--defaults", "--vcs-ref", ":current:", "--data", "tracker=tensorboard"
    )
    assert result.returncode == 0, result.stderr

    recorded = answers(project)
    assert (recorded["tracker"], recorded["_commit"]) == ("tensorboard", V1)
    assert tracking.is_file()
    assert (project / "tests" / "test_tracking.py").is_file()
    pyproject = (project / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^\s*"tensorboard\b', pyproject, re.MULTILINE), pyproject
    model = source(project, "model.py").read_text(encoding="utf-8")
    assert model.startswith(f'"""{MODEL_USER}')
    assert unmerged(project) == []
    assert ruff_problems(project) == []
    tests = [*QUICK_TESTS, "tests/test_tracking.py"]
    run_in(project, ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests], "")


def test_generator_renders_the_working_tree_not_the_newest_tag(
    template_repo: Path, tmp_path: Path
) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "--quiet", str(template_repo), str(clone))
    package = clone / "template" / "src" / "{{package_name}}"
    (package / "utils" / "committed_after_the_tags.py").write_text('"""Committed."""\n')
    commit_all(clone, "Work after the last tag")
    (package / "utils" / "not_committed.py").write_text('"""Not committed yet."""\n')

    project = render({}, tmp_path / "head", template=clone)
    assert source(project, "utils/committed_after_the_tags.py").is_file()
    assert source(project, "utils/not_committed.py").is_file()
    assert answers(project)["_commit"] not in {V1, V2, PRERELEASE}

    # What a render without a ref gets instead: the newest release.
    release = tmp_path / "release"
    copier.run_copy(str(clone), str(release), vcs_ref=None, defaults=True, quiet=True)
    assert answers(release)["_commit"] == V2
    assert not source(release, "utils/committed_after_the_tags.py").exists()


# --- a run that lives through `copier update --data distributed=...`

TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
RUN = ["--output_dir", "outputs/run", "--cpu", "true", "--checkpoint_every", "3"]


def train_in(project: Path, processes: int, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m PACKAGE.train` in the project, as one process or under torchrun (gloo)."""
    launch = TORCHRUN if processes > 1 else []
    command = [sys.executable, *launch, "-m", f"{package_of(project)}.train", *RUN, *args]
    return subprocess.run(
        command, cwd=project, env=project_env(), capture_output=True, text=True, timeout=TIMEOUT_S
    )


@pytest.mark.slow
@pytest.mark.parametrize(("before", "after"), [("single", "multi"), ("multi", "single")])
def test_a_run_resumes_after_changing_the_distributed_answer(
    template_repo: Path, tmp_path: Path, before: str, after: str
) -> None:
    """A checkpoint has one layout for both answers: after `copier update --data
    distributed=...` the same run resumes on the other number of processes, with the same
    global batch, saying in one line what is not exact; another global batch is refused."""
    project = render_release(
        template_repo, tmp_path / "project", task_type="tabular_regression", distributed=before
    )
    processes = {"single": 1, "multi": 2}
    per_process = {name: str(32 // count) for name, count in processes.items()}
    first = train_in(
        project, processes[before], "--max_steps", "6", "--batch_size", per_process[before]
    )
    assert first.returncode == 0, first.stderr[-3000:]

    result = copier_cli(
        project, "update", "--defaults", "--vcs-ref", ":current:", "--data", f"distributed={after}"
    )
    assert result.returncode == 0, result.stderr
    assert answers(project)["distributed"] == after and unmerged(project) == []

    checkpoints = project / "outputs" / "run" / "checkpoints"
    kept = sorted(path.name for path in checkpoints.iterdir())
    twice = train_in(
        project, processes[after], "--max_steps", "9", "--batch_size", per_process[before]
    )
    assert twice.returncode != 0
    assert "error: --resume:" in twice.stderr and "batch_size x processes" in twice.stderr
    if processes[after] == 1:  # torchrun adds a traceback of its own for a failed worker
        assert "Traceback" not in twice.stderr, twice.stderr[-3000:]
    assert sorted(path.name for path in checkpoints.iterdir()) == kept  # nothing written

    resumed = train_in(
        project, processes[after], "--max_steps", "9", "--batch_size", per_process[after]
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    note = f"written at world size {processes[before]}, this run's is {processes[after]}"
    assert resumed.stderr.count(note) == 1, resumed.stderr[-3000:]
    summary = yaml.safe_load((project / "outputs" / "run" / "summary.json").read_text())
    assert summary["steps"] == 9


@pytest.mark.slow
def test_a_ddp_run_resumes_sharded_after_copier_update(template_repo: Path, tmp_path: Path) -> None:
    """The README's way out of one GPU's memory: after `copier update --data
    distributed=sharded`, the DDP run's checkpoint resumes on 2 sharded processes, each
    taking its shards of the whole tensors, and says so once."""
    project = render_release(
        template_repo, tmp_path / "project", task_type="tabular_regression", distributed="multi"
    )
    first = train_in(project, 2, "--max_steps", "6", "--batch_size", "16")
    assert first.returncode == 0, first.stderr[-3000:]
    result = copier_cli(
        project, "update", "--defaults", "--vcs-ref", ":current:", "--data", "distributed=sharded"
    )
    assert result.returncode == 0, result.stderr
    assert answers(project)["distributed"] == "sharded" and unmerged(project) == []
    assert source(project, "sharding.py").is_file()
    resumed = train_in(project, 2, "--max_steps", "9", "--batch_size", "16")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stderr.count("holds the whole model, written without sharding") == 1
    summary = yaml.safe_load((project / "outputs" / "run" / "summary.json").read_text())
    assert summary["steps"] == 9
