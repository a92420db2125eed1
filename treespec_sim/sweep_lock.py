"""The ``--out`` lock: one running sweep per output folder (a PID file with an ``flock`` where
the platform has one; a stale lock of a dead process is taken over)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

from .files import default_file_mode

try:  # POSIX: the --out lock is an flock, released by the kernel if its holder dies
    import fcntl
except ImportError:  # pragma: no cover - elsewhere the lock file's pid decides alone
    fcntl = None


__all__ = ["LOCK_NAME", "out_lock"]


# --------------------------------------------------------------------------- the --out lock
#: The file in ``--out`` that marks it as in use by a running sweep: its pid, host, start.
LOCK_NAME = ".sweep.lock"
#: Folders whose lock this process holds -> nesting depth (``main`` and ``run_plan`` both
#: take it; the inner one is a no-op).
_HELD: dict[Path, int] = {}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except (OSError, OverflowError):
        return False
    return True


def _read_lock(fd: int) -> dict:
    """The holder a lock file names (``{}`` if it is empty; ``{"unreadable": text}`` if it is
    not the JSON a sweep writes)."""
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 65536).decode(errors="replace")
    if not text.strip():
        return {}
    try:
        holder = json.loads(text)
        if isinstance(holder, dict) and isinstance(holder.get("pid"), int):
            return holder
    except ValueError:
        pass
    return {"unreadable": text[:80]}


def _holder(holder: dict) -> str:
    if "pid" not in holder:  # caught between its holder's lock and its write
        return "a process that is writing its lock file"
    return (f"pid {holder['pid']} on host {holder.get('host', '?')}, started "
            f"{holder.get('started', '?')}")


def _take_lock(path: Path) -> int:
    """Open and lock ``path`` for this process; return its descriptor (see :func:`out_lock`)."""
    here = socket.gethostname()
    for _ in range(10):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, default_file_mode())
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise ValueError(
                        f"--out: {path.parent} is in use by a running sweep "
                        f"({_holder(_read_lock(fd))}; lock file {path}); wait for it to "
                        "finish, or name another folder") from None
                except OSError:  # no flock on this file system (some network mounts)
                    pass  # the pid in the file decides alone
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # its holder removed it between our open and our lock: again
                os.close(fd)
                continue
            holder = _read_lock(fd)
            pid = holder.get("pid")
            if isinstance(pid, int) and pid != os.getpid():
                if holder.get("host") != here:
                    raise ValueError(
                        f"--out: {path.parent} is locked by another sweep ({_holder(holder)}), "
                        f"which cannot be checked from host {here}; if it has ended, delete "
                        f"{path}, or name another folder")
                if _pid_alive(pid):
                    raise ValueError(
                        f"--out: {path.parent} is in use by a running sweep ({_holder(holder)}; "
                        f"lock file {path}); wait for it to finish, or name another folder "
                        "(if that process is no sweep, delete the lock file)")
            if holder:
                what = (f"the lock of {_holder(holder)}, which is no longer running"
                        if "pid" in holder
                        else f"an unreadable lock ({holder['unreadable']!r})")
                print(f"note: --out: {path} held {what}: a stale lock, taken over",
                      file=sys.stderr)
            mine = {"pid": os.getpid(), "host": here,
                    "started": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                    "command": sys.argv}
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, json.dumps(mine).encode())
            return fd
        except BaseException:
            os.close(fd)
            raise
    raise ValueError(f"--out: could not take the lock {path} (it kept being replaced)")


def _drop_lock(path: Path, fd: int) -> None:
    try:
        if os.stat(path).st_ino == os.fstat(fd).st_ino:  # still ours: remove it, then unlock
            path.unlink()
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def out_lock(out: Path) -> Iterator[None]:
    """Hold ``out`` for this sweep while the block runs.

    A lock file ``out/.sweep.lock`` names this process (pid, host, start time) and carries an
    exclusive ``flock`` (released by the kernel if the process dies). A folder held by a
    running sweep is refused with a ``ValueError`` naming its pid and host; a lock whose
    process is gone (a killed sweep) is stale: it is named on stderr and taken over. Nested
    use in one process is a no-op. The folder is created if needed, and removed again if the
    block leaves it empty.

    Raises
    ------
    ValueError
        ``out`` is a file, or another sweep holds it (or one on another host, which cannot
        be checked from here).
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out: {out} is a file, not a folder; name a new folder")
    key = out.resolve()
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_NAME
    try:
        fd = _take_lock(path)
    except BaseException:
        if created:
            remove_if_empty(out)
        raise
    _HELD[key] = 1
    try:
        yield
    finally:
        del _HELD[key]
        _drop_lock(path, fd)
        if created:
            remove_if_empty(out)


def remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.rmdir()  # only succeeds on an empty folder


