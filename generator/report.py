"""The report of a check: `report.json` for tools and `report.md` for people; shards'
reports merged into one."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from generator.answers import Answer, answer_text
from generator.check import Result, Stage
from generator.folders import require_folder, write_whole

REPORT_FOLDER = "it takes a folder, new or existing, that this user can write on a disk with room"
# What shards must share, by the key reports record it under.
_KINDS = {"trees": "templates (tree hashes)", "commit": "commits", "device": "devices"}


class ReportError(ValueError):
    """Reports that cannot be merged, or a file that is not one; the message is one line."""


def reproduce(answers: Mapping[str, Answer], device: str) -> str:
    """The one command that checks this combination again."""
    sets = " ".join(
        f"--set {shlex.quote(f'{name}={answer_text(value)}')}" for name, value in answers.items()
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
    """Write report.json and report.md into `directory`, both or neither (a full disk:
    FolderError, one line); returns the Markdown one."""
    report = json.dumps(as_json(results, meta), indent=2) + "\n"
    write_whole(directory, {"report.json": report, "report.md": as_markdown(results, meta)})
    return directory / "report.md"


def require_report_folder(directory: Path) -> None:
    """FolderError (one line) unless `directory` can take a report: checked before a check
    starts, so that it cannot fail at its end for want of a place to write."""
    require_folder(directory, "--report", REPORT_FOLDER)


def merge(paths: Sequence[Path], command: str) -> tuple[list[Result], dict[str, Any]]:
    """The results and meta of one report made of the shards' reports (a report.json, or
    the folder holding one), in the order given.

    Refused in one line: a file that is not a report, shards of different templates (their
    `trees`; of different commits for reports made before they recorded trees) or devices,
    and a combination in two shards (overlapping selections). Shards of one template run on
    other commits, days and machines merge."""
    return merge_read([(path, read_report(path)) for path in paths], command)


def merge_read(
    reports: Sequence[tuple[Path, dict[str, Any]]], command: str
) -> tuple[list[Result], dict[str, Any]]:
    """`merge` of reports already read (each with the path it was read from)."""
    if not reports:
        raise ReportError("no reports to merge")
    same = "trees" if all("trees" in report for _, report in reports) else "commit"
    for key in (same, "device"):
        values = sorted({json.dumps(report.get(key), sort_keys=True) for _, report in reports})
        if len(values) > 1:
            raise ReportError(f"the reports are of different {_KINDS[key]} ({'; '.join(values)})")
    results: list[Result] = []
    where: dict[str, Path] = {}
    for path, report in reports:
        for row in report["results"]:
            if row["slug"] in where:
                raise ReportError(f"{row['slug']} is in both {where[row['slug']]} and {path}")
            where[row["slug"]] = path
            stages = [Stage(**stage) for stage in row["stages"]]
            results.append(
                Result(row["slug"], row["answers"], stages, row["notes"], row["log_tail"])
            )
    first = reports[0][1]
    meta = {
        "command": command,
        "commit": first.get("commit"),
        "commits": sorted({str(report.get("commit")) for _, report in reports}),
        "trees": first.get("trees"),
        "device": first["device"],
        "jobs": first["jobs"],
        "server": first.get("server"),
        "steps": first.get("steps"),
        "wall_s": max(report["wall_s"] for _, report in reports),  # the shards run at once
        "cpu_s": round(sum(report.get("cpu_s", 0) for _, report in reports), 1),
        "shards": [report["command"] for _, report in reports],
    }
    return results, meta


def read_report(path: Path) -> dict[str, Any]:
    file = path / "report.json" if path.is_dir() else path
    try:
        report = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ReportError(f"{file}: not a readable report ({error})") from None
    needed = {"command", "device", "jobs", "wall_s", "results"}
    if not isinstance(report, dict) or needed - report.keys():
        raise ReportError(f"{file}: not a report of generator check (it needs {sorted(needed)})")
    return report


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"
