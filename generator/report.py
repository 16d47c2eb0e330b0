"""The report of a check: `report.json` for tools and `report.md` for people."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from generator.answers import Answer
from generator.check import Result


def reproduce(answers: Mapping[str, Answer], device: str) -> str:
    """The one command that checks this combination again."""
    sets = " ".join(
        f"--set {shlex.quote(f'{name}={_text(value)}')}" for name, value in answers.items()
    )
    return f"python -m generator check --device {device} {sets}"


def as_json(results: Sequence[Result], meta: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **meta,
        "passed": sum(r.ok for r in results),
        "failed": sum(not r.ok for r in results),
        "results": [
            {
                "slug": r.slug,
                "answers": r.answers,
                "ok": r.ok,
                "failed_stage": r.failed_stage,
                "seconds": round(r.seconds, 2),
                "stages": [vars(stage) for stage in r.stages],
                "notes": r.notes,
                "log_tail": r.log_tail,
                "reproduce": reproduce(r.answers, meta["device"]),
            }
            for r in results
        ],
    }


def as_markdown(results: Sequence[Result], meta: Mapping[str, Any]) -> str:
    failed = [r for r in results if not r.ok]
    lines = [
        "# generator check",
        "",
        f"`{meta['command']}`: {len(results)} combinations on {meta['device']}, "
        f"{len(results) - len(failed)} passed, {len(failed)} failed, "
        f"in {_duration(meta['wall_s'])} with {meta['jobs']} at a time "
        f"({_duration(meta.get('cpu_s', 0))} of CPU time).",
        "",
        "| combination | result | failing stage | seconds | stages | notes |",
        "|---|---|---|---:|---|---|",
    ]
    for r in results:
        stages = " ".join(stage.name for stage in r.stages)
        lines.append(
            f"| `{r.slug}` | {'pass' if r.ok else '**FAIL**'} | {r.failed_stage or ''} "
            f"| {r.seconds:.1f} | {stages} | {'; '.join(r.notes)} |"
        )
    for r in failed:
        lines += [
            "",
            f"## `{r.slug}`: {r.failed_stage} failed",
            "",
            f"reproduce: `{reproduce(r.answers, meta['device'])}`",
            "",
            "```",
            r.log_tail.replace("```", "'''"),
            "```",
        ]
    return "\n".join(lines) + "\n"


def write_report(directory: Path, results: Sequence[Result], meta: Mapping[str, Any]) -> Path:
    """Write report.json and report.md into `directory`; returns the Markdown one."""
    directory.mkdir(parents=True, exist_ok=True)
    report = as_json(results, meta)
    (directory / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    markdown = directory / "report.md"
    markdown.write_text(as_markdown(results, meta), encoding="utf-8")
    return markdown


def _text(value: Answer) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"
