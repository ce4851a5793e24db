"""Owner-only files: everything statetrail writes beside its database is private.

The database, its WAL and the spool hold every span received, so a local account able
to read them would go around the studio's login. Files are created 0600 and
directories 0700 whatever the umask: commands run under `owner_only_umask` (DuckDB
creates its own files), and files an older version left open are tightened.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Final

logger = logging.getLogger(__name__)

FILE_MODE: Final = 0o600
DIRECTORY_MODE: Final = 0o700
# The group and other bits: none of them is kept on anything statetrail creates.
_NOT_OWNER: Final = 0o077


@contextlib.contextmanager
def owner_only_umask() -> Iterator[None]:
    """Create every file and directory owner-only while inside; restore the umask after."""
    previous = os.umask(_NOT_OWNER)
    try:
        yield
    finally:
        os.umask(previous)


def open_private(path: str, flags: int) -> int:
    """An `opener` for open(): a file it creates is 0600 whatever the umask."""
    return os.open(path, flags, FILE_MODE)


def make_private_directory(path: Path) -> None:
    """Create `path` (and missing parents) 0700, or tighten it if it exists."""
    path.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
    tighten(path)


def tighten(path: Path) -> None:
    """Take away group and other access from `path`, if it exists and has any.

    A file the process may not change (someone else's) is left as it is, with
    a warning: refusing to start over it would lock the operator out of their data.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    if mode & _NOT_OWNER:
        try:
            os.chmod(path, stat.S_IMODE(mode) & ~_NOT_OWNER)
        except OSError as exc:
            logger.warning("could not make %s private (mode %o): %s", path, mode & 0o7777, exc)
