"""Render one combination of answers through copier's Python API."""

from __future__ import annotations

import contextlib
import copy
import shutil
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

import copier
import jinja2
import yaml
from copier import _main as copier_main
from copier import _template as copier_template
from copier._types import LazyDict, Phase
from copier.errors import DirtyLocalWarning

from generator import REPO_ROOT
from generator.answers import Answer
from generator.folders import require_folder

ANSWERS_FILE = ".copier-answers.yml"
# What copier reads besides copier.yml: the rendered tree, and the partials it imports
# (copier's Jinja loader is rooted at the template repository, beside template/).
TEMPLATE_FOLDERS = ("template", "includes")


def render(answers: Mapping[str, Answer], dest: Path, *, template: Path = REPO_ROOT) -> Path:
    """Render `template` into `dest` with `answers` (defaults for the rest) and return `dest`.

    `dest` is a new or empty folder; anything else is refused (FolderError, one line) before
    copier writes a file.

    `vcs_ref="HEAD"` makes copier render the working tree, uncommitted changes included;
    without it copier would check out the newest tag and test a release instead of the change.
    """
    dest = Path(dest)
    require_folder(dest, "destination", "render writes into a new or empty folder", empty=True)
    with warnings.catch_warnings():
        # Uncommitted template changes are what a developer renders on purpose.
        warnings.simplefilter("ignore", DirtyLocalWarning)
        copier.run_copy(
            str(template),
            str(dest),
            data=dict(answers),
            vcs_ref="HEAD",
            defaults=True,
            unsafe=False,
            quiet=True,
        )
    return dest


def template_copy(dest: Path, template: Path = REPO_ROOT) -> Path:
    """`template`'s copier.yml, template/ and includes/ as they are now, in a plain folder.

    Rendering from the copy renders exactly what `render(answers, dest)` renders from the
    working tree, apart from the answers file's `_commit` (a folder outside git has no commit
    to record), and copier then reads the folder in place instead of cloning a repository
    for each render: for code that renders hundreds of combinations.
    """
    dest = Path(dest)
    dest.mkdir(parents=True)
    shutil.copy2(template / "copier.yml", dest / "copier.yml")
    for folder in TEMPLATE_FOLDERS:
        shutil.copytree(template / folder, dest / folder, ignore=_IGNORED)
    return dest


_IGNORED = shutil.ignore_patterns("__pycache__", "*.py[co]")


def package_of(project: Path) -> str:
    """The import name of a rendered project, as its answers file records it."""
    answers = yaml.safe_load((Path(project) / ANSWERS_FILE).read_text(encoding="utf-8"))
    return answers["package_name"]


@contextlib.contextmanager
def many_renders() -> Iterator[None]:
    """Within it, renders skip work whose result is known, for code that renders hundreds of
    combinations one at a time; what they write is the same.

    - A template text compiled before reuses its compiled code. Copier builds a new Jinja
      environment for each render and compiles every file and path in it again: most of a
      render's time. The code depends only on the text and on the environment's syntax
      settings, which one template keeps, so it is what Jinja's own bytecode cache stores.
    - copier.yml is parsed once (unless it includes other files): copier reads it with
      PyYAML's pure-Python loader for each render.
    - The Jinja context of the render phase is built once per render: copier builds it again
      for each part of each path and each file, from answers that no longer change.
    - Copier asks git, for each file it writes, whether the destination's index needs the
      file's executable bit (two git processes per file). Outside a git repository there is
      no index, so it is not asked.
    """
    compile_ = jinja2.Environment.compile
    sync_bit = copier_main.Worker._sync_git_index_executable_bit
    load_config = copier_template.load_template_config
    render_context = copier_main.Worker._render_context
    cache: dict[tuple, object] = {}
    configs: dict[str, dict] = {}

    def compile_cached(env, source, name=None, filename=None, raw=False, defer_init=False):
        syntax = (type(env), env.lexer, tuple(sorted(env.extensions)))
        key = (syntax, source, name, filename, raw, defer_init)
        if key not in cache:
            cache[key] = compile_(env, source, name, filename, raw, defer_init)
        return cache[key]

    def load_config_once(conf_path, quiet=False):
        text = Path(conf_path).read_text(encoding="utf-8")
        if "!include" in text:
            return load_config(conf_path, quiet)
        if text not in configs:
            configs[text] = load_config(conf_path, quiet)
        return copy.deepcopy(configs[text])  # copier may change what it is given

    def render_context_once(worker):
        if Phase.current() != Phase.RENDER:  # answers may still change while questions run
            return render_context(worker)
        known = vars(worker).setdefault("_context_of_its_render", {})
        if not known:
            known.update(render_context(worker))
        # A copy, as copier's is new each time: it sets _copier_conf's answers_file in one.
        conf = known["_copier_conf"]
        lazy = LazyDict({key: (lambda key=key: conf[key]) for key in conf})
        return known | {"_copier_conf": lazy}

    def sync_bit_in_repositories(worker, dst_relpath, src_mode):
        destination = Path(worker.subproject.local_abspath).resolve()
        if any((folder / ".git").exists() for folder in (destination, *destination.parents)):
            sync_bit(worker, dst_relpath, src_mode)

    jinja2.Environment.compile = compile_cached
    copier_template.load_template_config = load_config_once
    copier_main.Worker._render_context = render_context_once
    copier_main.Worker._sync_git_index_executable_bit = sync_bit_in_repositories
    try:
        yield
    finally:
        jinja2.Environment.compile = compile_
        copier_template.load_template_config = load_config
        copier_main.Worker._render_context = render_context
        copier_main.Worker._sync_git_index_executable_bit = sync_bit
