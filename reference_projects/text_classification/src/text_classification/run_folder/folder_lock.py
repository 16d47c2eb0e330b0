"""One run per output_dir: a run holds an exclusive lock on output_dir/.lock from its first
write to its end, and a second run into the folder is refused, naming the process that
holds it. The lock is the operating system's (a POSIX record lock): it ends with the
process, however the process ends, so a killed run never leaves a stale one, and the
processes a run starts (loader workers) do not inherit it."""

import errno
import fcntl
import os
import socket
from pathlib import Path
from typing import IO

from ..config import ConfigError

LOCK_FILE = ".lock"
_CLAIMED: dict[Path, IO[str]] = {}  # the run folders this process holds, with their lock


def refuse_if_in_use(output_dir: Path) -> None:
    """Refuse, before this run reads or writes anything there, a folder another run holds
    (claim_run_folder); the lock is tried, not kept."""
    # Closing a file ends every lock this process holds on it: never one of its own
    if output_dir.resolve() in _CLAIMED or not (output_dir / LOCK_FILE).is_file():
        return
    try:
        lock = open(output_dir / LOCK_FILE, "a+")  # noqa: SIM115 (closed by _lock or below)
    except OSError:  # not writable: start_run_folder says so
        return
    _lock(lock, output_dir)
    lock.close()


def claim_run_folder(output_dir: Path) -> None:
    """The lock on `output_dir`, an existing folder, held until release_run_folder or the
    process's end."""
    key = output_dir.resolve()
    if key in _CLAIMED:  # an earlier run in this process (one that raised) holds it
        return
    lock = open(output_dir / LOCK_FILE, "a+")  # noqa: SIM115 (held until the run ends)
    _lock(lock, output_dir)
    lock.truncate(0)
    lock.write(f"{os.getpid()} on {socket.gethostname()}\n")
    lock.flush()
    _CLAIMED[key] = lock


def _lock(lock: IO[str], output_dir: Path) -> None:
    try:
        fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno not in (errno.EACCES, errno.EAGAIN):
            raise
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        lock.close()
        raise ConfigError(
            f"--output_dir '{output_dir}' is in use by another run (process {holder}): "
            "wait for it to end, or give this run another --output_dir"
        ) from None


def release_run_folder(output_dir: Path) -> None:
    """The end of the run: another may use the folder."""
    lock = _CLAIMED.pop(output_dir.resolve(), None)
    if lock is not None:
        lock.close()
