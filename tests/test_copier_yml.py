"""copier.yml keeps the settings that make renders safe, quiet and updatable."""

from __future__ import annotations

import re
import sys

import yaml

from generator import COPIER_YML, REPO_ROOT

CONFIG = yaml.safe_load(COPIER_YML.read_text(encoding="utf-8"))


def test_renders_from_the_template_subdirectory() -> None:
    assert CONFIG["_subdirectory"] == "template"


def test_pins_a_minimum_copier_version() -> None:
    major, minor, *_ = (int(part) for part in str(CONFIG["_min_copier_version"]).split("."))
    assert (major, minor) >= (9, 0)


def test_undefined_variables_are_errors() -> None:
    # A typo in a template variable must fail the render, not render as empty text.
    assert CONFIG["_envops"]["undefined"] == "jinja2.StrictUndefined"


def test_whitespace_is_controlled_by_settings() -> None:
    envops = CONFIG["_envops"]
    assert envops["trim_blocks"] and envops["lstrip_blocks"] and envops["keep_trailing_newline"]


def test_excludes_caches_and_outputs() -> None:
    assert {"__pycache__", ".venv"} <= set(CONFIG["_exclude"])


def test_has_a_message_after_copy() -> None:
    assert CONFIG["_message_after_copy"].strip()


def test_runs_no_tasks() -> None:
    # Tasks would need --trust; a template that runs nothing renders with unsafe=False.
    # `_migrations` are allowed: copier runs them (and asks for --trust) only in an update
    # that crosses their version, never in `copier copy` (README: Updating your project;
    # test_releases.py checks their form and that a vanished question has one).
    assert "_tasks" not in CONFIG


def test_answers_file_template_is_at_the_template_root() -> None:
    template = REPO_ROOT / CONFIG["_subdirectory"]
    assert (template / "{{_copier_conf.answers_file}}.jinja").is_file()
    assert CONFIG.get("_answers_file", ".copier-answers.yml") == ".copier-answers.yml"


def test_reserved_package_names_cover_the_standard_library() -> None:
    reserved = set(CONFIG["reserved_package_names"]["default"].split())
    public = {name for name in sys.stdlib_module_names if name.islower() and name[0] != "_"}
    assert not public - reserved, f"add to reserved_package_names: {sorted(public - reserved)}"


def test_reserved_package_names_cover_the_frameworks() -> None:
    reserved = set(CONFIG["reserved_package_names"]["default"].split())
    assert {"torch", "accelerate"} <= reserved


def test_reserved_package_names_cover_every_import_of_the_template() -> None:
    # A project named after a module it imports would shadow that module.
    reserved = set(CONFIG["reserved_package_names"]["default"].split())
    # Statements, not prose: `from X[.y] import` or `import X[.y][ as z][, ...]` at a line's
    # end (a docstring's "from that checkpoint." is not an import).
    from_ = r"from ([A-Za-z_]\w*)[\w.]* import "
    import_ = r"import ([A-Za-z_]\w*)[\w.]*(?: as \w+)?(?:,|\s*(?:#.*)?$)"
    statement = rf"^\s*(?:{from_}|{import_})"
    imports = re.compile(statement, re.MULTILINE)
    imported = {
        (name_from or name).lower()
        for path in (REPO_ROOT / "template").rglob("*")
        # A file rendered by condition is named `{% if ... %}name.py{% endif %}[.jinja]`.
        if re.sub(r"\{%.*?%\}", "", path.name).endswith((".py", ".py.jinja"))
        for name_from, name in imports.findall(path.read_text(encoding="utf-8"))
    }
    assert not imported - reserved, f"add to reserved_package_names: {sorted(imported - reserved)}"
