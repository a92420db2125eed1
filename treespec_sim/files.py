"""Files written whole and read within bounds.

Writing: a killed process never leaves half of a file (the sweep's cells, its ``results.csv``
and ``run.json``, the calibration table, a latency profile and its figure). A file is written
under a temporary name in its own folder, then renamed over the target: a rename within one
file system is atomic, so a reader sees the old file or the new one, never a part. The file
gets the permissions ``open()`` would give it (``mkstemp`` alone gives 0600).

Reading: a file from elsewhere never crashes the process or exhausts its memory. Every reader
checks a file's declared sizes against a named :class:`Limit` before it allocates (text read
whole, a JSON-lines line, an acceptance log's contents, a trace's arrays), each overridable by
an environment variable, and reports a malformed file as one ``ValueError`` naming it.
"""

from __future__ import annotations

import functools
import json
import math
import os
import tempfile
import tomllib
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["LIMITS", "MAX_LINE_BYTES", "MAX_LOG_BYTES", "MAX_TEXT_BYTES", "MAX_TRACE_BYTES",
           "Limit", "NpyMember", "atomic_path", "atomic_write_text", "check_file",
           "default_file_mode", "error_text", "human_bytes", "npz_members", "open_zip",
           "over_limit", "parse_bytes", "parse_json", "read_bytes", "read_json", "read_lines",
           "read_npz",
           "read_npz_member", "read_text", "read_toml"]


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


# ----------------------------------------------------------------------------- reading
# Every file treespec reads may come from elsewhere (a log from another project, a trace
# recorded on another machine, a config from a colleague). The readers below bound what they
# allocate *before* allocating it and turn every malformed file into one ``ValueError`` that
# names the file; ``docs/traces.md`` ("What the readers guarantee") lists what they refuse.


@dataclass(frozen=True)
class Limit:
    """A bound on what one reader may allocate for one file, overridable by an environment
    variable (``TREESPEC_MAX_TRACE_BYTES=64G python -m treespec_sim.sweep --trace big.npz``)."""

    env: str
    default: int
    what: str

    def get(self) -> int:
        """The bound in bytes: the environment variable's value if set, else the default."""
        raw = os.environ.get(self.env)
        if raw is None or not raw.strip():
            return self.default
        return parse_bytes(raw, self.env)


def parse_bytes(text: str, name: str) -> int:
    """``"512M"``, ``"8G"``, ``"1.5T"``, ``"4096"`` as a number of bytes (binary units)."""
    s = str(text).strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(s[-1:], 1)
    try:
        value = float(s[:-1] if scale > 1 else s)
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not a size (a number of bytes, or with K, M, G "
                         "or T)") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}: {text!r} is not a size (a non-negative number of bytes)")
    return int(value * scale)


#: Text read whole: configs (TOML), latency files, regime and run records (JSON).
MAX_TEXT_BYTES = Limit("TREESPEC_MAX_TEXT_BYTES", 64 * 2**20, "a text file read whole")
#: One line of a JSON-lines log.
MAX_LINE_BYTES = Limit("TREESPEC_MAX_LINE_BYTES", 16 * 2**20,
                       "one line of a JSON-lines or text log")
#: Everything an acceptance log's reader builds: its pickle, its tensors' storages and the
#: tensors themselves (``torch.save`` logs), its acceptance lengths (JSON-lines logs).
MAX_LOG_BYTES = Limit("TREESPEC_MAX_LOG_BYTES", 1 * 2**30, "an acceptance log's contents")
#: A trace's arrays, uncompressed (``docs/traces.md``, "Size").
MAX_TRACE_BYTES = Limit("TREESPEC_MAX_TRACE_BYTES", 16 * 2**30, "a trace's arrays")
#: Every limit, for the docs and the tests.
LIMITS = (MAX_TEXT_BYTES, MAX_LINE_BYTES, MAX_LOG_BYTES, MAX_TRACE_BYTES)


def human_bytes(n: int) -> str:
    """``n`` bytes in binary units (``1.5 GiB``)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def over_limit(path: Path | str, what: str, size: int, limit: Limit) -> ValueError:
    """The error for ``what`` of ``path`` needing ``size`` bytes, above ``limit``."""
    return ValueError(f"{path}: {what} would take {human_bytes(size)}, above the "
                      f"{human_bytes(limit.get())} allowed for {limit.what} (set "
                      f"{limit.env} to raise it)")


def check_file(path: Path | str, what: str) -> Path:
    """``path`` as a ``Path`` if it names a regular file, else ``ValueError`` naming ``what``."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{what}: no such file {str(p)!r}")
    if not p.is_file():
        raise ValueError(f"{what}: {str(p)!r} is not a regular file")
    return p


def read_bytes(path: Path | str, what: str, limit: Limit = MAX_TEXT_BYTES) -> bytes:
    """The bytes of a file of at most ``limit`` bytes (checked before reading, and while
    reading: a file that grows, or a device, is cut off at the limit)."""
    p = check_file(path, what)
    cap = limit.get()
    if p.stat().st_size > cap:
        raise over_limit(p, "the file", p.stat().st_size, limit)
    with open(p, "rb") as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise over_limit(p, "the file", len(data), limit)
    return data


def read_text(path: Path | str, what: str, limit: Limit = MAX_TEXT_BYTES) -> str:
    """A UTF-8 text file of at most ``limit`` bytes; binary content is refused, naming the
    offset of the first byte that is not UTF-8."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x})"
                         ) from None


def read_lines(path: Path | str, limit: Limit = MAX_LINE_BYTES) -> Iterator[tuple[int, str]]:
    """A text file's ``(line number, line)`` from 1, read one line at a time (a log may be
    larger than memory), each line at most ``limit`` bytes and UTF-8: one ``ValueError``
    naming the file and the line otherwise."""
    cap = limit.get()
    with open(path, "rb") as f:
        for n, raw in enumerate(iter(lambda: f.readline(cap + 1), b""), start=1):
            if len(raw) > cap:
                raise over_limit(path, f"line {n}", len(raw), limit)
            try:
                yield n, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}: line {n} is not UTF-8 text (byte {exc.start})"
                                 ) from None


def read_json(path: Path | str, what: str, limit: Limit = MAX_TEXT_BYTES) -> Any:
    """A JSON file (:func:`read_text`), its syntax errors named by line and column."""
    return parse_json(read_text(path, what, limit), str(path))


def parse_json(text: str | bytes, where: str) -> Any:
    """``json.loads(text)`` with every failure one ``ValueError`` naming ``where``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}: "
                         f"{exc.msg})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{where}: not UTF-8 text") from None
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deeply") from None


def read_toml(path: Path | str, what: str, limit: Limit = MAX_TEXT_BYTES) -> dict:
    """A TOML file (:func:`read_text`), its syntax errors named by line and column."""
    text = read_text(path, what, limit)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{what}: {path} is not valid TOML ({exc})") from None
    except RecursionError:
        raise ValueError(f"{what}: {path} is not valid TOML (nested too deeply)") from None


@dataclass(frozen=True)
class NpyMember:
    """What an ``.npz`` member's header declares, read before any of its data."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    compressed_size: int
    file_size: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def npz_members(archive: zipfile.ZipFile, path: Path | str, *, kinds: str = "biufc"
                ) -> dict[str, NpyMember]:
    """The header of every array in an opened ``.npz`` (``np.savez`` zip), read without
    reading its data; a member that is not a NumPy array file, or whose dtype is not of
    ``kinds`` (numbers by default; ``"U"`` adds text; never objects), is refused naming it."""
    out: dict[str, NpyMember] = {}
    for info in archive.infolist():
        key = info.filename.removesuffix(".npy")
        if not info.filename.endswith(".npy") or info.is_dir():
            raise ValueError(f"{path}: member {info.filename!r} is not an array (.npy)")
        try:
            with archive.open(info) as f:
                version = np.lib.format.read_magic(f)
                read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                        else np.lib.format.read_array_header_2_0)
                shape, fortran, dtype = read(f)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error,
                RuntimeError, SyntaxError, TypeError) as exc:
            raise ValueError(f"{path}: member {key!r} has no valid array header "
                             f"({error_text(exc)})") from None
        if dtype.hasobject or dtype.kind not in kinds or dtype.fields is not None:
            raise ValueError(f"{path}: member {key!r} has dtype {dtype}, not a plain "
                             f"{'number' if kinds == 'biufc' else 'number or text'} type")
        out[key] = NpyMember(key, tuple(int(s) for s in shape), dtype, bool(fortran),
                             info.compress_size, info.file_size)
    return out


def read_npz_member(archive: zipfile.ZipFile, member: NpyMember, path: Path | str
                    ) -> np.ndarray:
    """The array of one member whose header (:func:`npz_members`) the caller has checked; reads
    exactly the declared bytes (a member that inflates beyond them is never read further)."""
    try:
        with archive.open(member.name + ".npy") as f:
            arr = np.lib.format.read_array(f, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error,
            RuntimeError) as exc:
        raise ValueError(f"{path}: member {member.name!r} is damaged ({error_text(exc)})"
                         ) from None
    if arr.shape != member.shape or arr.dtype != member.dtype:
        raise ValueError(f"{path}: member {member.name!r} changed its shape while read")
    return arr


def read_npz(path: Path | str, what: str, *, limit: Limit = MAX_TRACE_BYTES,
             kinds: str = "biufcU") -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` file, their declared sizes checked against ``limit`` before
    any is read (for files whose arrays no header describes: :func:`treespec_sim.trace.read`
    checks a trace's shapes against its header too)."""
    archive = open_zip(path, what)
    with archive:
        members = npz_members(archive, path, kinds=kinds)
        total = sum(m.nbytes for m in members.values())
        if total > limit.get():
            raise over_limit(path, "its arrays", total, limit)
        return {k: read_npz_member(archive, m, path) for k, m in members.items()}


def open_zip(path: Path | str, what: str) -> zipfile.ZipFile:
    """An opened zip archive, or one ``ValueError`` naming the file and why it is not one."""
    p = check_file(path, what)
    try:
        return zipfile.ZipFile(p)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError,
            NotImplementedError, RuntimeError) as exc:
        raise ValueError(f"{p}: not a zip archive ({error_text(exc)})") from None


def error_text(exc: BaseException) -> str:
    """An exception's message on one line, cut to 200 characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
