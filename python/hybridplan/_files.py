"""Atomic file writes: a failed or interrupted write leaves no partial file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import InvalidArgumentError

__all__ = ["atomic_write"]


def atomic_write(path: Path, data: bytes) -> None:
    """Writes ``data`` to a temporary file beside ``path``, then renames it."""
    path = Path(path)
    if not path.parent.is_dir():
        raise InvalidArgumentError(f"the directory {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
