"""The shape of the code: small modules with one job each (STYLE.md, points 3 and 14)."""

from __future__ import annotations

from generator import REPO_ROOT

MAX_MODULE_LINES = 300


def test_generator_modules_are_at_most_300_lines() -> None:
    sizes = {
        path.relative_to(REPO_ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted((REPO_ROOT / "generator").glob("*.py"))
    }
    too_long = [
        f"{name}: {lines} lines" for name, lines in sizes.items() if lines > MAX_MODULE_LINES
    ]
    assert sizes, "no modules found in generator/"
    assert not too_long, (
        f"generator modules over {MAX_MODULE_LINES} lines (split each by its jobs): "
        + "; ".join(too_long)
    )
