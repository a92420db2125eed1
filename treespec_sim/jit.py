"""numba for the package's compiled modules, with its on-disk cache kept in step with their sources.

Every compiled module takes ``njit`` from here, not from numba: importing this module first
drops the cache files of every compiled module if any of their sources changed since the cache
was written (:func:`drop_stale_caches`). numba checks a cached function against its own file's
time stamp only, and a cached function holds the code of every compiled function it calls from
other files: after an edit of ``numerics.py``, the cached builder of ``policies/_dense.py``
would still run the old ``numerics`` code, silently.

The caches dropped are numba's default ones, next to the sources (``__pycache__/*.nbi``,
``*.nbc``), and, where ``NUMBA_CACHE_DIR`` is set, the compiled modules' files in it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numba
from numba import njit

__all__ = ["COMPILED_MODULES", "drop_stale_caches", "machine_lock", "njit", "sources_digest"]

#: The package's modules that compile code with numba, as paths under the package
#: (``tests/sim/test_jit_cache.py`` holds this list to the modules that import ``njit``).
COMPILED_MODULES = ("numerics.py", "rowmass.py", "tree.py", "policies/_dense.py",
                    "synth/class_kernels.py", "verify/traversal.py")

_PACKAGE = Path(__file__).resolve().parent


@contextlib.contextmanager
def machine_lock() -> Iterator[None]:
    """An exclusive lock shared by this machine's processes (none where ``fcntl`` is missing)."""
    try:
        import fcntl
    except ImportError:          # not POSIX: each process compiles or loads for itself
        yield
        return
    path = Path(tempfile.gettempdir()) / f"treespec-numba-{os.getuid()}.lock"
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def sources_digest(package: Path = _PACKAGE, modules: tuple[str, ...] = COMPILED_MODULES
                   ) -> str:
    """SHA-256 over the sources of ``modules`` (paths under ``package``), in their order."""
    digest = hashlib.sha256()
    for name in modules:
        digest.update(name.encode() + b"\0" + (package / name).read_bytes() + b"\0")
    return digest.hexdigest()


def _cache_places(package: Path, modules: tuple[str, ...]
                  ) -> list[tuple[Path, list[tuple[Path, str]]]]:
    """``(stamp file, [(folder, glob pattern)])`` of each place numba may have written
    ``modules``' cache."""
    sources = [package / name for name in modules]
    places = [(package / "__pycache__" / "numba-sources.sha256",
               [(src.parent / "__pycache__", f"{src.stem}.*.nb[ic]") for src in sources])]
    if numba.config.CACHE_DIR:
        # there numba names a source folder's cache folder after the folder's own name
        root = Path(numba.config.CACHE_DIR)
        key = hashlib.sha256(str(package).encode()).hexdigest()[:16]
        places.append((root / f"{package.name}-{key}.sources.sha256",
                       [(root, f"{src.parent.name}_*/{src.stem}.*.nb[ic]") for src in sources]))
    return places


def _current(stamp: Path, digest: str) -> bool:
    try:
        return stamp.read_text() == digest
    except OSError:
        return False


def drop_stale_caches(package: Path = _PACKAGE, modules: tuple[str, ...] = COMPILED_MODULES
                      ) -> int:
    """Remove the numba cache files of ``modules`` (paths under ``package``) wherever any of
    their sources changed since the cache was written (a stamp of :func:`sources_digest` next
    to the cache); returns how many went. Under :func:`machine_lock`: processes starting
    together drop them once. A place that cannot be written is left alone (numba cannot have
    written there either)."""
    digest = sources_digest(package, modules)
    places = _cache_places(package, modules)
    if all(_current(stamp, digest) for stamp, _ in places):
        return 0                 # the usual case: no lock taken
    removed = 0
    with machine_lock():
        for stamp, patterns in places:
            try:
                if _current(stamp, digest):
                    continue
                for folder, pattern in patterns:
                    for f in folder.glob(pattern):
                        f.unlink(missing_ok=True)
                        removed += 1
                stamp.parent.mkdir(parents=True, exist_ok=True)
                stamp.write_text(digest)
            except OSError:
                continue
    return removed


drop_stale_caches()
