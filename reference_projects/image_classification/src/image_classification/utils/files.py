"""Files a run writes whole (checkpoints, config.yaml, run.json): atomically, a full disk
said in one line, and checkpoints with a checksum verified before they are read."""

import contextlib
import errno
import json
import os
import re
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from .errors import UserError

# errno of a write that found no room: on the device, in the user's quota, under the size limit.
NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}

# A checkpoint is the zip archive torch.save writes, with the CRC-32 of those bytes as the
# archive's comment, which zip readers (torch.load's among them) skip. The CRC-32s torch
# keeps of each record leave the archive's directory unchecked, where one damaged byte can
# make torch.load read a tensor from the wrong place without an error.
_CHECKSUM = re.compile(rb"crc32=([0-9a-f]{8})")
_CHECKSUM_SIZE = 14  # bytes of the comment above
_END_RECORD = b"PK\x05\x06"  # the archive's last 22 bytes: its last 2, the comment's length
_CHUNK = 2**22  # bytes read at a time to verify a checksum


class DiskFull(UserError, OSError):
    """A write that found no space left; the message names the file and what to do."""


def disk_full(path: Path | str, error: OSError) -> DiskFull:
    """The error of a write to `path` that found no room (`error.errno` in NO_SPACE)."""
    return DiskFull(
        f"no space left writing '{path}' ({error.strerror}): free space and run the same "
        "command again"
    )


def atomic_write(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Write to a temporary file beside `path`, fsync, then rename over it.

    A crash at any moment leaves either the old file or the new one, never a partial one:
    os.replace is atomic on POSIX and Windows, and it replaces without unlinking first.
    Whatever stops the write (an error, a full disk, Ctrl-C), the temporary file is removed
    and the error raised again; one for lack of space becomes DiskFull, which says so.
    """
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with open(temporary, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        cause = _write_error(error)
        if isinstance(cause, OSError) and cause.errno in NO_SPACE:
            raise disk_full(path, cause) from cause
        if cause is not error and not isinstance(cause, Exception):
            raise cause from None  # Ctrl-C, not the RuntimeError torch.save made of it
        raise
    if hasattr(os, "O_DIRECTORY"):  # make the rename itself durable
        descriptor = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def write_json(path: Path, content: Any, allow_nan: bool = True) -> None:
    """`content` as indented JSON, atomically (allow_nan=False: strict JSON, which refuses
    to write Infinity or NaN, as other readers would refuse to read them)."""
    text = json.dumps(content, indent=2, allow_nan=allow_nan) + "\n"
    atomic_write(path, lambda file: file.write(text.encode()))


def _write_error(error: BaseException) -> BaseException:
    """The error of the file's own write: torch.save reports one as a RuntimeError
    ("unexpected pos") raised while handling it, which never says why."""
    while isinstance(error, RuntimeError) and error.__context__ is not None:
        error = error.__context__
    return error


def with_checksum(save: Callable[[IO[bytes]], Any], file: IO[bytes]) -> None:
    """`save` a zip archive to `file` (torch.save), then the CRC-32 of its bytes as the
    archive's comment: the archive ends with the comment's length, which `save` left 0."""
    summed = _Checksummed(file)
    save(summed)
    assert summed.tail.startswith(_END_RECORD) and summed.tail.endswith(b"\0\0"), summed.tail
    file.seek(-2, os.SEEK_END)
    file.write(struct.pack("<H", _CHECKSUM_SIZE) + b"crc32=%08x" % summed.crc)


def archive_damage(path: Path) -> str | None:
    """What is damaged in the archive at `path`, or None where its bytes are those written.

    One that ends with its checksum (with_checksum) is read once to verify it; one without
    (a checkpoint before format 5, or one torch.save wrote directly) has each record's
    CRC-32 checked instead. Raises where the file is no zip archive at all.
    """
    with open(path, "rb") as file:
        size = file.seek(0, os.SEEK_END)
        file.seek(max(size - 22 - _CHECKSUM_SIZE, 0))
        end = file.read()  # the archive's end record and comment
        written = _CHECKSUM.fullmatch(end[22:])
        if not end.startswith(_END_RECORD) or end[20:22] != struct.pack("<H", _CHECKSUM_SIZE):
            written = None
        if written and _saved_crc32(file, size) == int(written[1], 16):
            return None
    with zipfile.ZipFile(path) as archive:
        record = archive.testzip()  # names the damaged record, where the damage is in one
    if record is not None:
        return f"checksum of {record} does not match"
    return "the file's checksum does not match" if written else None


class _Checksummed:
    """A file being written that keeps the CRC-32 of the bytes written, and the last 22."""

    def __init__(self, file: IO[bytes]):
        self.file, self.crc, self.tail = file, 0, b""

    def write(self, data: bytes) -> int:
        self.crc = zlib.crc32(data, self.crc)
        self.tail = (self.tail + bytes(data[-22:]))[-22:]
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()


def _crc32(file: IO[bytes], size: int) -> int:
    """The CRC-32 of the file's first `size` bytes. Read into one buffer: a checkpoint is
    never in memory twice."""
    file.seek(0)
    buffer, crc = memoryview(bytearray(_CHUNK)), 0
    while size > 0 and (read := file.readinto(buffer[: min(_CHUNK, size)])):
        crc, size = zlib.crc32(buffer[:read], crc), size - read
    return crc


def _saved_crc32(file: IO[bytes], size: int) -> int:
    """The CRC-32 of the bytes the archive was saved as: all but its comment and the
    comment's length, then that length as saved (0)."""
    return zlib.crc32(b"\0\0", _crc32(file, size - 2 - _CHECKSUM_SIZE))
