"""Releases stay updatable: tagged versions, a CHANGELOG entry for each, nothing lost silently.

A release is a git tag named with a PEP 440 version (`v0.1.0`); `copier update` moves a
project to the newest one. An answer whose question disappears, or a file that disappears
from the template, would be dropped by the update without a word, so after a release each
needs a `_migrations` entry (a file may instead be named in the CHANGELOG). And every test
that renders names the ref it renders: without one, copier takes the newest tag, which would
test a release instead of the change under test.

The release rules run on this checkout's tags (none until the first release), and on real
tags made in a temporary clone of it, where a release, a tag without an entry and a question
or file gone since are made on purpose: so each rule is seen to fail on what it names.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.version import InvalidVersion, Version

from generator import COPIER_YML, REPO_ROOT

CHANGELOG = REPO_ROOT / "CHANGELOG.md"
HEADING = re.compile(r"^## (?P<title>.+)$", re.MULTILINE)
UNRELEASED = "Unreleased"
COPIER_APIS = {"run_copy", "run_recopy", "run_update"}
COPIER_COMMANDS = {"copy", "recopy", "update"}
REF_FLAGS = ("--vcs-ref", "-r")
SCANNED = ["tests", "generator", "bench"]


def load_config(text: str) -> dict[str, Any]:
    return yaml.safe_load(text) or {}


def parse_version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def git(*args: str, root: Path = REPO_ROOT) -> str | None:
    """Output of a git command in the checkout `root`; None when git can't answer."""
    try:
        result = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=60
        )
    except OSError:
        return None
    return result.stdout if result.returncode == 0 else None


def release_tags(root: Path = REPO_ROOT) -> dict[str, Version]:
    """Tags of the checkout `root` that copier treats as versions (PEP 440, `v` prefix
    allowed)."""
    listed = git("tag", "--list", root=root) or ""
    versions = {tag: parse_version(tag) for tag in listed.split()}
    return {tag: version for tag, version in versions.items() if version is not None}


def answered_questions(config: Mapping[str, Any]) -> set[str]:
    """Questions whose answers the answers file records (`when: false` ones are computed)."""
    return {
        name
        for name, spec in config.items()
        if not name.startswith("_") and not (isinstance(spec, dict) and spec.get("when") is False)
    }


def rendered_name(template_path: str) -> str:
    """The path a template file renders to, with Jinja in the name reduced to its text."""
    name = template_path.removeprefix("template/")
    name = re.sub(r"\{%.*?%\}", "", name)
    name = re.sub(r"\{\{\s*(\w+)\s*\}\}", r"<\1>", name)
    return name.removesuffix(".jinja")


def migration_problems(config: Mapping[str, Any]) -> list[str]:
    """Each `_migrations` entry runs a command for one PEP 440 version."""
    migrations = config.get("_migrations", [])
    if not isinstance(migrations, list):
        return ["_migrations must be a list"]
    problems = []
    for index, migration in enumerate(migrations):
        where = f"_migrations[{index}]"
        if not isinstance(migration, dict):
            problems.append(f"{where}: give `version` and `command`, not a bare command")
            continue
        if "before" in migration or "after" in migration:
            problems.append(f"{where}: before/after is copier's deprecated format; use `command`")
        if parse_version(str(migration.get("version", ""))) is None:
            problems.append(f"{where}: version {migration.get('version')!r} is not PEP 440")
        if not migration.get("command"):
            problems.append(f"{where}: no command")
    return problems


def unmigrated(released: Iterable[str], config: Mapping[str, Any], text: str = "") -> list[str]:
    """The names, of questions or files gone since a release, that neither the `_migrations`
    of `config` nor `text` mention: `copier update` would drop each without a word."""
    mentioned = yaml.safe_dump(config.get("_migrations", [])) + text
    return sorted(
        name
        for name in set(released)
        if not re.search(rf"(?<![\w.]){re.escape(Path(name).name)}(?![\w])", mentioned)
    )


def changelog_sections(text: str) -> list[tuple[str, Version | None, str]]:
    """(title, version or None for Unreleased, text) of each `## ` entry, in order."""
    matches = list(HEADING.finditer(text))
    ends = [match.start() for match in matches[1:]] + [len(text)]
    return [
        (match["title"], parse_version(match["title"].split()[0]), text[match.start() : end])
        for match, end in zip(matches, ends, strict=True)
    ]


def entries_after(text: str, version: Version) -> str:
    """The CHANGELOG entries of releases later than `version`, Unreleased included."""
    return "".join(
        body
        for _, section_version, body in changelog_sections(text)
        if section_version is None or section_version > version
    )


def unnamed_refs(source: str, filename: str = "<source>") -> list[str]:
    """Copier calls in Python source that don't say which template version they render.

    API calls need a `vcs_ref` keyword (None is allowed: it reads as a choice); a command line
    written as a list or as the arguments of a call whose name mentions copier needs
    `--vcs-ref`/`-r`.
    """
    problems: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename)):
        name = ""
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in COPIER_APIS and not any(k.arg == "vcs_ref" for k in node.keywords):
                problems.append((node.lineno, f"{name}(...) without vcs_ref="))
                continue
        if isinstance(node, ast.Call):
            items = node.args
        elif isinstance(node, ast.List | ast.Tuple):
            items = node.elts
        else:
            continue
        words = [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
        if not ("copier" in words or "copier" in name.lower()):
            continue
        if COPIER_COMMANDS & set(words) and not any(
            word in REF_FLAGS or word.startswith("--vcs-ref=") for word in words
        ):
            problems.append((node.lineno, "a copier command line without --vcs-ref"))
    return [f"{filename}:{line}: {problem}" for line, problem in sorted(problems)]


# --- the rules, on examples that break them


def test_migration_rules_catch_malformed_entries() -> None:
    config = {
        "_migrations": [
            "echo bare",
            {"version": "one", "command": "echo x"},
            {"version": "v1.2.0"},
            {"version": "1.0", "before": ["echo old"]},
        ]
    }
    problems = migration_problems(config)
    assert [problem.split(":")[0] for problem in problems] == [
        "_migrations[0]",
        "_migrations[1]",
        "_migrations[2]",
        "_migrations[3]",
        "_migrations[3]",
    ]
    assert migration_problems({"_migrations": [{"version": "v1.2.0", "command": "x"}]}) == []


def test_a_vanished_question_needs_a_migration_that_names_it() -> None:
    released = answered_questions(
        {"tracker": {}, "logger": {"type": "str"}, "derived": {"when": False}, "_subdirectory": 1}
    )
    assert released == {"tracker", "logger"}
    now = {"tracker": {}}
    assert unmigrated(released - set(now), now) == ["logger"]
    migrated = {
        "tracker": {},
        "_migrations": [{"version": "v0.2.0", "command": "python rename.py logger tracker"}],
    }
    assert unmigrated(released - set(migrated), migrated) == []
    # A longer name that merely contains it is not a mention.
    loggers = {"_migrations": [{"version": "v0.2.0", "command": "echo loggers"}]}
    assert unmigrated(["logger"], loggers) == ["logger"]


def test_rendered_names_drop_jinja() -> None:
    assert (
        rendered_name("template/src/{{package_name}}/train.py.jinja")
        == "src/<package_name>/train.py"
    )
    conditional = 'template/tests/{% if tracker != "none" %}test_tracking.py{% endif %}.jinja'
    assert rendered_name(conditional) == "tests/test_tracking.py"


def test_the_ref_scan_catches_calls_without_a_ref() -> None:
    source = """
copier.run_copy(src, dst, defaults=True)
run_update(dst, vcs_ref=None)
subprocess.run(["copier", "copy", "--defaults", src, dst])
subprocess.run(["copier", "copy", "--vcs-ref", "HEAD", src, dst])
subprocess.run([sys.executable, "-m", "copier", "update", "--vcs-ref=v2"])
copier_cli(project, "update", "--defaults")
copier_cli(project, "update", "-r", "v2")
"""
    lines = [int(problem.split(":")[1]) for problem in unnamed_refs(source)]
    assert lines == [2, 4, 7]


# --- the rules, on this repository


def test_every_render_in_the_tests_names_its_ref() -> None:
    files = sorted(path for folder in SCANNED for path in (REPO_ROOT / folder).rglob("*.py"))
    assert any(path.name == "render.py" for path in files)
    problems = [
        problem
        for path in files
        for problem in unnamed_refs(
            path.read_text(encoding="utf-8"), str(path.relative_to(REPO_ROOT))
        )
    ]
    assert not problems, "name the template version to render:\n" + "\n".join(problems)


def test_migrations_are_well_formed() -> None:
    assert migration_problems(load_config(COPIER_YML.read_text(encoding="utf-8"))) == []


def test_changelog_lists_releases_newest_first() -> None:
    sections = changelog_sections(CHANGELOG.read_text(encoding="utf-8"))
    assert sections, "CHANGELOG.md has no `## ` entries"
    titles = [title for title, version, _ in sections if version is None]
    assert titles in ([], [UNRELEASED]), f"only one `## {UNRELEASED}` entry, before releases"
    assert sections[0][1] is None or UNRELEASED not in titles
    versions = [version for _, version, _ in sections if version is not None]
    assert versions == sorted(versions, reverse=True), "newest release first"
    assert len(set(versions)) == len(versions), "one entry per release"


def tags_without_an_entry(root: Path = REPO_ROOT) -> list[str]:
    """The release tags of `root` (pre-releases aside) that its CHANGELOG.md has no entry for."""
    changelog = (root / "CHANGELOG.md").read_text(encoding="utf-8")
    listed = {version for _, version, _ in changelog_sections(changelog)}
    return [
        tag
        for tag, version in sorted(release_tags(root).items(), key=lambda item: item[1])
        if not version.is_prerelease and version not in listed
    ]


def vanished_problems(root: Path = REPO_ROOT) -> list[str]:
    """What `root`'s working tree has dropped since each of its release tags, unannounced:
    an answered question that no `_migrations` entry names, and a rendered file that
    neither one nor a later CHANGELOG entry names."""
    now = load_config((root / "copier.yml").read_text(encoding="utf-8"))
    # -z: NUL-separated and unquoted; git quotes the names that hold `"` (Jinja conditions).
    listed = git(
        "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "template", root=root
    )
    # The working tree's files: one deleted but not yet committed is gone already.
    current = {rendered_name(n) for n in (listed or "").split("\0") if n and (root / n).exists()}
    changelog = (root / "CHANGELOG.md").read_text(encoding="utf-8")
    problems = []
    for tag, version in sorted(release_tags(root).items(), key=lambda item: item[1]):
        released = load_config(git("show", f"{tag}:copier.yml", root=root) or "")
        for name in unmigrated(answered_questions(released) - answered_questions(now), now):
            problems.append(f"{tag}: question {name!r} is gone; add a `_migrations` entry")
        files = git("ls-tree", "-r", "-z", "--name-only", tag, "--", "template", root=root) or ""
        gone = {rendered_name(name) for name in files.split("\0") if name} - current
        for name in unmigrated(gone, now, entries_after(changelog, version)):
            problems.append(
                f"{tag}: file {name} is gone, and `copier update` deletes it even when edited; "
                "carry it over in `_migrations` or say so in CHANGELOG.md"
            )
    return problems


def test_every_release_tag_has_a_changelog_entry() -> None:
    missing = tags_without_an_entry()
    assert not missing, f"CHANGELOG.md has no `## <version>` entry for {missing}"


def test_nothing_released_vanishes_without_a_migration() -> None:
    problems = vanished_problems()
    assert not problems, "\n".join(problems)


# --- the release rules on real tags, in a clone of this repository


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A clone of this repository's HEAD, its own tags left behind."""
    root = tmp_path / "clone"
    cloned = git("clone", "--quiet", "--local", "--no-tags", str(REPO_ROOT), str(root))
    assert cloned is not None, "git clone failed"
    return root


def tag(root: Path, name: str) -> None:
    assert git("tag", name, "HEAD", root=root) is not None, f"git tag {name} failed"


def release(root: Path, version: str) -> None:
    """Release as README.md says: the Unreleased changes become `## version`, committed and
    tagged `v<version>`."""
    path = root / "CHANGELOG.md"
    changelog = path.read_text(encoding="utf-8")
    path.write_text(changelog.replace(f"## {UNRELEASED}\n", f"## {version}\n", 1), "utf-8")
    identity = ["-c", "user.name=Release", "-c", "user.email=release@example.com"]
    committed = git(*identity, "commit", "--quiet", "-m", version, "--", "CHANGELOG.md", root=root)
    assert committed is not None, "git commit failed"
    tag(root, f"v{version}")


def add_unreleased(root: Path, text: str) -> None:
    """A `## Unreleased` entry holding `text`, before the clone's first entry."""
    path = root / "CHANGELOG.md"
    changelog = path.read_text(encoding="utf-8")
    first = HEADING.search(changelog).start()
    entry = f"## {UNRELEASED}\n\n- {text}\n\n"
    path.write_text(changelog[:first] + entry + changelog[first:], encoding="utf-8")


def test_a_release_tag_without_a_changelog_entry_is_found(clone: Path) -> None:
    tag(clone, "v99.0.0")
    tag(clone, "v99.1.0rc1")  # a pre-release needs no entry of its own
    tag(clone, "not-a-version")
    assert tags_without_an_entry(clone) == ["v99.0.0"]
    release(clone, "99.0.1")
    assert tags_without_an_entry(clone) == ["v99.0.0"]  # the new release has its entry


def test_a_question_or_file_gone_since_a_release_is_found_until_announced(clone: Path) -> None:
    release(clone, "99.0.0")
    assert vanished_problems(clone) == []  # the release itself: nothing gone
    # The next version drops a question and a file, in the working tree (uncommitted).
    config = clone / "copier.yml"
    text = config.read_text(encoding="utf-8")
    question = re.search(r"^tracker:\n(?:[ #].*\n|\n)*", text, re.MULTILINE)
    config.write_text(text[: question.start()] + text[question.end() :], encoding="utf-8")
    assert "tracker" not in load_config(config.read_text(encoding="utf-8"))
    (clone / "template" / "Makefile.jinja").unlink()
    problems = vanished_problems(clone)
    assert len(problems) == 2, problems
    assert problems[0].startswith("v99.0.0: question 'tracker' is gone"), problems
    assert problems[1].startswith("v99.0.0: file Makefile is gone"), problems
    # Announced: the file in the next version's CHANGELOG entry, the question by a migration.
    add_unreleased(clone, "Makefile is gone: its targets moved to tox.ini.")
    problems = vanished_problems(clone)
    assert len(problems) == 1 and "question 'tracker'" in problems[0], problems
    migration = "\n_migrations:\n  - version: v99.1.0\n    command: python carry.py tracker\n"
    config.write_text(config.read_text(encoding="utf-8") + migration, encoding="utf-8")
    assert migration_problems(load_config(config.read_text(encoding="utf-8"))) == []
    assert vanished_problems(clone) == []
