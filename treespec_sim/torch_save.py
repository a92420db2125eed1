"""A ``torch.save`` file read without torch and without running its code.

A ``torch.save`` file (zip format, torch >= 1.6) is a zip holding a pickle and one member per
tensor storage. :func:`load_torch_save` reads it with a *restricted* unpickler that maps the few
class names the public benchmark logs use to plain containers (``SimpleNamespace`` to
:class:`Record`, tensors to NumPy arrays, ``OrderedDict`` to ``dict``) and refuses every other
global, so no code in a file is ever run. Every tensor is checked against its storage before a
view of it is made, and everything it builds counts against
:data:`~treespec_sim.files.MAX_LOG_BYTES` (``docs/traces.md``, "What the readers guarantee").
"""

from __future__ import annotations

import io
import math
import pickle
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .files import MAX_LOG_BYTES, error_text, human_bytes, open_zip, over_limit
from .validation import is_int

__all__ = ["Record", "load_torch_save"]


class Record:
    """A plain attribute container: what a ``types.SimpleNamespace`` of a log becomes.

    Its attributes are the namespace's (read them as ``rec.acceptance_lengths``, or
    :meth:`as_dict`); it runs no code of the file that held it.
    """

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __repr__(self) -> str:
        return f"Record({', '.join(sorted(self.__dict__))})"


#: ``torch.<Name>Storage`` -> the NumPy dtype of its elements (``bfloat16``: see
#: :func:`_bfloat16`).
_STORAGES = {"DoubleStorage": np.float64, "FloatStorage": np.float32,
             "HalfStorage": np.float16, "BFloat16Storage": "bfloat16",
             "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
             "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}


@dataclass(frozen=True)
class _StorageType:
    name: str


@dataclass(frozen=True)
class _Storage:
    key: str
    data: np.ndarray


def _bfloat16(raw: bytes) -> np.ndarray:
    """bfloat16 bytes as float32 (the upper half of a float32's bits)."""
    u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return u.view(np.float32)


def _ordered_dict(*args: Any) -> dict:
    return dict(*args)


#: The only globals a log may name, and what each becomes (everything else is refused); the
#: tensor rebuilders are the unpickler's own checked method (:meth:`_RestrictedUnpickler.tensor`).
_ALLOWED = {
    ("types", "SimpleNamespace"): Record,
    ("collections", "OrderedDict"): _ordered_dict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
}
_REBUILDERS = {("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_tensor")}


def _index(value: Any, what: str) -> int:
    """A non-negative integer from a pickle (bools and floats refused)."""
    if not is_int(value, numpy=False) or value < 0:
        raise pickle.UnpicklingError(f"{what} {value!r:.40} is not a non-negative integer")
    return value


class _RestrictedUnpickler(pickle.Unpickler):
    """Plain containers only: the globals of :data:`_ALLOWED` and ``torch.<dtype>Storage``
    markers; tensors' storages come from the zip (``persistent_load``), each tensor is checked
    against its storage before it is built, and everything built counts against
    :data:`~treespec_sim.files.MAX_LOG_BYTES`."""

    def __init__(self, file: io.BytesIO, archive: zipfile.ZipFile, prefix: str) -> None:
        super().__init__(file)
        self._archive = archive
        self._prefix = prefix
        self._budget = MAX_LOG_BYTES.get()
        self._used = file.getbuffer().nbytes
        self._storages: dict[str, _Storage] = {}

    def _spend(self, nbytes: int, what: str) -> None:
        self._used += nbytes
        if self._used > self._budget:
            raise pickle.UnpicklingError(
                f"{what} would bring the log's contents to {human_bytes(self._used)}, above "
                f"the {human_bytes(self._budget)} allowed ({MAX_LOG_BYTES.env} raises it)")

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        if (module, name) in _REBUILDERS:
            return self.tensor
        if module == "torch" and name in _STORAGES:
            return _StorageType(name)
        raise pickle.UnpicklingError(f"refuses the global {module}.{name} (a log holds plain "
                                     "containers, numbers and tensors only)")

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], str | int)):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r:.60}")
        kind, key = pid[1].name, str(pid[2])
        numel = _index(pid[4], f"storage {key!r}: element count")
        if key in self._storages:
            return self._storages[key]
        dtype = _STORAGES[kind]
        itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
        name = f"{self._prefix}/data/{key}" if self._prefix else f"data/{key}"
        try:
            info = self._archive.getinfo(name)
        except KeyError:
            raise pickle.UnpicklingError(f"storage {key!r} is not in the archive") from None
        if info.file_size < numel * itemsize:
            raise pickle.UnpicklingError(
                f"storage {key!r} declares {numel} elements of {itemsize} bytes but holds "
                f"{info.file_size} bytes")
        self._spend(numel * itemsize * (2 if dtype == "bfloat16" else 1), f"storage {key!r}")
        with self._archive.open(info) as f:
            raw = f.read(numel * itemsize)
        if len(raw) < numel * itemsize:
            raise pickle.UnpicklingError(f"storage {key!r} is truncated")
        data = _bfloat16(raw) if dtype == "bfloat16" else np.frombuffer(raw, dtype=dtype)
        storage = _Storage(key, data)
        self._storages[key] = storage
        return storage

    def tensor(self, storage: Any, offset: Any, size: Any, stride: Any, *_ignored: Any
               ) -> np.ndarray:
        """A tensor as a NumPy array (a copy of its strided view of the storage), built only
        after its offset, sizes and strides are checked to stay inside the storage."""
        if not isinstance(storage, _Storage):
            raise pickle.UnpicklingError("a tensor without a storage")
        what = f"tensor over storage {storage.key!r}"
        offset = _index(offset, f"{what}: offset")
        if not isinstance(size, tuple | list) or not isinstance(stride, tuple | list) or (
                len(size) != len(stride)) or len(size) > 32:
            raise pickle.UnpicklingError(f"{what}: size {size!r:.60} and stride "
                                         f"{stride!r:.60} are not index tuples of one length")
        size = tuple(_index(s, f"{what}: size") for s in size)
        stride = tuple(_index(s, f"{what}: stride") for s in stride)
        numel = math.prod(size)
        n = storage.data.size
        last = offset + sum((s - 1) * st for s, st in zip(size, stride, strict=True)
                            ) if numel else offset - 1
        if last >= n or offset > n:
            raise pickle.UnpicklingError(
                f"{what}: offset {offset}, size {size!r:.60}, stride {stride!r:.60} reach "
                f"element {max(last, offset)} of a storage of {n}")
        self._spend(numel * storage.data.itemsize, f"{what} of {numel} elements")
        if not size:
            return storage.data[offset].copy()
        item = storage.data.itemsize
        view = np.lib.stride_tricks.as_strided(storage.data[offset:], shape=size,
                                               strides=tuple(s * item for s in stride),
                                               writeable=False)
        return np.array(view)


def load_torch_save(path: Path | str) -> Any:
    """The object a ``torch.save`` file holds, as plain containers, without torch.

    Parameters
    ----------
    path : path
        A zip-format ``torch.save`` file (torch >= 1.6).

    Returns
    -------
    object
        Dicts, lists, numbers, strings, :class:`Record` (for ``types.SimpleNamespace``) and
        NumPy arrays (for tensors).

    Raises
    ------
    ValueError
        Naming the file: not a zip-format ``torch.save`` file; a pickle that names any other
        global (it is refused, never run); a tensor whose offset, sizes or strides leave its
        storage; contents above :data:`~treespec_sim.files.MAX_LOG_BYTES` (the pickle, its
        storages and its tensors together, checked before each is allocated).
    """
    path = Path(path)
    archive = open_zip(path, "log")
    with archive:
        pkl = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
        if not pkl:
            raise ValueError(f"{path}: a zip without data.pkl is not a torch.save file")
        prefix = pkl[0].rsplit("/", 1)[0] if "/" in pkl[0] else ""
        info = archive.getinfo(pkl[0])
        if info.file_size > MAX_LOG_BYTES.get():
            raise over_limit(path, "its pickle", info.file_size, MAX_LOG_BYTES)
        try:
            with archive.open(info) as f:
                blob = f.read(info.file_size)
            return _RestrictedUnpickler(io.BytesIO(blob), archive, prefix).load()
        except (pickle.UnpicklingError, EOFError, KeyError, AttributeError, TypeError,
                ValueError, IndexError, OverflowError, RecursionError, UnicodeDecodeError,
                zipfile.BadZipFile, zlib.error, OSError) as exc:
            raise ValueError(f"{path}: {error_text(exc)}") from None
