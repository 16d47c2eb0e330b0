"""The floors of a rendered src/: utils/ at the bottom, importing nothing of the project, and
no import circle between modules or between the packages that group them (run_folder/,
search/, utils/).

The template is read as the union of every render: each import line of every file, whatever
answer keeps it. A render's imports are a subset of that union, so a union without circles
proves all 1,280 combinations at once. The committed reference projects, parsed as Python,
check that the union reader misses no import.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from generator import REPO_ROOT
from generator.references import REFERENCES_DIR, references

SRC_TEMPLATE = REPO_ROOT / "template" / "src" / "{{package_name}}"
BASE = "utils"  # the floor every module may use
IMPORT = re.compile(r"^\s*from (\.+|\{\{ package_name \}\}\.?)([\w.]*) import \(?([\w, ]*)")
NAMES_LINE = re.compile(r"^\s+(\w+),?$")
TAG = re.compile(r"\{%.*?%\}")  # a file's condition: its name is what the tags wrap
# A partial a template file includes, by a fixed path or one per answer ("includes/distributed/"
# ~ distributed ~ "/processes_imports.jinja"): its imports are the including module's.
INCLUDE = re.compile(r'\{% include "([^"]+)"(?: ~ \w+ ~ "([^"]+)")?')
Graph = dict[str, set[str]]


def template_module(path: Path) -> str:
    """`search.space` for search/space.py, `tracking` for any answer's tracking.py.jinja."""
    relative = path.relative_to(SRC_TEMPLATE)
    name = TAG.sub("", relative.name).removesuffix(".jinja").removesuffix(".py")
    parts = [*relative.parent.parts, name]
    return ".".join(parts[:-1] if name == "__init__" else parts)


def resolve(module: str, is_package: bool, dots: str, base: str, names: Iterable[str]) -> set:
    """The modules an import names: `from . import task` names task, `from .a import b` a."""
    if dots.startswith("{"):
        target = base
    else:
        here = module.split(".") if is_package else module.split(".")[:-1]
        target = ".".join([*here[: len(here) - len(dots) + 1], *([base] if base else [])])
    return {f"{target}.{name}".lstrip(".") for name in names} | {target}


def union_graph() -> Graph:
    """Every import of every template file under src/, whatever answer keeps it; imports under
    `if __name__ == "__main__":` are left out (they run in __main__, not in the module)."""
    files = [path for path in SRC_TEMPLATE.rglob("*") if path.is_file()]
    modules = {template_module(path) for path in files}
    graph: Graph = {module: set() for module in modules}
    for path in files:
        module = template_module(path)
        lines = with_includes(path.read_text(encoding="utf-8"))
        for index, line in enumerate(lines):
            if line.startswith("if __name__ =="):
                break
            match = IMPORT.match(line)
            if not match:
                continue
            names = [name.strip() for name in match[3].split(",") if name.strip()]
            for following in lines[index + 1 :] if line.rstrip().endswith("(") else []:
                if NAMES_LINE.match(following):
                    names.append(NAMES_LINE.match(following)[1])
                elif following.startswith(")"):
                    break
            named = resolve(module, path.name.startswith("__init__"), match[1], match[2], names)
            graph[module] |= {target for target in named if target in modules} - {module}
    return graph


def with_includes(text: str) -> list[str]:
    """The lines of a template file, each include replaced by the lines of every partial it
    may include: the union over the answers, as for the files themselves."""
    lines: list[str] = []
    for line in text.split("\n"):
        match = INCLUDE.search(line)
        if not match:
            lines.append(line)
            continue
        pattern = match[1] + (f"*{match[2]}" if match[2] else "")
        for partial in sorted(REPO_ROOT.glob(pattern)):
            lines += with_includes(partial.read_text(encoding="utf-8"))
    return lines


def project_graph(project: Path) -> Graph:
    """The same graph, from a rendered project's Python."""
    (package,) = [p for p in (project / "src").iterdir() if (p / "__init__.py").is_file()]
    paths = {path: path.relative_to(package).with_suffix("") for path in package.rglob("*.py")}
    modules = {
        ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts): path
        for path, rel in paths.items()
    }
    graph: Graph = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        main = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n)]
        skipped = {id(node) for block in main for node in ast.walk(block)}
        graph[module] = set()
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or id(node) in skipped:
                continue
            if node.level:
                dots, base = "." * node.level, node.module or ""
            elif (node.module or "").split(".")[0] == package.name:
                dots, base = "{", node.module.partition(".")[2]
            else:
                continue
            names = [alias.name for alias in node.names]
            named = resolve(module, path.name == "__init__.py", dots, base, names)
            graph[module] |= {target for target in named if target in modules} - {module}
    return graph


def floor(module: str) -> str:
    """The package a module belongs to (`search` for search.space), or the module itself."""
    return module.split(".")[0]


def circles(graph: Graph) -> list[list[str]]:
    """The modules that import each other, directly or around a circle: each group of two or
    more (Tarjan's strongly connected components), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def packages(graph: Graph) -> Graph:
    """The graph between floors: an edge a -> b where a module of a imports one of b."""
    folded: Graph = {}
    for module, targets in graph.items():
        folded.setdefault(floor(module), set()).update(floor(t) for t in targets)
    return {name: targets - {name} for name, targets in folded.items()}


def upward(graph: Graph) -> list[str]:
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if floor(module) == BASE
        for target in targets
        if floor(target) != BASE
    )


def test_utils_imports_nothing_of_the_project_in_any_render() -> None:
    graph = union_graph()
    assert {"utils.cli", "utils.files", "run_folder.records", "search.space"} <= graph.keys()
    assert upward(graph) == []


def test_no_import_circle_between_modules_or_packages_in_any_render() -> None:
    graph = union_graph()
    assert circles(graph) == []
    assert circles(packages(graph)) == []


@pytest.mark.parametrize("ref", references(), ids=lambda ref: ref.name)
def test_the_union_holds_every_import_of_a_rendered_project(ref) -> None:
    """The union reader against Python's own parser, on a committed reference project."""
    union, rendered = union_graph(), project_graph(REFERENCES_DIR / ref.name)
    missing = {m: sorted(t - union.get(m, set())) for m, t in rendered.items()}
    assert {m: t for m, t in missing.items() if t} == {}
    assert sum(map(len, rendered.values())) > 100  # the parser found the imports


def test_the_checks_find_a_circle_and_an_upward_import() -> None:
    graph = {"utils.files": {"config"}, "config": {"utils.files"}, "train": {"config"}}
    assert upward(graph) == ["utils.files -> config"]
    assert circles(graph) == [["config", "utils.files"]]
    assert circles(packages({"search.a": {"train"}, "train": {"search.b"}})) == [
        ["search", "train"]
    ]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
