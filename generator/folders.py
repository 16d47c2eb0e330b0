"""The folders the commands write into: checked before any work starts, and written whole.

A folder a command is told to write into (check's and merge's --report, render's
destination) is checked before anything renders or runs, so that a check of hours cannot
fail at its end for want of a place to put its report; what is wrong is one line
(FolderError), and nothing is written. Files are written whole or not at all: each to a
temporary file in the same folder, every one of them before any is renamed into place, so a
full disk leaves neither a partial file nor half a report.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

# Less than this free on the folder's disk counts as full: a report of the whole matrix
# (960 combinations) takes about 2 MB, and a loaded project renders to under 1 MB.
MIN_FREE_BYTES = 4 * 1024 * 1024


class FolderError(ValueError):
    """A folder that can't take what a command writes, or a write that failed; one line."""


def folder_problem(path: Path, *, empty: bool = False) -> str | None:
    """Why `path` can't be the folder a command writes into, or None when it can.

    It is a folder (with `empty`, one that holds nothing) or does not exist yet, and then the
    nearest folder above it exists and is where the command makes it. Either way this user
    can write there and its disk is not full. Nothing is written to find out.
    """
    try:
        if path.is_dir():
            if empty and any(path.iterdir()):
                return "is a folder that holds files"
            existing = path
        elif path.exists() or path.is_symlink():
            return "is a file" if path.exists() else "is a broken symbolic link"
        else:
            existing = next(p for p in path.absolute().parents if p.exists())
            if not existing.is_dir():
                return f"is under {existing}, which is a file"
        writable = os.access(existing, os.W_OK | os.X_OK)
        free = shutil.disk_usage(existing).free
    except OSError as error:  # a folder this user may not list, a symbolic link loop
        return f"can't be read ({error.strerror})"
    where = "" if existing == path else f"would be made in {existing}, which "
    if not writable:
        return f"{where}is not writable by this user"
    if free < MIN_FREE_BYTES:
        return f"{where}is on a full disk ({free / 1e6:.1f} MB free)"
    return None


def require_folder(path: Path, flag: str, allowed: str, *, empty: bool = False) -> None:
    """FolderError naming `flag`, what is wrong with `path` and what is `allowed`."""
    problem = folder_problem(Path(path), empty=empty)
    if problem:
        raise FolderError(f"{flag} {path} {problem}; {allowed}")


def write_whole(directory: Path, texts: Mapping[str, str]) -> None:
    """Write each `texts` name -> text into `directory` (made if missing), all or none.

    Every file goes to a temporary file in `directory` first, flushed to disk; only when all
    are written are they renamed over their names. A failure (a full disk) removes the
    temporary files, and the folders made for them, and raises FolderError in one line.
    """
    directory = Path(directory)
    made = [p for p in (directory, *directory.absolute().parents) if not p.exists()]
    temporary: dict[Path, Path] = {}
    name = ""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            part = directory / f".{name}.{os.getpid()}.tmp"
            temporary[part] = directory / name
            # The mode a plain open gives (0o666 less the umask), unlike mkstemp's 0o600.
            descriptor = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            with open(descriptor, "w", encoding="utf-8") as file:
                file.write(text)
                file.flush()
                os.fsync(file.fileno())
        for part, final in temporary.items():
            os.replace(part, final)
    except OSError as error:
        for part in temporary:
            part.unlink(missing_ok=True)
        for folder in made:  # deepest first; a folder something else wrote into stays
            try:
                folder.rmdir()
            except OSError:
                break
        reason = error.strerror or str(error)
        raise FolderError(f"could not write {directory / name}: {reason}") from None
