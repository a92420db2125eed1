"""Writing files so that a killed process never leaves half of one (the sweep's cells, its
``results.csv`` and ``run.json``, the calibration table, a latency profile and its figure).

A file is written under a temporary name in its own folder, then renamed over the target: a
rename within one file system is atomic, so a reader sees the old file or the new one, never a
part. The file gets the permissions ``open()`` would give it (``mkstemp`` alone gives 0600).
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_path", "atomic_write_text", "default_file_mode"]


@functools.cache
def default_file_mode() -> int:
    """The mode ``open()`` would give a new file: ``0o666`` less the process's umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """A temporary path beside ``path``; renamed over ``path`` when the block ends normally,
    removed when it raises. For writers that want a file name (``savefig``, ``np.save``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path | str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see the module docstring)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
