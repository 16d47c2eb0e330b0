"""Image files: decoded with one error for every way a file can fail, and checked before
training, so that a bad file is found in one line rather than in a loader worker's traceback.
"""

import logging
import os
from collections import Counter
from pathlib import Path

from PIL import Image
from tqdm import tqdm

from .config import ConfigError
from .loaders import DataError

# A folder of at most this many images is decoded in full before training (a few seconds a
# thousand); a larger one has each file's header read, and an image that fails to decode
# later stops the run in one line that names it.
FULL_CHECK_IMAGES = 20_000
# What PIL raises for a file it cannot find, identify, parse or decode.
DECODE_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)

log = logging.getLogger(__name__.partition(".")[0])


def load_image(path: Path | str) -> Image.Image:
    """The image at `path`, decoded; a file PIL cannot decode is a DataError naming it."""
    try:
        with Image.open(path) as image:
            image.load()  # the pixels, read now: the file closes at the end of this block
            return image
    except DECODE_ERRORS as error:
        raise DataError(f"'{path}' cannot be decoded ({error}): remove or re-save it") from None


def refuse_names_not_utf8(root: Path, paths: list[Path]) -> None:
    """A one-line ConfigError naming the first of `paths` (under `root`) whose name holds
    bytes that are not UTF-8, shown escaped (\\xe9). Python reads such a name with stand-ins
    for those bytes that cannot be encoded: class names are saved with the model as JSON, and
    file names are hashed into the fingerprint and printed."""
    for path in paths:
        try:
            str(path.relative_to(root)).encode("utf-8")
        except UnicodeEncodeError as error:
            byte = ord(error.object[error.start]) - 0xDC00  # surrogateescape's stand-in
            shown = os.fsencode(path).decode("utf-8", "backslashreplace")
            raise ConfigError(
                f"--data_dir: '{shown}': its name is not UTF-8 (byte 0x{byte:02x}); rename it: "
                "class and file names must be UTF-8 text (class names are saved with the model)"
            ) from None


def readable(paths: list[Path], skip: bool) -> list[int]:
    """The indices of the files PIL can read; any other is refused, or skipped with a warning
    that counts them (skip_bad_files)."""
    bad = _unreadable(paths)
    if not bad:
        return list(range(len(paths)))
    first = next(iter(bad))
    count, example = f"{len(bad)} of {len(paths)} files", f"(the first: '{first}', {bad[first]})"
    if not skip:
        raise DataError(
            f"{count} cannot be read as images {example}: remove or re-save them, or add "
            "--skip_bad_files true to train without them"
        )
    log.warning("skipping %s that cannot be read as images %s", count, example)
    return [index for index, path in enumerate(paths) if path not in bad]


def describe_files(paths: list[Path]) -> list[str]:
    """The data command's lines on image files: their sizes and modes, from their headers."""
    sizes, modes = set(), Counter()
    for path in paths:
        with Image.open(path) as image:
            sizes.add(image.size)
            modes[image.mode] += 1
    shown = [f"{width}x{height}" for width, height in sorted(sizes, key=lambda s: s[0] * s[1])]
    size_range = f"all {shown[0]}" if len(shown) == 1 else f"{shown[0]} to {shown[-1]}"
    mode_counts = ", ".join(f"{mode} {count}" for mode, count in modes.most_common())
    return [f"image files: {len(paths)}, {size_range}, modes {mode_counts}"]


def _unreadable(paths: list[Path]) -> dict[Path, str]:
    """Each file PIL cannot open, or, of up to FULL_CHECK_IMAGES files, fully decode, with
    PIL's reason."""
    decode = len(paths) <= FULL_CHECK_IMAGES
    problems = {}
    # A bar on a terminal, for folders that take a while.
    for path in tqdm(paths, "checking images", disable=len(paths) < 2000 or None, leave=False):
        try:
            with Image.open(path) as image:
                if decode:
                    image.load()
        except DECODE_ERRORS as error:
            problems[path] = str(error) or type(error).__name__
    return problems
