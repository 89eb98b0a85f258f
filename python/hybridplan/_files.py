"""Output files: checked before the work, written all or none, atomically.

- :func:`check_outputs` tells, before any work starts, whether every output
  path can be written (its directory exists and is writable, a file path is
  not a directory, a report directory is not a file), so that a command never
  fails after minutes of tracing or planning, or after writing half of its
  outputs.
- :func:`write_all` writes several files all or none: every file goes to a
  temporary file beside its destination first; only when all are written are
  they renamed into place (a rename within a directory does not fail for want
  of space), and on any error the temporaries are removed. Missing directories
  (a new report directory) are made first and removed again on error, so a
  failed command leaves no empty directory behind.
- Files get the mode an ordinary ``open(path, "w")`` would give them: the
  existing file's mode when overwriting, else ``0o666`` less the umask
  (``mkstemp`` alone would make them ``0o600``).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from .errors import InvalidArgumentError

__all__ = ["atomic_write", "check_outputs", "write_all"]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(path: Path) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return 0o666 & ~_umask()


def check_outputs(
    files: Iterable[str | os.PathLike] = (),
    dirs: Iterable[str | os.PathLike] = (),
    inputs: Iterable[str | os.PathLike] = (),
    within: Iterable[str | os.PathLike] = (),
) -> None:
    """Raises :class:`InvalidArgumentError` unless every file in ``files`` and every
    directory in ``dirs`` (created later if missing) can be written, and no two files
    written (``files`` and ``within``, the files to be written into ``dirs``) are one
    file, or one of the ``inputs`` (files read, which a write would replace)."""
    seen: dict[tuple[int, int] | str, Path] = {}
    read = {_identity(i): Path(i) for i in inputs if i is not None}

    def once(path: Path) -> None:
        key = _identity(path)
        if key in seen:
            raise InvalidArgumentError(
                f"the outputs {seen[key]} and {path} are one file: name a file for each"
            )
        if key in read:
            raise InvalidArgumentError(
                f"the output {path} is the input {read[key]}: name another file"
            )
        seen[key] = path

    for f in files:
        path = Path(f)
        if path.is_dir():
            raise InvalidArgumentError(f"the output {path} is a directory: name a file")
        _writable_dir(path.parent if str(path.parent) else Path("."), f"the output {path}")
        once(path)
    for f in within:
        once(Path(f))
    for d in dirs:
        path = Path(d)
        if path.exists() and not path.is_dir():
            raise InvalidArgumentError(f"the report directory {path} is a file: name a directory")
        existing = path
        while not existing.exists():
            existing = existing.parent
        _writable_dir(existing, f"the report directory {path}")


def _identity(path: str | os.PathLike) -> tuple[int, int] | str:
    """What names one file: (device, inode) of an existing file (a hard link, or a name
    the file system folds, is the same file), else the resolved path."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return os.path.realpath(path)
    return (st.st_dev, st.st_ino)


def _writable_dir(d: Path, what: str) -> None:
    if d.exists() and not d.is_dir():
        raise InvalidArgumentError(f"{what}: {d} is a file, not a directory")
    if not d.is_dir():
        raise InvalidArgumentError(f"{what}: the directory {d} does not exist")
    if not os.access(d, os.W_OK | os.X_OK):
        raise InvalidArgumentError(f"{what}: the directory {d} is not writable")


def write_all(files: Mapping[Path, bytes]) -> None:
    """Writes every ``path: data`` pair, all or none (see the module docstring)."""
    temps: list[tuple[str, Path]] = []
    made: list[Path] = []  # directories this call created, parents first
    current = None  # the file being written: an error names it, not its temporary
    try:
        for path, data in files.items():
            path = current = Path(path)
            made.extend(_make_parents(path.parent))
            mode = _mode_for(path)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            temps.append((tmp, path))
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), mode)
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        for tmp, path in temps:
            current = path
            os.replace(tmp, path)
    except OSError as e:
        _undo(temps, made)
        where = current or e.filename or ", ".join(str(p) for p in files)
        raise InvalidArgumentError(f"cannot write {where}: {e.strerror or e}") from None
    except BaseException:
        _undo(temps, made)
        raise


def _make_parents(d: Path) -> list[Path]:
    """Makes ``d`` and its missing parents; returns those it made, outermost first."""
    missing: list[Path] = []
    while not d.is_dir():
        if d.exists():
            raise InvalidArgumentError(f"{d} is a file, not a directory")
        missing.append(d)
        d = d.parent
    missing.reverse()
    for m in missing:
        m.mkdir()
    return missing


def _undo(temps: list[tuple[str, Path]], made: list[Path]) -> None:
    """Removes the temporaries and, innermost first, the directories made for them."""
    for tmp, _ in temps:
        Path(tmp).unlink(missing_ok=True)
    for d in reversed(made):
        try:
            d.rmdir()
        except OSError:
            pass  # not empty: something else wrote there meanwhile


def atomic_write(path: Path, data: bytes) -> None:
    """Writes ``data`` to a temporary file beside ``path``, then renames it."""
    write_all({Path(path): data})
