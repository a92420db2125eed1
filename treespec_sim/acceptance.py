r"""Public per-round logs: read their acceptance lengths, hold them against a regime, fit one.

The public speculative-decoding tools keep, per decoded round, how many tokens the round
committed, but not the probabilities a trace keeps (``docs/traces.md``); what they keep is
enough to compare a run's *acceptance-length histogram* with a regime's, and to fit a regime
to it. The formats read here (``docs/traces.md``, "Public logs", documents each field;
fixtures written from them under ``tests/fixtures/logs/``):

``benchmark.py --save-path FILE.pt`` (DDTree, TEV, CaDDTree's ``benchmark_caddtree.py``)
    A ``torch.save`` of ``{"responses": [{method_key: result, ...}, ...], "block_size": ...,
    "args": {...}}``, each result a ``types.SimpleNamespace`` with ``acceptance_lengths`` (the
    tokens each round committed, the bonus token counted: ``1 ..`` block size), timings and
    token ids; method keys ``baseline`` (autoregressive), ``dflash`` (the chain),
    ``ddtree_tb<B>`` (DDTree at budget ``B``), ``caddtree``.
CaDDTree's ``--save-tree-traces``
    The same file, its ``caddtree`` results with ``round_trees``: per round ``budget``,
    ``accepted_indices`` (the root first), ``node_token_ids``, ``node_depths``, ``parents``.
JetSpec's ``.jsonl``
    One JSON object per response: ``accept_lengths`` (or ``acceptance_lengths``), optionally
    ``tree_sizes`` per round, ``sample``, ``num_tokens``, ``decode_time_s``, ...

A ``torch.save`` file is a zip holding a pickle; it is read by a *restricted* unpickler
(:func:`load_torch_save`) that maps the few class names these files use to plain containers
(``SimpleNamespace`` to :class:`Record`, tensors to NumPy arrays, ``OrderedDict`` to ``dict``)
and refuses every other global, so no code in a file is ever run; torch is not needed.

:func:`regime_distribution` is a regime's exact acceptance-length law for the log's method:
under rule ``follow`` a round's accepted path ends at depth ``d`` with the exit mass at depth
``d`` (:attr:`treespec_sim.engine.Round.exits`), so ``P(tau = d + 1)`` is exact per context and
its mean over contexts is the regime's histogram (no sampling). :func:`compare` sets the two
side by side (total variation, the largest CDF gap, the means with their intervals), and
:func:`fit_log` fits a regime's knobs to the log's whole histogram (a Cramér-von Mises distance
between the two CDFs, minimised by Nelder-Mead on common random numbers), not only its mean;
``python -m treespec_sim.calibrate --from-log FILE`` runs it.

Command line::

    python -m treespec_sim.acceptance show FILE
    python -m treespec_sim.acceptance compare FILE --regime math500 --out runs/cmp
    python -m treespec_sim.acceptance fit FILE --base math500 --out fitted.json
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import pickle
import re
import sys
import zipfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .cli import OneLineParser, add_debug, add_seed, positive_int, run_subcommand, temperature
from .engine import run_round
from .files import (
    MAX_LINE_BYTES,
    MAX_LOG_BYTES,
    atomic_write_text,
    error_text,
    human_bytes,
    open_zip,
    over_limit,
    parse_json,
)
from .stats import MeanCI, mean_ci
from .synth import REGIMES, RegimeSpec, make_world
from .synth.regimes import load_calibrated
from .validation import check_positive_int, check_rng, check_temperature

__all__ = ["AcceptanceLog", "Comparison", "Distribution", "LogFit", "Record", "compare",
           "compare_markdown", "fit_log", "guess_method", "load_torch_save", "main",
           "plot_comparison", "read_log", "read_logs", "regime_distribution", "resolve_regime",
           "trace_distribution", "write_fit"]


# ----------------------------------------------------------------------------- unpickling
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
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
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


# ----------------------------------------------------------------------------- logs
@dataclass(frozen=True)
class AcceptanceLog:
    r"""One method's per-round acceptance lengths from a public log.

    Attributes
    ----------
    path : str
        The file.
    source : str
        ``"benchmark"`` (a ``benchmark.py --save-path`` file), ``"caddtree-traces"`` (one with
        CaDDTree's ``round_trees``) or ``"jetspec"`` (a JetSpec ``.jsonl``).
    method : str
        The log's method key (``"ddtree_tb64"``, ``"dflash"``, the jsonl's file stem, ...).
    lengths : ndarray int64 (n,)
        Tokens committed per round, the bonus token counted (``tau >= 1``), in file order.
    sequence : ndarray int64 (n,)
        The response (decoded sequence) of each round: the unit of the intervals.
    budgets : ndarray int64 (n,) or None
        Per-round tree budget (CaDDTree's traces) or tree size (JetSpec's ``tree_sizes``).
    temperature : float or None
        The decode's temperature where the log says (``args.temperature``).
    depth : int or None
        The drafter's block depth ``L`` where the log says (``block_size - 1``).
    meta : dict
        Other settings the log holds (its ``args``, attention implementations, ...).
    """

    path: str
    source: str
    method: str
    lengths: np.ndarray
    sequence: np.ndarray
    budgets: np.ndarray | None = None
    temperature: float | None = None
    depth: int | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return int(self.lengths.size)

    @property
    def responses(self) -> int:
        return int(np.unique(self.sequence).size)

    @property
    def max_tau(self) -> int:
        return int(self.lengths.max())

    def probs(self, max_tau: int | None = None) -> np.ndarray:
        """The acceptance-length histogram as fractions of rounds, ``(max_tau,)``: entry
        ``k - 1`` is the share of rounds that committed ``k`` tokens."""
        m = self.max_tau if max_tau is None else int(max_tau)
        if m < self.max_tau:
            raise ValueError(f"max_tau = {m} is below the log's longest round {self.max_tau}")
        return np.bincount(self.lengths - 1, minlength=m).astype(np.float64) / self.rounds

    def mean(self) -> MeanCI:
        """Mean tokens per round with its 95% t-interval over responses (a response's rounds
        are one unit: :func:`treespec_sim.stats.mean_ci`)."""
        return mean_ci([self.lengths[self.sequence == s].astype(np.float64)
                        for s in dict.fromkeys(self.sequence.tolist())])


def _lengths(values: Any, where: str) -> np.ndarray:
    if not isinstance(values, np.ndarray | list | tuple):
        raise ValueError(f"{where}: acceptance lengths must be a list of integers")
    try:
        arr = np.asarray(values.tolist() if isinstance(values, np.ndarray) else list(values))
    except (ValueError, TypeError, OverflowError):
        raise ValueError(f"{where}: acceptance lengths must be a list of integers") from None
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.number)):
        raise ValueError(f"{where}: acceptance lengths must be a list of integers")
    if arr.size and (np.any(arr != np.round(arr)) or arr.min() < 1):
        bad = int(np.flatnonzero((arr != np.round(arr)) | (arr < 1))[0])
        raise ValueError(f"{where}: round {bad} has acceptance length {arr[bad].item()!r} (an "
                         "integer >= 1: tokens committed, the bonus counted)")
    return arr.astype(np.int64)


def _benchmark_logs(obj: Any, path: Path) -> list[AcceptanceLog]:
    if not isinstance(obj, dict) or not isinstance(obj.get("responses"), list):
        raise ValueError(f"{path}: a benchmark.py --save-path file holds a dict with "
                         "'responses' (a list); this one does not")
    args = obj.get("args") if isinstance(obj.get("args"), dict) else {}
    t = args.get("temperature")
    block = obj.get("block_size", args.get("block_size"))
    depth = int(block) - 1 if isinstance(block, int) and block >= 2 else None
    per: dict[str, dict[str, list]] = {}
    for i, response in enumerate(obj["responses"]):
        if not isinstance(response, dict):
            raise ValueError(f"{path}: responses[{i}] is not a dict of method results")
        for key, res in response.items():
            where = f"{path}: responses[{i}][{key!r}]"
            if not isinstance(res, Record) or not hasattr(res, "acceptance_lengths"):
                raise ValueError(f"{where} has no acceptance_lengths")
            lens = _lengths(res.acceptance_lengths, where)
            d = per.setdefault(key, {"lengths": [], "sequence": [], "budgets": [],
                                     "traces": False})
            trees = getattr(res, "round_trees", None)
            if trees:
                if len(trees) != lens.size:
                    raise ValueError(f"{where}: {len(trees)} round_trees for {lens.size} rounds")
                for r, tree in enumerate(trees):
                    acc = tree.get("accepted_indices") if isinstance(tree, dict) else None
                    if acc is None or "budget" not in tree:
                        raise ValueError(f"{where}: round_trees[{r}] lacks budget or "
                                         "accepted_indices")
                    if len(acc) != int(lens[r]):
                        raise ValueError(f"{where}: round {r} accepted {len(acc)} nodes (root "
                                         f"included) but its acceptance length is {lens[r]}")
                    d["budgets"].append(int(tree["budget"]))
                d["traces"] = True
            d["lengths"].append(lens)
            d["sequence"].append(np.full(lens.size, i, dtype=np.int64))
    meta = {k: v for k, v in obj.items() if k != "responses" and not isinstance(v, np.ndarray)}
    out = []
    for key, d in per.items():
        lengths = np.concatenate(d["lengths"])
        if not lengths.size:
            continue
        budgets = np.asarray(d["budgets"], dtype=np.int64) if d["traces"] else None
        out.append(AcceptanceLog(str(path), "caddtree-traces" if d["traces"] else "benchmark",
                                 key, lengths, np.concatenate(d["sequence"]), budgets,
                                 None if t is None else float(t), depth, meta))
    return out


def _lines(path: Path) -> Iterator[str]:
    """A text file's lines, each at most :data:`~treespec_sim.files.MAX_LINE_BYTES` long and
    UTF-8, read one at a time (a log may be larger than memory)."""
    cap = MAX_LINE_BYTES.get()
    with open(path, "rb") as f:
        for n, raw in enumerate(iter(lambda: f.readline(cap + 1), b"")):
            if len(raw) > cap:
                raise over_limit(path, f"line {n + 1}", len(raw), MAX_LINE_BYTES)
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}: line {n + 1} is not UTF-8 text (byte {exc.start})"
                                 ) from None


def _jsonl_logs(path: Path) -> list[AcceptanceLog]:
    lengths, sequence, sizes, temps = [], [], [], set()
    has_sizes, total = True, 0
    for n, line in enumerate(_lines(path)):
        if not line.strip():
            continue
        rec = parse_json(line, f"{path}: line {n + 1}")
        if not isinstance(rec, dict):
            raise ValueError(f"{path}: line {n + 1} is not a JSON object")
        key = next((k for k in ("accept_lengths", "acceptance_lengths") if k in rec), None)
        if key is None:
            raise ValueError(f"{path}: line {n + 1} has no accept_lengths (a JetSpec "
                             "response line)")
        lens = _lengths(rec[key], f"{path}: line {n + 1}")
        total += lens.size
        if 16 * total > MAX_LOG_BYTES.get():
            raise over_limit(path, f"the acceptance lengths up to line {n + 1}", 16 * total,
                             MAX_LOG_BYTES)
        mean = rec.get("accept_len_mean")
        if mean is not None and lens.size and abs(float(mean) - lens.mean()) > 1e-6:
            raise ValueError(f"{path}: line {n + 1}: accept_len_mean {mean} is not the mean "
                             f"of its {key} ({lens.mean():.6g})")
        lengths.append(lens)
        sequence.append(np.full(lens.size, int(rec.get("sample", n)), dtype=np.int64))
        ts = rec.get("tree_sizes")
        if ts is None or len(ts) != lens.size:
            has_sizes = False
        else:
            sizes.append(np.asarray(ts, dtype=np.int64))
        if "temperature" in rec:
            temps.add(float(rec["temperature"]))
    if not lengths:
        raise ValueError(f"{path}: no response lines")
    if len(temps) > 1:
        raise ValueError(f"{path}: responses at several temperatures {sorted(temps)}")
    return [AcceptanceLog(str(path), "jetspec", path.stem, np.concatenate(lengths),
                          np.concatenate(sequence),
                          np.concatenate(sizes) if has_sizes and sizes else None,
                          temps.pop() if temps else None, None, {})]


def read_logs(path: Path | str) -> tuple[AcceptanceLog, ...]:
    """Every method's acceptance lengths in a public log (format detected from the content).

    Raises
    ------
    ValueError
        Naming the file: missing, not one of the formats, or malformed (which response, which
        round).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"log file {path} does not exist")
    try:
        if zipfile.is_zipfile(path):
            logs = _benchmark_logs(load_torch_save(path), path)
        else:
            with open(path, "rb") as f:
                head = f.read(256).lstrip()
            if not head.startswith(b"{"):
                raise ValueError(f"{path}: neither a torch.save file (benchmark.py "
                                 "--save-path) nor a JSON-lines file (JetSpec)")
            logs = _jsonl_logs(path)
    except (TypeError, KeyError, AttributeError, OverflowError, IndexError) as exc:
        # a field of an unexpected type deep in a well-formed file
        raise ValueError(f"{path}: malformed log ({type(exc).__name__}: {error_text(exc)})"
                         ) from None
    if not logs:
        raise ValueError(f"{path}: no rounds")
    return tuple(logs)


def read_log(path: Path | str, method: str | None = None) -> AcceptanceLog:
    """One method of a log: ``method``, or the only one, or the last speculative one (the
    largest DDTree budget, else ``caddtree``, else ``dflash``); ``baseline`` (autoregressive)
    is never the default."""
    logs = {lg.method: lg for lg in read_logs(path)}
    if method is not None:
        if method not in logs:
            raise ValueError(f"method {method!r} is not in {path}; its methods: "
                             f"{', '.join(logs)}")
        return logs[method]
    spec = [k for k in logs if k != "baseline"] or list(logs)
    trees = sorted((k for k in spec if re.fullmatch(r".*tb(\d+)", k)),
                   key=lambda k: int(re.fullmatch(r".*tb(\d+)", k).group(1)))
    for pick in (trees[-1:] if trees else []) + [k for k in ("caddtree", "dflash") if k in spec]:
        return logs[pick]
    return logs[spec[-1]]


def guess_method(log: AcceptanceLog) -> tuple[str, int | None, str]:
    """The treespec ``(method, budget, rule)`` a log's method key names.

    ``dflash`` -> the chain; ``..tb<B>`` -> DDTree at ``B`` (rule ``tev`` when the key names
    TEV); ``caddtree`` -> CaDDTree at the log's ``max_tree_budget``; a JetSpec tree log ->
    DDTree at its median tree size (JetSpec's own builder differs: an approximation, overridable),
    one without tree sizes -> the chain. ``ValueError`` for the autoregressive ``baseline``.
    """
    key = log.method
    rule = "tev" if "tev" in key.lower() else "follow"
    if key == "baseline":
        raise ValueError("method 'baseline' is autoregressive decoding (every round commits 1 "
                         "token); name a speculative method of the log")
    m = re.fullmatch(r".*tb(\d+)", key)
    if m:
        return "ddtree", int(m.group(1)), rule
    if key.startswith("dflash"):
        return "chain", None, rule
    if key.startswith("caddtree"):
        args = log.meta.get("args") or {}
        return "caddtree", int(args.get("max_tree_budget", 1024)), rule
    if log.budgets is not None:
        return "ddtree", int(np.median(log.budgets)), rule
    return "chain", None, rule


# ----------------------------------------------------------------------------- regimes
def resolve_regime(regime: str | RegimeSpec) -> RegimeSpec:
    """A regime by name (:data:`treespec_sim.synth.REGIMES`), a :class:`RegimeSpec`, or a
    fitted regime's file (:func:`write_fit`, ``FILE.json``)."""
    if isinstance(regime, RegimeSpec):
        return regime
    if isinstance(regime, str) and regime in REGIMES:
        return REGIMES[regime]
    if isinstance(regime, str) and regime.endswith(".json"):
        if not Path(regime).is_file():
            raise ValueError(f"regime: no such file {regime!r}")
        specs = load_calibrated(regime)
        if len(specs) != 1:
            raise ValueError(f"regime: {regime} holds {len(specs)} regimes; name one file per "
                             "fitted regime")
        return next(iter(specs.values()))
    raise ValueError(f"regime: unknown regime {regime!r}; known regimes: "
                     f"{', '.join(sorted(REGIMES))}, or a fitted regime's .json file")


@dataclass(frozen=True)
class Distribution:
    """A model's acceptance-length law for one method: exact per context, averaged.

    Attributes
    ----------
    label : str
    probs : ndarray float64 (L+1,)
        ``probs[k - 1] = P(tau = k)``, the mean over contexts of the exact per-context law.
    taus : ndarray float64 (n,)
        Each context's exact ``E[tau]`` under ``rule`` (under a rule other than ``follow`` the
        histogram is of one sampled outcome per context, the means stay exact).
    units : ndarray int64 (n,)
        The unit of each context for intervals (its own index, or a trace's prompt).
    method, budget, temperature, rule
        What was run.
    """

    label: str
    probs: np.ndarray
    taus: np.ndarray
    units: np.ndarray
    method: str
    budget: int | None
    temperature: float
    rule: str = "follow"

    def mean(self) -> MeanCI:
        return mean_ci([self.taus[self.units == u] for u in dict.fromkeys(self.units.tolist())])


def _round_probs(rnd, depth: int, rule: str) -> np.ndarray:
    if rule == "follow":
        return np.asarray(rnd.exits.by_depth, dtype=np.float64)[: depth + 1]
    out = np.zeros(depth + 1)
    out[rnd.outcome.tau - 1] = 1.0
    return out


def _contexts_law(backend, contexts, *, method: str, budget: int | None, temperature: float,
                  rule: str, rng: np.random.Generator, cost) -> tuple[np.ndarray, np.ndarray]:
    depth = int(backend.depth)
    probs, taus = [], []
    for ctx in contexts:
        rnd = run_round(backend, ctx, method=method, budget=budget, rule=rule,
                        temperature=temperature, rng=rng, sample=rule != "follow", cost=cost)
        probs.append(_round_probs(rnd, depth, rule))
        taus.append(float(rnd.expected_tau))  # exact under every rule
    return np.array(probs), np.array(taus)


def regime_distribution(regime: str | RegimeSpec, *, method: str = "ddtree",
                        budget: int | None = 64, temperature: float = 0.0, rule: str = "follow",
                        contexts: int = 128, worlds: int = 2, seed: int = 0,
                        vocab_size: int | None = None, depth: int | None = None,
                        cost: Any = None) -> Distribution:
    """A regime's acceptance-length law for ``method`` at ``budget`` and ``temperature``.

    ``contexts`` fresh contexts split over ``worlds`` worlds (seeds ``seed + i``, contexts from
    ``default_rng([seed + i, 17])``); under ``follow`` each context's law is exact (its exit
    mass by depth), under another rule it is the sampled outcome (one per context).

    Parameters
    ----------
    regime : str or RegimeSpec
        A name, a spec or a fitted regime's file (:func:`resolve_regime`).
    vocab_size, depth : int, optional
        Override ``V`` (a smaller world is faster) and ``L`` (to match a log's block depth).
    cost : latency model or name, optional
        For cost-aware methods (``caddtree``).

    Returns
    -------
    Distribution
    """
    spec = resolve_regime(regime)
    t = check_temperature(temperature)
    n = check_positive_int(contexts, "contexts")
    k = check_positive_int(worlds, "worlds")
    if n < k:
        raise ValueError(f"contexts ({n}) must be at least worlds ({k})")
    probs, taus = [], []
    for i in range(k):
        w = make_world(spec, seed=seed + i, vocab_size=vocab_size, depth=depth)
        rng = np.random.default_rng([seed + i, 17])
        m = n // k + (i < n % k)
        ctxs = [w.sample_context(rng) for _ in range(m)]
        p, tau = _contexts_law(w, ctxs, method=method, budget=budget, temperature=t, rule=rule,
                               rng=rng, cost=cost)
        probs.append(p)
        taus.append(tau)
    probs_all = np.concatenate(probs)
    return Distribution(f"{spec.name} ({method}{'' if budget is None else f'@{budget}'}, "
                        f"T = {t:g})", probs_all.mean(axis=0), np.concatenate(taus),
                        np.arange(probs_all.shape[0]), method, budget, t, rule)


def trace_distribution(trace, *, method: str = "ddtree", budget: int | None = 64,
                       temperature: float = 0.0, rule: str = "follow", cost: Any = None,
                       rng: np.random.Generator | None = None) -> Distribution:
    """A trace's acceptance-length law: the exact law of every recorded round, averaged
    (units: the recorded prompts; ``docs/traces.md``)."""
    rng = np.random.default_rng(0) if rng is None else check_rng(rng)
    p, tau = _contexts_law(trace, trace.contexts, method=method, budget=budget,
                           temperature=check_temperature(temperature), rule=rule, rng=rng,
                           cost=cost)
    units = np.array([c.prompt for c in trace.contexts], dtype=np.int64)
    name = f"trace {Path(str(trace.header.get('models', {}).get('target', '?'))).name}"
    return Distribution(f"{name} ({method}{'' if budget is None else f'@{budget}'}, "
                        f"T = {temperature:g})", p.mean(axis=0), tau, units, method, budget,
                        float(temperature), rule)


# ----------------------------------------------------------------------------- comparison
def _pad(p: np.ndarray, m: int) -> np.ndarray:
    out = np.zeros(m)
    out[: p.size] = p
    return out


@dataclass(frozen=True)
class Comparison:
    """A log's histogram beside a model's law.

    Attributes
    ----------
    log_label, model_label : str
    log_probs, model_probs : ndarray float64 (m,)
        Over ``tau = 1..m`` (``m`` the longer support).
    log_counts : ndarray int64 (m,)
    log_mean, model_mean : MeanCI
        Means with 95% t-intervals (over responses; over contexts or a trace's prompts).
    tv : float
        Total variation distance ``(1/2) sum |p - q|``.
    ks : float
        The largest gap between the two CDFs.
    cvm : float
        ``sum_k (F_log(k) - F_model(k))^2`` (what :func:`fit_log` minimises).
    """

    log_label: str
    model_label: str
    log_probs: np.ndarray
    model_probs: np.ndarray
    log_counts: np.ndarray
    log_mean: MeanCI
    model_mean: MeanCI
    tv: float
    ks: float
    cvm: float

    def to_dict(self) -> dict:
        def ci(m: MeanCI) -> dict:
            return {"mean": m.mean, "ci_low": m.low, "ci_high": m.high}

        return {"log": self.log_label, "model": self.model_label,
                "log_probs": self.log_probs.tolist(), "model_probs": self.model_probs.tolist(),
                "log_counts": self.log_counts.tolist(), "log_mean": ci(self.log_mean),
                "model_mean": ci(self.model_mean), "tv": self.tv, "ks": self.ks,
                "cvm": self.cvm}


def _distances(p: np.ndarray, q: np.ndarray) -> tuple[float, float, float]:
    m = max(p.size, q.size)
    p, q = _pad(p, m), _pad(q, m)
    gap = np.cumsum(p) - np.cumsum(q)
    return float(0.5 * np.abs(p - q).sum()), float(np.abs(gap).max()), float((gap ** 2).sum())


def compare(log: AcceptanceLog | Distribution, model: Distribution) -> Comparison:
    """A log's (or a trace's) acceptance-length histogram beside a model's law."""
    if isinstance(log, AcceptanceLog):
        lp = log.probs()
        counts = np.bincount(log.lengths - 1, minlength=lp.size)
        label = f"{Path(log.path).name}: {log.method} ({log.rounds} rounds, {log.responses} " \
                "responses)"
        lmean = log.mean()
    else:
        lp, counts, label, lmean = log.probs, np.zeros(log.probs.size, dtype=np.int64), \
            log.label, log.mean()
    m = max(lp.size, model.probs.size)
    tv, ks, cvm = _distances(lp, model.probs)
    return Comparison(label, model.label, _pad(lp, m), _pad(model.probs, m),
                      _pad(counts, m).astype(np.int64), lmean, model.mean(), tv, ks, cvm)


def compare_markdown(c: Comparison) -> str:
    """The comparison as a Markdown table: per ``tau``, the log's rounds and share beside the
    model's, then the means and the distances."""
    def ci(m: MeanCI) -> str:
        return f"{m.mean:.3f} [{m.low:.3f}, {m.high:.3f}]"

    lines = [f"Log: {c.log_label}", f"Model: {c.model_label}", "",
             "| τ (tokens per round) | log rounds | log share | model share | difference |",
             "|---:|---:|---:|---:|---:|"]
    for k in range(c.log_probs.size):
        lines.append(f"| {k + 1} | {int(c.log_counts[k])} | {c.log_probs[k]:.3f} | "
                     f"{c.model_probs[k]:.3f} | {c.log_probs[k] - c.model_probs[k]:+.3f} |")
    lines += ["", f"Mean τ: log {ci(c.log_mean)} (95% t-interval over responses), model "
              f"{ci(c.model_mean)} (95% t-interval over its contexts). Total variation "
              f"{c.tv:.3f}, largest CDF gap {c.ks:.3f}, Σ (CDF gap)² {c.cvm:.4f}.", ""]
    return "\n".join(lines)


def plot_comparison(c: Comparison, path: Path | str, *,
                    names: tuple[str, str] = ("log", "model")) -> None:
    """Two panels: the histogram (``names[0]``'s bars, ``names[1]``'s markers) and the two
    CDFs (``P(tau <= k)``, a step at each integer ``k``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = np.arange(1, c.log_probs.size + 1)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    a.bar(k, c.log_probs, width=0.8, color="tab:blue", alpha=0.7,
          label=f"{names[0]}: mean {c.log_mean.mean:.2f}")
    a.plot(k, c.model_probs, "o-", color="tab:red", ms=4,
           label=f"{names[1]}: mean {c.model_mean.mean:.2f}")
    a.set_xlabel("τ: tokens committed per round (bonus counted)")
    a.set_ylabel("share of rounds")
    a.set_title("acceptance-length histogram", fontsize=10)
    a.legend(fontsize=8)
    a.grid(alpha=0.3, axis="y")
    kk = np.append(k, k[-1] + 1)
    b.step(kk, np.append(np.cumsum(c.log_probs), 1.0), where="post", color="tab:blue",
           label=names[0])
    b.step(kk, np.append(np.cumsum(c.model_probs), 1.0), where="post", color="tab:red",
           label=names[1])
    b.set_xlim(0.8, k[-1] + 0.5)
    b.set_xlabel("τ")
    b.set_ylabel("P(τ ≤ k)")
    b.set_ylim(0, 1.02)
    b.set_title(f"CDFs: total variation {c.tv:.3f}, largest gap {c.ks:.3f}", fontsize=10)
    b.legend(fontsize=8)
    b.grid(alpha=0.3)
    fig.suptitle(f"{c.log_label}\nvs {c.model_label}", fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- the fit
#: Knob -> (kind, lower, upper): ``unit`` knobs live in ``[0, 1]`` (fitted on the logit
#: scale), ``positive`` ones in ``(0, inf)`` (on the log scale).
FIT_KNOBS = {"hard_miss": "unit", "degradation": "unit", "mismatch": "unit", "junk": "unit",
             "variant_noise": "positive", "logit_scale": "positive", "calibration": "positive",
             "boost_noise": "positive", "sharpness": "positive"}

#: Values a knob at its boundary starts from (the logit and the log of 0 are not finite).
_START_FLOOR = 0.02


def _to_z(kind: str, x: float) -> float:
    x = float(x)
    if kind == "unit":
        x = min(max(x, _START_FLOOR), 1 - _START_FLOOR)
        return math.log(x / (1 - x))
    return math.log(max(x, _START_FLOOR))


def _from_z(kind: str, z: float) -> float:
    if kind == "unit":
        return 1.0 / (1.0 + math.exp(-z))
    return math.exp(z)


@dataclass(frozen=True)
class LogFit:
    """A regime fitted to an acceptance-length histogram (:func:`fit_log`).

    Attributes
    ----------
    spec : RegimeSpec
        The fitted regime (its ``V`` and ``L`` those the fit ran at).
    knobs : dict
        The fitted knobs' values.
    start : dict
        Their starting values (the base regime's).
    target_probs : ndarray (m,)
        The histogram fitted to.
    comparison : Comparison
        The fitted regime's law beside it (at the fit's contexts).
    start_cvm : float
        The objective at the start.
    evals : int
        Objective evaluations (one world set and its contexts each).
    method, budget, temperature, rule
        What the regime runs to be compared with the log.
    """

    spec: RegimeSpec
    knobs: dict
    start: dict
    target_probs: np.ndarray
    comparison: Comparison
    start_cvm: float
    evals: int
    method: str
    budget: int | None
    temperature: float
    rule: str
    source: str = ""

    def to_dict(self) -> dict:
        return {"knobs": self.knobs, "start": self.start, "start_cvm": self.start_cvm,
                "evals": self.evals, "method": self.method, "budget": self.budget,
                "temperature": self.temperature, "rule": self.rule, "source": self.source,
                "comparison": self.comparison.to_dict()}


def fit_log(target: AcceptanceLog | Distribution, *, base: str | RegimeSpec,
            method: str, budget: int | None, temperature: float, rule: str = "follow",
            knobs: Sequence[str] | None = None, contexts: int = 96, worlds: int = 2,
            seed: int = 0, vocab_size: int | None = None, depth: int | None = None,
            max_evals: int = 60, cost: Any = None, name: str | None = None) -> LogFit:
    r"""Fit a regime's knobs to a log's (or a trace's) whole acceptance-length histogram.

    The objective is :math:`\sum_k (F_{\log}(k) - F_{\mathrm{model}}(k))^2` over ``tau = 1..m``
    (a Cramér-von Mises distance between the two CDFs; its sum of gaps is the difference of
    the means, its squares weigh the shape), the model's law being
    :func:`regime_distribution` of the trial regime on the same world seeds and context
    streams every time (common random numbers). Nelder-Mead (:func:`scipy.optimize.minimize`)
    on unconstrained coordinates (:data:`FIT_KNOBS`), from the base regime's values.

    Parameters
    ----------
    target : AcceptanceLog or Distribution
    base : str or RegimeSpec
        The regime whose other knobs are kept.
    method, budget, temperature, rule
        What the regime runs (the log's method: :func:`guess_method`).
    knobs : sequence of str, optional
        Knobs to fit (default ``hard_miss``, ``variant_noise``, ``degradation``, and
        ``logit_scale`` at ``T > 0``).
    contexts, worlds, seed
        Per evaluation (see :func:`regime_distribution`).
    vocab_size, depth : int, optional
        ``V`` and ``L`` of the fitted regime (default the base's; ``depth`` should be the log's
        block depth).
    max_evals : int
        Objective evaluations at most.

    Returns
    -------
    LogFit

    Raises
    ------
    ValueError
        An unknown knob, a log longer than the regime's depth allows, a bad count.
    """
    from scipy.optimize import minimize

    spec0 = resolve_regime(base)
    t = check_temperature(temperature)
    knobs = tuple(knobs) if knobs else (("hard_miss", "variant_noise", "degradation")
                                         + (("logit_scale",) if t > 0 else ()))
    for kname in knobs:
        if kname not in FIT_KNOBS:
            raise ValueError(f"knobs: {kname!r} is not a fittable knob; known: "
                             f"{', '.join(FIT_KNOBS)}")
    max_evals = check_positive_int(max_evals, "max_evals")
    over = {}
    if vocab_size is not None:
        over["vocab_size"] = check_positive_int(vocab_size, "vocab_size")
    if depth is not None:
        over["depth"] = check_positive_int(depth, "depth")
    try:
        spec0 = dataclasses.replace(spec0, **over)
    except ValueError as exc:
        raise ValueError(f"base regime {spec0.name!r} at {over}: {exc}") from None
    tp = target.probs() if isinstance(target, AcceptanceLog) else np.asarray(target.probs)
    if tp.size > spec0.depth + 1:
        raise ValueError(f"the log has rounds of {tp.size} tokens, more than a regime of depth "
                         f"L = {spec0.depth} commits (L + 1); pass depth >= {tp.size - 1}")
    kinds = [FIT_KNOBS[k] for k in knobs]
    start = {k: float(getattr(spec0, k)) for k in knobs}
    z0 = np.array([_to_z(kind, start[k]) for k, kind in zip(knobs, kinds, strict=True)])
    evals = {"n": 0}
    cache: dict[tuple, tuple[float, Distribution]] = {}

    def spec_at(z: np.ndarray) -> RegimeSpec:
        vals = {k: _from_z(kind, float(x)) for k, kind, x in zip(knobs, kinds, z, strict=True)}
        return dataclasses.replace(spec0, **vals)

    def objective(z: np.ndarray) -> float:
        key = tuple(np.round(z, 12))
        if key not in cache:
            evals["n"] += 1
            try:
                dist = regime_distribution(spec_at(z), method=method, budget=budget,
                                           temperature=t, rule=rule, contexts=contexts,
                                           worlds=worlds, seed=seed, cost=cost)
            except ValueError:  # a knob value the regime refuses: outside the feasible set
                cache[key] = (math.inf, None)
            else:
                cache[key] = (_distances(tp, dist.probs)[2], dist)
        return cache[key][0]

    f0 = objective(z0)
    res = minimize(objective, z0, method="Nelder-Mead",
                   options={"maxfev": max(1, max_evals - 1), "xatol": 1e-3, "fatol": 1e-7,
                            "initial_simplex": np.vstack([z0] + [z0 + 0.5 * np.eye(len(z0))[i]
                                                                  for i in range(len(z0))])})
    best = res.x if objective(res.x) <= f0 else z0
    spec = dataclasses.replace(spec_at(best), name=name or f"fit-{spec0.name}",
                               description=f"fitted to an acceptance-length histogram "
                                           f"({method}{'' if budget is None else f'@{budget}'}, "
                                           f"T = {t:g}) from {spec0.name}")
    dist = cache[tuple(np.round(best, 12))][1]
    return LogFit(spec, {k: float(getattr(spec, k)) for k in knobs}, start, tp,
                  compare(target, dataclasses.replace(dist, label=f"{spec.name} "
                                                      f"({method}, T = {t:g})")),
                  f0, evals["n"], method, budget, t, rule,
                  getattr(target, "path", getattr(target, "label", "")))


def write_fit(path: Path | str, fit: LogFit) -> Path:
    """Write a fitted regime as a calibration-style file (``{"regimes": {name: {"knobs":
    ..., "fit": ...}}}``) that :func:`treespec_sim.synth.regimes.load_calibrated` and
    :func:`resolve_regime` read; atomically."""
    path = Path(path)
    data = {"regimes": {fit.spec.name: {"knobs": dataclasses.asdict(fit.spec),
                                        "fit": fit.to_dict()}}}
    atomic_write_text(path, json.dumps(data, indent=1, default=float))
    return path


# ----------------------------------------------------------------------------- CLI
def add_from_log_arguments(ap: argparse.ArgumentParser, *, file_option: bool = True) -> None:
    """The options of a fit to a log (``python -m treespec_sim.calibrate --from-log FILE`` and,
    the file positional, ``python -m treespec_sim.acceptance fit FILE``)."""
    if file_option:
        ap.add_argument("--from-log", metavar="FILE", default=None,
                        help="fit a regime to a public log's acceptance-length histogram "
                             "(benchmark.py --save-path .pt, CaDDTree tree traces, JetSpec "
                             ".jsonl; docs/traces.md, 'Public logs') instead of the published "
                             "cells (default: none, the published cells)")
    ap.add_argument("--log-method", metavar="KEY", default=None,
                    help="with --from-log: the log's method key (default: its largest DDTree "
                         "budget, else caddtree, else dflash)")
    ap.add_argument("--log-temperature", type=temperature, default=None, metavar="T",
                    help="with --from-log: the decode's temperature where the log does not say "
                         "(default 0)")
    ap.add_argument("--base", metavar="REGIME", default=None,
                    help="with --from-log: the regime whose other knobs are kept (default: "
                         "math500 if calibrated, else mid-entropy)")
    ap.add_argument("--fit-out", metavar="FILE.json", default=None,
                    help="with --from-log: where to write the fitted regime (default: "
                         "fit-<log stem>.json)")
    ap.add_argument("--fit-knobs", nargs="+", metavar="KNOB", default=None,
                    help=f"with --from-log: knobs to fit, of {', '.join(FIT_KNOBS)} (default: "
                         "hard_miss variant_noise degradation, and logit_scale at T > 0)")
    ap.add_argument("--max-evals", type=positive_int, default=60, metavar="N",
                    help="with --from-log: objective evaluations at most (default: %(default)s)")
    ap.add_argument("--vocab", type=positive_int, default=4096, metavar="V",
                    help="with --from-log: the fitted regime's vocabulary (default: "
                         "%(default)s, a fast world)")


def _default_base() -> str:
    return "math500" if "math500" in REGIMES else "mid-entropy"


def from_log_main(args: argparse.Namespace, *, contexts: int | None = None,
                  seed: int = 0) -> int:
    """Fit a regime to ``args.from_log`` and write it (the ``--from-log`` dispatch)."""
    log = read_log(args.from_log, args.log_method)
    method, budget, rule = guess_method(log)
    t = log.temperature if log.temperature is not None else (args.log_temperature or 0.0)
    base = resolve_regime(args.base or _default_base())
    depth = log.depth if log.depth is not None else max(base.depth, log.max_tau - 1)
    fit = fit_log(log, base=base, method=method, budget=budget, temperature=t, rule=rule,
                  knobs=args.fit_knobs, contexts=contexts or 96, seed=seed,
                  vocab_size=args.vocab, depth=depth, max_evals=args.max_evals,
                  cost="h200-qwen3-8b" if method == "caddtree" else None,
                  name=f"fit-{Path(args.from_log).stem}")
    out = Path(args.fit_out or f"fit-{Path(args.from_log).stem}.json")
    write_fit(out, fit)
    print(compare_markdown(fit.comparison))
    print(f"fitted {', '.join(f'{k} = {v:.4g}' for k, v in fit.knobs.items())} (from "
          f"{', '.join(f'{k} = {v:.4g}' for k, v in fit.start.items())}); Σ (CDF gap)² "
          f"{fit.start_cvm:.4f} -> {fit.comparison.cvm:.4f} in {fit.evals} evaluations; "
          f"wrote {out}")
    return 0


def build_parser() -> OneLineParser:
    """The parser of ``python -m treespec_sim.acceptance``."""
    ap = OneLineParser(prog="python -m treespec_sim.acceptance",
                       description="Read public per-round logs (DDTree/TEV/CaDDTree "
                                   "benchmark.py --save-path, JetSpec jsonl), compare their "
                                   "acceptance-length histogram with a regime's, fit a regime.")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND", title="commands", required=True)
    s = sub.add_parser("show", help="the methods of a log: rounds, responses, mean tau, "
                                    "histogram")
    s.add_argument("file")
    c = sub.add_parser("compare", help="a log's histogram beside a regime's (table, figure)")
    c.add_argument("file")
    c.add_argument("--regime", required=True,
                   help="a regime name or a fitted regime's .json file (required)")
    c.add_argument("--method", default=None, help="the log's method key (default: see show)")
    c.add_argument("--budget", type=positive_int, default=None,
                   help="the regime's tree budget (default: the one the log's method names)")
    c.add_argument("--temperature", type=temperature, default=None,
                   help="the regime's temperature (default: the log's, else 0)")
    c.add_argument("--contexts", type=positive_int, default=128,
                   help="regime contexts (default: %(default)s)")
    c.add_argument("--vocab", type=positive_int, default=None,
                   help="cap the regime's vocabulary (faster; default: its own)")
    add_seed(c, "world and context seed (default 0)")
    c.add_argument("--out", type=Path, default=None,
                   help="folder for compare.md, compare.json and compare.png (default: none, "
                        "print the table only)")
    f = sub.add_parser("fit", help="fit a regime to a log's histogram (as calibrate --from-log)")
    f.add_argument("from_log", metavar="file")
    add_from_log_arguments(f, file_option=False)
    f.add_argument("--contexts", type=positive_int, default=96,
                   help="contexts per evaluation (default: %(default)s)")
    add_seed(f, "world and context seed (default 0)")
    for p in (s, c, f):
        add_debug(p)
    return ap


def _show(path: str) -> None:
    for log in read_logs(path):
        m = log.mean()
        try:
            what = guess_method(log)
        except ValueError:
            what = ("autoregressive", None, "")
        hist = " ".join(f"{p:.2f}" for p in log.probs())
        print(f"{log.method}: {log.source}, {log.rounds} rounds, {log.responses} responses, "
              f"mean tau {m.mean:.3f} [{m.low:.3f}, {m.high:.3f}], T = "
              f"{'?' if log.temperature is None else f'{log.temperature:g}'}, L = "
              f"{'?' if log.depth is None else log.depth}; treespec method {what[0]}"
              f"{'' if what[1] is None else f' @ {what[1]}'}; shares of tau = 1..: {hist}")


def _compare(args: argparse.Namespace) -> None:
    log = read_log(args.file, args.method)
    method, budget, rule = guess_method(log)
    budget = args.budget or budget
    t = args.temperature if args.temperature is not None else (log.temperature or 0.0)
    spec = resolve_regime(args.regime)
    depth = log.depth if log.depth is not None else max(spec.depth, log.max_tau - 1)
    dist = regime_distribution(spec, method=method, budget=budget, temperature=t, rule=rule,
                               contexts=args.contexts, seed=args.seed, vocab_size=args.vocab,
                               depth=depth,
                               cost="h200-qwen3-8b" if method == "caddtree" else None)
    c = compare(log, dist)
    print(compare_markdown(c))
    if args.out is not None:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "compare.md", compare_markdown(c))
        atomic_write_text(out / "compare.json", json.dumps(c.to_dict(), indent=1))
        plot_comparison(c, out / "compare.png")
        print(f"wrote {out / 'compare.md'}, compare.json and compare.png")


def _body(args: argparse.Namespace) -> int:
    if args.cmd == "show":
        _show(args.file)
    elif args.cmd == "compare":
        _compare(args)
    else:
        return from_log_main(args, contexts=args.contexts, seed=args.seed)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m treespec_sim.acceptance show|compare|fit``."""
    return run_subcommand(build_parser(), argv, _body)


if __name__ == "__main__":
    sys.exit(main())
