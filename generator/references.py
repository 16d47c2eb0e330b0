"""Reference projects: the rendered fleet as worked examples, with results, kept in sync.

`reference_projects/` holds one project per task type with default answers, named after its
task, and one with every option on (several processes, bf16, torch.compile, ONNX export and a
tracker). Each is generated output, never edited by hand:

    sync    render each reference project, train it with its default run on the CPU and write
            its results (RESULTS.md, results/results.json, results/curves.png) and the index
            reference_projects/README.md; text_classification's also trains its fine-tuning
            config (FINE_TUNING) into results/fine-tuned.json and fine-tuned-curves.png
    check   render each again into a temporary folder and compare every file with the
            committed one (missing, extra and differing files); the results are exempt, as
            they change from machine to machine, but must be there, and must have been
            trained from the files the template renders now: each results JSON records the
            digest of the project's src/ and configs/ it trained from (sources_digest)
    test    run each committed reference project's own tests

This module lists the references and checks them; generator.reference_runs holds `sync` and
`test`, and generator.results the results' files and the index they make.

Two lines of a rendered `.copier-answers.yml` depend on where and when it was rendered; both
get a fixed value, in `sync` and in `check` alike, so the comparison covers the whole file:
`_src_path` becomes `../..`, this repository seen from reference_projects/<name> (so `copier
update` run inside a reference project reaches it), and `_commit` becomes `HEAD`: the commit
that holds the file, which `check` in CI proves was rendered from the template at that commit.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from generator import REPO_ROOT
from generator.answers import Answers, AnswerSpace, load_space
from generator.render import ANSWERS_FILE, render
from generator.results import (
    CURVES_PNG,
    FINE_TUNED_JSON,
    FINE_TUNED_PNG,
    RESULTS_DIR,
    RESULTS_JSON,
    RESULTS_MD,
    SOURCES,
    index_text,
)
from generator.small_data import SMALL_DATA_JSON, small_data_runs

REFERENCES_DIR = REPO_ROOT / "reference_projects"
INDEX = "README.md"
SRC_PATH = "../.."  # this repository, seen from reference_projects/<name>
COMMIT = "HEAD"
# The fully loaded project: the task's defaults with every option on. Read against copier.yml,
# so a renamed or removed choice fails here, loudly, instead of silently dropping out.
LOADED_TASK = "image_classification"
LOADED = {
    "distributed": "sharded",
    "mixed_precision": "bf16",
    "compile": "true",
    "export_target": "onnx",
    "tracker": "tensorboard",
}

# A sweep runs the same for every task but for the direction of its metric and the launcher
# of its trials: the whole-sweep tests (the projects' pytest marker `sweep`, a minute or more
# each) run in the suites of a single-process project whose metric goes down (loss) and of
# the loaded project, multi-process (sharded) with a metric that goes up (accuracy); the other
# reference suites leave them out.
SWEEP_TEST_REFERENCES = ("language_modeling", f"{LOADED_TASK}_loaded")
# A second run that `sync` records for a task's reference project: the project's config file
# that fine-tunes a pretrained model (README: Fine-tuning a pretrained model).
FINE_TUNING = {"text_classification": "configs/pretrained.yaml"}
# What a reference's recorded runs depend on, of its files: the package (model, data, loop)
# and the config files (the fine-tuning run's, the launch configs). The rest (README, tests,
# CI, packaging) can change without making the results stale.
TRAINED_FROM = ("src", "configs")


@dataclass(frozen=True)
class Reference:
    """One reference project: its folder under reference_projects/ and its answers."""

    name: str  # the folder, and the project's package name
    answers: Answers  # what it answers besides the defaults, project_name included

    @property
    def project_name(self) -> str:
        return str(self.answers["project_name"])

    @property
    def runs_sweep_tests(self) -> bool:
        return self.name in SWEEP_TEST_REFERENCES

    @property
    def is_default(self) -> bool:
        """Whether it is its task's default project (every other answer the default)."""
        return set(self.answers) == {"project_name", "task_type"}

    @property
    def fine_tuning(self) -> str | None:
        """The config file of its recorded fine-tuning run (the default project's only)."""
        return FINE_TUNING.get(str(self.answers["task_type"])) if self.is_default else None


def references(space: AnswerSpace | None = None) -> list[Reference]:
    """Every reference project: one per task type of copier.yml, then the loaded one."""
    space = space or load_space()
    tasks = next(axis for axis in space.axes if axis.name == "task_type").choices
    names = [(str(task), {"task_type": task}) for task in tasks]
    loaded = space.parse_sets(f"{name}={value}" for name, value in LOADED.items())
    names.append((f"{LOADED_TASK}_loaded", {"task_type": LOADED_TASK} | loaded))
    return [
        Reference(name, {"project_name": name.replace("_", "-")} | answers)
        for name, answers in names
    ]


def reference_combinations(
    space: AnswerSpace | None = None, sweeping_only: bool = False
) -> list[Answers]:
    """The combination of choices each reference project renders, defaults included: what
    the reference projects' own tests exercise (`sweeping_only`: those whose suites run the
    whole-sweep tests)."""
    space = space or load_space()
    questions = {axis.name for axis in space.axes}
    return [
        {
            name: value
            for name, value in (space.defaults() | ref.answers).items()
            if name in questions
        }
        for ref in references(space)
        if ref.runs_sweep_tests or not sweeping_only
    ]


def select(names: Sequence[str] | None, space: AnswerSpace | None = None) -> list[Reference]:
    """The references `names` picks (all when empty); ValueError naming the valid names."""
    every = references(space)
    if not names:
        return every
    by_name = {ref.name: ref for ref in every}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise ValueError(
            f"no reference project named {', '.join(map(repr, unknown))}; "
            f"choose from: {', '.join(by_name)}"
        )
    return [ref for ref in every if ref.name in names]


# --- rendering


def render_reference(ref: Reference, dest: Path) -> Path:
    """Render `ref` into `dest` and fix the answers-file lines that depend on the render."""
    render(ref.answers, dest)
    path = dest / ANSWERS_FILE
    text = path.read_text(encoding="utf-8")
    for key, value in (("_commit", COMMIT), ("_src_path", SRC_PATH)):
        text, count = re.subn(rf"^{key}: .*$", f"{key}: {value}", text, flags=re.MULTILINE)
        if count != 1:
            raise ValueError(f"{path}: expected one {key} line, found {count}")
    path.write_text(text, encoding="utf-8")
    return dest


def ignore_patterns(project: Path) -> list[str]:
    """The rendered project's .gitignore patterns (caches, outputs/): never compared or copied.

    Only the forms the template writes are understood: names and globs without a slash
    inside, matched against every component of a path.
    """
    path = project / ".gitignore"
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return [line.strip().rstrip("/") for line in lines if line.strip() and line[0] != "#"]


def project_files(project: Path, patterns: Sequence[str]) -> set[str]:
    """Paths of the files in `project`, relative and with '/', less those `patterns` ignore."""
    files = set()
    for path in project.rglob("*"):
        relative = path.relative_to(project)
        if any(fnmatch.fnmatch(part, p) for part in relative.parts for p in patterns):
            continue
        if path.is_file() or path.is_symlink():
            files.add(relative.as_posix())
    return files


def is_result(relative: str) -> bool:
    return relative == RESULTS_MD or relative.startswith(f"{RESULTS_DIR}/")


def sources_digest(project: Path) -> str:
    """sha256 of the files under TRAINED_FROM in `project` (each one's path and bytes, in
    order of path), its .gitignore'd files (caches) aside: the same for the same files."""
    patterns = ignore_patterns(project)
    digest = hashlib.sha256()
    files = sorted(
        path for path in project_files(project, patterns) if path.split("/", 1)[0] in TRAINED_FROM
    )
    for path in files:
        content = (project / path).read_bytes()
        digest.update(f"{path}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


def recorded_runs(ref: Reference) -> tuple[str, ...]:
    """The JSON files in which `sync` records a reference's runs."""
    fine_tuned = (FINE_TUNED_JSON,) if ref.fine_tuning else ()
    return (RESULTS_JSON, *fine_tuned, *((SMALL_DATA_JSON,) if small_data_runs(ref) else ()))


def stale_results(project: Path, ref: Reference, sources: str) -> list[str]:
    """One line for each results JSON in `project` that was not trained from the files whose
    sources_digest is `sources`, naming the command that trains it again."""
    problems = []
    for path in recorded_runs(ref):
        if not (project / path).is_file():
            continue  # compare() says it is missing
        try:
            recorded = json.loads((project / path).read_text(encoding="utf-8")).get(SOURCES)
        except (OSError, ValueError, AttributeError):
            recorded = None
        folders = " and ".join(f"{folder}/" for folder in TRAINED_FROM)
        if recorded is None:
            what = f"records no digest of the {folders} it was trained from"
        else:
            what = f"was trained from other {folders} than the template renders now"
        if recorded != sources:
            problems.append(
                f"{ref.name}/{path}: {what} (stale results); "
                f"run `python -m generator references sync --only {ref.name}`"
            )
    return problems


# --- check


def check(root: Path = REFERENCES_DIR, names: Sequence[str] | None = None) -> list[str]:
    """What differs between `root` and a fresh render of every reference; [] when in sync.

    Each problem is one line naming the file: missing (rendered, not in `root`), extra (in
    `root`, not rendered) or differs. The results files are exempt from the comparison but
    must exist, and the index must be what `sync` would write from them.
    """
    space = load_space()
    chosen = select(names, space)
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="references-check-") as scratch:
        for ref in chosen:
            fresh = render_reference(ref, Path(scratch) / ref.name)
            problems += compare(fresh, root / ref.name, ref)
    if not names:
        known = {ref.name for ref in chosen} | {INDEX}
        extra = (
            sorted(p.name for p in root.iterdir() if p.name not in known) if root.is_dir() else []
        )
        problems += [f"{name}: extra (not a reference project)" for name in extra]
        index = root / INDEX
        if not index.is_file():
            problems.append(f"{INDEX}: missing")
        elif index.read_text(encoding="utf-8") != index_text(chosen, root):
            problems.append(f"{INDEX}: differs from the index of the results")
    return problems


def compare(fresh: Path, committed: Path, ref: Reference) -> list[str]:
    """Problems of `committed` against the render `fresh`, one line per file, sorted."""
    name = ref.name
    if not committed.is_dir():
        return [f"{name}/: missing"]
    patterns = ignore_patterns(fresh)
    rendered, present = project_files(fresh, patterns), project_files(committed, patterns)
    problems = [f"{name}/{path}: missing" for path in rendered - present]
    problems += [f"{name}/{path}: extra" for path in present - rendered if not is_result(path)]
    for path in rendered & present:
        if (fresh / path).read_bytes() != (committed / path).read_bytes():
            problems.append(f"{name}/{path}: differs")
    results = (RESULTS_MD, CURVES_PNG, *recorded_runs(ref))
    if ref.fine_tuning:
        results += (FINE_TUNED_PNG,)
    for path in results:
        if path not in present:
            problems.append(f"{name}/{path}: missing (run `python -m generator references sync`)")
    problems += stale_results(committed, ref, sources_digest(fresh))
    return sorted(problems)
