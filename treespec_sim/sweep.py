"""The sweep, the project's main command: ``python -m treespec_sim.sweep``.

With no arguments it runs the ``paper`` preset: the comparisons of all four method families on
the calibrated regimes (falling back to the synthetic low/mid/high-entropy regimes where the
calibrated ones are not installed):

* ``ddtree`` -- DDTree and the DFlash chain across budgets at ``T = 0`` and ``1``, with the exit-law
  decomposition of where target mass is lost;
* ``caddtree`` -- CaDDTree vs DDTree at the oracle budget (and the exhaustive and long-run rules)
  under the A800 and H200 latency presets;
* ``stochastic`` -- Tsubame vs deterministic trees vs sampled chains at ``T = 0, 0.6, 1`` (the
  regimes' own vocabulary, ``V = 32768`` for the calibrated ones);
* ``verifiers`` -- UniVer and Traversal vs RRSw on the same sampled trees.

Each regime runs on 3 synthetic worlds in every family.

Other presets: ``quick`` (under a minute), and one per family (``ddtree``, ``caddtree``,
``stochastic``, ``verifiers``); ``--config FILE.toml`` for custom grids (validated before any
work starts); ``--trace FILE`` (or ``trace = "FILE"`` in a config) runs the families that run on
traces on a recorded trace's rounds, the trace standing where a regime stands
(``docs/traces.md``, "The sweep on a trace"; :func:`trace_plan`). Outputs, in ``--out``
(default ``runs/sweep-<preset>-<time>``):

``results.csv``
    the tidy table, one row per (cell, method, ...) and seed; columns :data:`COLUMNS`;
``cells/<family>/<key>.json``
    one file per finished cell, written atomically; ``--resume`` skips cells found here, so an
    interrupted sweep loses nothing finished, and a finished run's folder accepts a grid that
    only gains cells (:func:`check_out`);
``run.json``
    the run record: plan, seed, versions, git commit, cost-model provenance, timings, and
    ``extrapolated``: the cells that priced latency outside a model's measured range;
``summary.md`` and figures
    the findings first (one line per claim: the number, its interval, the verdict; the
    families' :func:`~treespec_sim.families.all_claims`, also printed on the console), then
    per-claim tables with confidence intervals (links relative to the run folder); the
    families' figures:
    ``tau_vs_budget.png``, ``lost_mass_by_depth.png``, ``throughput_vs_budget.png``,
    ``tau_vs_temperature.png``, ``verifier_gains.png``.

A running sweep holds its folder (:func:`out_lock`, the file ``.sweep.lock``); Ctrl-C stops it
at once, worker processes included, keeping every finished cell.

Every cell runs on ``worlds`` synthetic worlds per regime (default 3, seeds ``seed + i``;
``--worlds`` replaces every family's), its ``rounds`` split over them
(:func:`treespec_sim.families.world_shares`); rows carry the pooled interval over contexts and
the between-world one.

Cells run sequentially, on ``--workers N`` local processes, or on an existing dask.distributed
cluster (``--scheduler ADDRESS``). Each cell's randomness depends only on the seed and its key,
so every backend gives the same numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime as _dt
import functools
import json
import math
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import __version__
from .cli import OneLineParser, add_debug, add_seed, positive_int
from .cost import PRESETS as COST_PRESETS
from .cost import record_extrapolation
from .families import (
    COLUMNS,
    FAMILIES,
    Cell,
    Claim,
    RunSettings,
    all_claims,
    check_trace_grid,
    is_trace,
    run_cell,
    trace_grids,
    trace_regime,
)
from .families.base import RECORDED_COST, cost_model, smoke_test, trace_for, trace_sha256
from .families.render import cost_label, missing
from .files import atomic_write_text, default_file_mode, read_json, read_toml
from .report import findings_lines, summary_markdown, write_figures
from .synth import is_regime_file, regime_file, register_regime
from .warmup import warm_up

try:  # POSIX: the --out lock is an flock, released by the kernel if its holder dies
    import fcntl
except ImportError:  # pragma: no cover - elsewhere the lock file's pid decides alone
    fcntl = None

__all__ = ["COLUMNS", "LOCK_NAME", "PRESETS", "Plan", "check_out", "load_config", "main",
           "out_lock", "plan_from_dict", "run_plan", "trace_plan", "trace_record"]

@dataclass(frozen=True)
class Plan:
    """What a sweep runs: one grid per family, a seed, the latency preset used for the
    throughput columns of families that do not sweep cost models themselves, and optionally a
    trace (``docs/traces.md``, "The sweep on a trace"): the file whose recorded rounds the
    grids' ``"trace:<name>"`` regime stands for, checked against every grid before any work,
    and its SHA-256 (computed from the file unless given: a run record's keeps the one its
    cells were computed from)."""

    grids: tuple
    seed: int = 0
    cost_model: str = "h200-qwen3-8b"
    trace: str | None = None
    trace_sha256: str | None = None
    regime_files: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer; got {self.seed!r}")
        specs = tuple(regime_file(f) for f in self.regime_files)
        for spec in specs:
            register_regime(spec)
        object.__setattr__(self, "_regime_specs", specs)

        if not self.grids:
            raise ValueError("a plan needs at least one family grid")
        self._check_trace()
        for key, name in [("cost_model", self.cost_model),
                          *((f"{g.family}.cost_models", c) for g in self.grids
                            for c in getattr(g, "cost_models", ()))]:
            try:
                cost_model(name, self.trace or "")  # "recorded" needs the plan's trace
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None

    def _check_trace(self) -> None:
        """The trace loads, and every grid's trace regime is it and stays inside its data."""
        uses = [(g, r) for g in self.grids for r in g.regimes if is_trace(r)]
        if self.trace is None:
            if uses:
                g, r = uses[0]
                raise ValueError(f"{g.family}.regimes: {r!r} names a trace, but the plan has "
                                 "none (give --trace FILE or trace = \"FILE\")")
            if self.trace_sha256 is not None:
                raise ValueError("trace_sha256 is given without a trace")
            return
        if not isinstance(self.trace, str) or not self.trace:
            raise ValueError(f"trace must be a file name (a string); got {self.trace!r}")
        tr = trace_for(self.trace)
        if self.trace_sha256 is None:
            object.__setattr__(self, "trace_sha256", trace_sha256(self.trace))
        mine = trace_regime(self.trace)
        for g, r in uses:
            if r != mine:
                raise ValueError(f"{g.family}.regimes: {r!r} is not this plan's trace {mine!r} "
                                 f"(trace = {self.trace!r})")
        for g in dict.fromkeys(g for g, _ in uses):
            check_trace_grid(g, tr, mine)

    def cells(self) -> list[Cell]:
        return [c for g in self.grids for c in g.cells()]

    def settings(self) -> RunSettings:
        """What every cell of the plan shares (:class:`~treespec_sim.families.RunSettings`)."""
        return RunSettings(seed=self.seed, cost_model=self.cost_model, trace=self.trace or "",
                           trace_sha256=self.trace_sha256 or "", regimes=self._regime_specs)

    def to_dict(self) -> dict:
        out = {"seed": self.seed, "cost_model": self.cost_model}
        if self.trace is not None:
            out["trace"] = self.trace
            out["trace_sha256"] = self.trace_sha256
        if self.regime_files:
            out["regime_files"] = {spec.name: {"path": path, "knobs": spec.knobs()}
                                   for path, spec in zip(self.regime_files,
                                                         self._regime_specs, strict=True)}
        for g in self.grids:
            out[g.family] = {k: list(v) if isinstance(v, tuple) else v
                             for k, v in dataclasses.asdict(g).items()}
        return out


def _all(which: str) -> Plan:
    """Every registered family's grid in preset ``which`` (families without one left out)."""
    grids = tuple(g for g in (f.preset(which) for f in FAMILIES.values()) if g is not None)
    return Plan(grids)


def _one(family: str) -> Plan:
    """A family's own preset: its grid alone."""
    return Plan((FAMILIES[family].preset(family),))


def trace_plan(path: str, *, seed: int = 0, cost_model: str = RECORDED_COST) -> Plan:
    """The plan of ``python -m treespec_sim.sweep --trace FILE``: every family that runs on
    traces, on the trace's recorded rounds (each family's ``trace_preset``), its throughput
    priced by the trace's own recorded timings (``"recorded"``) unless ``cost_model`` names
    another."""
    tr = trace_for(path)
    return Plan(trace_grids(tr, trace_regime(path)), seed=seed, cost_model=cost_model,
                trace=str(path))


#: Named presets: name -> (description, factory). Factories run lazily (regimes may be fitted
#: after import); each family's grid in a preset is the family's (its ``preset``).
PRESETS: dict[str, tuple[str, Callable[[], Plan]]] = {
    "paper": ("all four families on the calibrated regimes, 3 worlds per regime, V = 32768 "
              "(the default; about 5 min on 2 cores with --workers 2)",
              functools.partial(_all, "paper")),
    "quick": ("a small version of every family, 3 worlds per regime (under a minute)",
              functools.partial(_all, "quick")),
    **{f.name: (f.preset_note, functools.partial(_one, f.name)) for f in FAMILIES.values()},
    # the further presets a family names (``presets``: name -> (note, grid factory)), each
    # its grid alone
    **{p: (note, lambda make=make: Plan((make(),))) for f in FAMILIES.values()
       for p, (note, make) in getattr(f, "presets", {}).items()},
}


def get_preset(name: str) -> Plan:
    try:
        return PRESETS[name][1]()
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; known presets: "
                         f"{', '.join(PRESETS)}") from None


# -------------------------------------------------------------------------------- config
_TOP_KEYS = {"seed", "cost_model", "preset", "trace", "trace_sha256"}
#: The top-level keys a config file is written with (docs/usage.md); ``trace_sha256`` is a run
#: record's (its plan keeps the trace file's SHA-256 to check a resumed run against) and is
#: accepted, but not offered to people writing a config.
_CONFIG_KEYS = _TOP_KEYS - {"trace_sha256"}
#: A family table's ``regimes`` may name the plan's trace by this word.
TRACE_WORD = "trace"


def _regime_names(regimes, files: list[str]):
    """A grid's ``regimes`` with every fitted-regime file (``"fit.json"``) replaced by the name
    of the regime it holds, registered (:func:`treespec_sim.synth.register_regime`); the files
    are appended to ``files`` (the plan's ``regime_files``)."""
    if not isinstance(regimes, list | tuple):
        return regimes
    out = []
    for r in regimes:
        if is_regime_file(r):
            spec = regime_file(r)
            register_regime(spec)
            if str(r) not in files:
                files.append(str(r))
            out.append(spec.name)
        else:
            out.append(r)
    return tuple(out)


def plan_from_dict(data: dict, *, source: str = "config") -> Plan:
    """Build a plan from a parsed TOML/JSON dict; every unknown key is an error naming it.

    Top level: ``seed``, ``cost_model``, optionally ``preset`` (start from a preset and override
    its families), optionally ``trace`` (a trace file: ``docs/traces.md``, "The sweep on a
    trace"), and one table per family of :data:`~treespec_sim.families.FAMILIES`
    (``[ddtree]``, ...) whose keys are that family's grid fields. With a trace, a family table
    without ``regimes`` runs on the trace, ``"trace"`` in a ``regimes`` list names it, and no
    family table at all means every family that runs on traces (as ``--trace FILE``).
    """
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a table at the top level")
    for key, value in data.items():
        if key not in _TOP_KEYS and key not in FAMILIES:
            raise ValueError(f"{source}: unknown key {key!r}; known keys: "
                             f"{', '.join(sorted(_CONFIG_KEYS | set(FAMILIES)))}")
        if key in FAMILIES and not isinstance(value, dict):
            raise ValueError(f"{source}: [{key}] must be a table")
    trace = data.get("trace")
    if trace is not None and (not isinstance(trace, str) or not trace):
        raise ValueError(f"{source}: trace must be a file name (a string); got {trace!r}")
    if trace is not None and "preset" in data:
        raise ValueError(f"{source}: preset and trace: a preset's grids run on regimes; give "
                         "family tables (or none: every family that runs on traces)")
    mine = trace_regime(trace) if trace else None
    base = get_preset(data["preset"]) if "preset" in data else None
    grids = {g.family: g for g in base.grids} if base else {}
    files: list[str] = list(base.regime_files) if base else []
    for fam, family in FAMILIES.items():
        cls = family.grid
        if fam not in data:
            continue
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for key in data[fam]:
            if key not in fields:
                raise ValueError(f"{source}: unknown key {fam}.{key!r}; known keys of [{fam}]: "
                                 f"{', '.join(fields)}")
        values = dict(data[fam])
        if "regimes" not in values and fam in grids:
            values["regimes"] = grids[fam].regimes
        if "regimes" not in values and mine:
            values["regimes"] = (mine,)
        if "regimes" not in values:
            raise ValueError(f"{source}: [{fam}] needs 'regimes'")
        if mine and isinstance(values["regimes"], list | tuple):
            values["regimes"] = tuple(mine if r == TRACE_WORD else r for r in values["regimes"])
        try:
            values["regimes"] = _regime_names(values["regimes"], files)
        except ValueError as exc:
            raise ValueError(f"{source}: [{fam}].regimes: {exc}") from None
        try:
            grids[fam] = dataclasses.replace(grids[fam], **values) if fam in grids \
                else cls(**values)
        except TypeError as exc:
            raise ValueError(f"{source}: [{fam}]: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None
    try:
        if not grids and trace:
            tp = trace_plan(trace, seed=data.get("seed", 0),
                            cost_model=data.get("cost_model", RECORDED_COST))
            return dataclasses.replace(tp, trace_sha256=data.get("trace_sha256"))
        if not grids:
            tables = ", ".join(f"[{f}]" for f in FAMILIES)
            raise ValueError(f"no family table ({tables}) and no preset")
        return Plan(tuple(grids[f] for f in FAMILIES if f in grids),
                    seed=data.get("seed", base.seed if base else 0),
                    cost_model=data.get("cost_model", base.cost_model if base
                                        else RECORDED_COST if _trace_only(grids.values())
                                        else "h200-qwen3-8b"),
                    trace=trace, trace_sha256=data.get("trace_sha256"),
                    regime_files=tuple(files))
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None


def _trace_only(grids) -> bool:
    """Every regime of every grid is a trace (then the default price is its own timings)."""
    regimes = [r for g in grids for r in g.regimes]
    return bool(regimes) and all(is_trace(r) for r in regimes)


def load_config(path: str | Path, *, trace: str | None = None) -> Plan:
    """Read and validate a TOML grid file (see :func:`plan_from_dict`); ``trace`` replaces its
    ``trace`` key (``--trace FILE``)."""
    p = Path(path)
    data = read_toml(p, "--config")
    if trace is not None:
        data["trace"] = str(trace)
    return plan_from_dict(data, source=str(p))


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
            _remove_if_empty(out)
        raise
    _HELD[key] = 1
    try:
        yield
    finally:
        del _HELD[key]
        _drop_lock(path, fd)
        if created:
            _remove_if_empty(out)


def _remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.rmdir()  # only succeeds on an empty folder


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent, timeout=10, check=False)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _versions() -> dict[str, str]:
    import scipy

    return {"treespec": __version__, "python": sys.version.split()[0],
            "numpy": np.__version__, "scipy": scipy.__version__,
            "platform": platform.platform()}


def _cell_fingerprint(cell: Cell, settings: RunSettings) -> str:
    """8 hex digits of everything a cell's rows depend on beyond its key and the seed.

    The grid's settings other than the lists its cells are drawn from (rounds, budgets,
    methods, cost models, ...) and the sweep's cost model: ``--resume`` into a directory
    written with other settings redoes the cell instead of reusing rows that no longer match,
    and a grid that only gains cells keeps the finished ones. Those lists are the grid's
    ``cell_axes`` (a class attribute naming the fields each cell takes one value of, and
    whose other values its rows do not depend on), ``("regimes", "temperatures")`` if it
    names none.
    """
    axes = getattr(type(cell.grid), "cell_axes", ("regimes", "temperatures"))
    params = {k: v for k, v in dataclasses.asdict(cell.grid).items() if k not in axes}
    params["cost_model"] = settings.cost_model
    if is_trace(cell.regime):  # a trace's cells depend on the file's content
        params["trace_sha256"] = settings.trace_sha256
    for spec in settings.regimes:  # a fitted regime's cells depend on its file's knobs
        if spec.name == cell.regime:
            params["regime_knobs"] = spec.knobs()
    blob = json.dumps(params, sort_keys=True, default=str).encode()
    return f"{zlib.crc32(blob):08x}"


def _cell_path(out: Path, cell: Cell, settings: RunSettings) -> Path:
    return (out / "cells" / cell.family
            / f"{cell.key}__s{settings.seed}__{_cell_fingerprint(cell, settings)}.json")


def _save_cell(out: Path, settings: RunSettings, cell: Cell, rows: list[dict]) -> None:
    atomic_write_text(_cell_path(out, cell, settings), json.dumps(rows))


def _chunks_by_regime(todo: list[Cell], workers: int) -> list[list[Cell]]:
    """Cells grouped by regime, in plan order, each group cut to at most ``len / (2 workers)``.

    A worker process builds a regime's world tables (per-topic kernels, ~1 s at V = 32768)
    once and reuses them for every cell of the chunk; per-cell tasks would build them in
    every worker that draws one of the regime's cells. Several chunks per worker keep the load
    balanced.
    """
    size = max(1, math.ceil(len(todo) / (2 * workers)))
    groups: dict[str, list[Cell]] = {}
    for cell in todo:
        groups.setdefault(cell.regime, []).append(cell)
    return [g[i: i + size] for g in groups.values() for i in range(0, len(g), size)]


def _run_recorded(cell: Cell, settings: RunSettings) -> list[dict]:
    """:func:`run_cell`, with the cell's latency-model extrapolations on its rows.

    Every request a latency model priced outside its measured range during the cell
    (:func:`treespec_sim.cost.record_extrapolation`) goes, as a list of records, under the
    rows' ``"extrapolated"`` key (absent if there was none): the rows are what a worker
    returns and what the cell file keeps, so the record survives worker processes, dask and
    ``--resume``.
    """
    settings.register_regimes()  # a worker process knows the plan's file regimes by name
    warm_up()                    # once per process; dask's workers compile once per machine
    with record_extrapolation() as log:
        rows = run_cell(cell, settings)
    notes = log.records()
    if notes:
        for r in rows:
            r["extrapolated"] = notes
    return rows


def _cell_extrapolation(rows: Sequence[dict]) -> list[dict]:
    """The extrapolation records a cell's rows carry (see :func:`_run_recorded`)."""
    return list(rows[0].get("extrapolated") or []) if rows else []


def _run_chunk(cells: list[Cell], settings: RunSettings,
               save: Callable[[Cell, list[dict]], None] | None) -> list[list[dict]]:
    """Run ``cells`` in order in one worker; ``save`` each as it finishes (nothing is lost)."""
    out = []
    for cell in cells:
        rows = _run_recorded(cell, settings)
        if save is not None:
            save(cell, rows)
        out.append(rows)
    return out


def _run_indexed_chunk(task: tuple) -> tuple[int, list[list[dict]]]:
    """``(i, cells, settings, save) -> (i, rows of each cell)``: :func:`_run_chunk` for a pool
    that returns chunks in the order they finish."""
    i, cells, settings, save = task
    return i, _run_chunk(cells, settings, save)


def _ignore_sigint() -> None:
    """Worker initializer: a Ctrl-C is the parent's to handle (a terminal sends it to the whole
    process group); the parent then terminates the workers instead of each one printing a
    traceback from the middle of a cell."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


#: Seconds to wait for a dask scheduler before giving up with a one-line error.
SCHEDULER_TIMEOUT_S = 10


def _execute(todo: list[Cell], settings: RunSettings, *, workers: int, scheduler: str | None,
             done: Callable[[Cell, list[dict]], None], progress: bool,
             save: Callable[[Cell, list[dict]], None] | None = None) -> None:
    """Run cells on the chosen backend, calling ``done`` in this process as each finishes.

    Local workers run chunks of same-regime cells (:func:`_chunks_by_regime`); ``save``
    (picklable) is then called in the worker after every cell, so that a kill loses no
    finished cell even before its chunk returns.
    """
    bar = None
    if progress and todo:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        bar = Progress("[progress.description]{task.description}", BarColumn(),
                       MofNCompleteColumn(), TimeElapsedColumn())
        bar.start()
        task = bar.add_task("cells", total=len(todo))

    def finish(cell: Cell, rows: list[dict]) -> None:
        done(cell, rows)
        if bar is not None:
            bar.update(task, description=cell.key, advance=1)

    try:
        if scheduler:
            try:
                from distributed import Client, as_completed
            except ImportError:
                raise ValueError("--scheduler needs dask.distributed: pip install "
                                 "'treespec[dist]'") from None
            try:
                client = Client(scheduler, timeout=SCHEDULER_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                raise ValueError(f"--scheduler: cannot reach a dask scheduler at {scheduler} "
                                 f"within {SCHEDULER_TIMEOUT_S} s ({type(exc).__name__})"
                                 ) from None
            with client:
                futures = {client.submit(_run_recorded, c, settings, pure=False, key=c.key): c
                           for c in todo}
                try:
                    for fut in as_completed(futures):
                        finish(futures[fut], fut.result())
                except BaseException:
                    client.cancel(list(futures))  # a failed cell or Ctrl-C: stop the rest
                    raise
        elif workers > 1 and len(todo) > 1:
            import multiprocessing

            chunks = _chunks_by_regime(todo, workers)
            warm_up()   # compiled here, inherited by the forked workers
            # multiprocessing.Pool, not concurrent.futures: its terminate() stops the workers
            # mid-cell, where an executor's shutdown waits for every running chunk (~20 s of
            # work after a Ctrl-C in the paper preset).
            pool = multiprocessing.Pool(min(workers, len(chunks)), initializer=_ignore_sigint)
            try:
                tasks = [(i, chunk, settings, save) for i, chunk in enumerate(chunks)]
                for i, results in pool.imap_unordered(_run_indexed_chunk, tasks):
                    for cell, rows in zip(chunks[i], results, strict=True):
                        finish(cell, rows)
                pool.close()
            except BaseException:
                # A failed cell (reported now, not after every queued chunk has run) or a
                # Ctrl-C: the workers have saved every cell they finished; drop the rest.
                pool.terminate()
                raise
            finally:
                pool.join()
        else:
            # Regime by regime (not plan order), so that each world's tables are built once
            # and the small world cache of treespec_sim.families suffices.
            for chunk in _chunks_by_regime(todo, 1):
                for cell in chunk:
                    finish(cell, _run_recorded(cell, settings))
    finally:
        if bar is not None:
            bar.stop()


def _plan_record(plan: Plan) -> dict:
    """What decides a run's numbers (compared when a folder already holds a run)."""
    return json.loads(json.dumps(plan.to_dict(), default=str))


def _cell_files(plan: Plan) -> set[Path]:
    """The cell files ``plan`` writes, relative to its ``--out`` (its cells' identities)."""
    settings = plan.settings()
    return {_cell_path(Path(), c, settings) for c in plan.cells()}


def _show(value: object) -> str:
    return json.dumps(value, default=str) if isinstance(value, list | tuple) else repr(value)


def _change(grid, field: str, old: object, new: object) -> str:
    """What changing ``grid``'s ``field`` from ``old`` to ``new`` does, in words: the values a
    list adds and drops (``"ddtree.budgets adds 8"``), or ``"ddtree.rounds 6 -> 8"``; for a
    list that is not a cell axis (each cell holds all its values), why that touches every
    finished cell."""
    key = f"{grid.family}.{field}"
    if not (isinstance(old, list | tuple) and isinstance(new, list | tuple)):
        return f"{key} {_show(old)} -> {_show(new)}"
    added = [x for x in new if x not in old]
    dropped = [x for x in old if x not in new]
    if not added and not dropped:
        return f"{key} reorders {_show(old)} -> {_show(new)}"
    parts = ([f"adds {', '.join(map(str, added))}"] if added else []) + (
        [f"drops {', '.join(map(str, dropped))}"] if dropped else [])
    text = f"{key} {' and '.join(parts)} ({_show(old)} -> {_show(new)})"
    axes = getattr(type(grid), "cell_axes", ("regimes", "temperatures"))
    if field not in axes:
        text += (f": every {grid.family} cell holds all its {field}, so each finished one "
                 "would change")
    elif dropped:
        text += f": the finished cells of the dropped {field} would be lost"
    return text


def _changes_to_finished(recorded: dict, plan: Plan) -> list[str] | None:
    """What in ``plan`` would change or drop a cell of the finished run whose plan record is
    ``recorded``: ``[]`` if every one of its cells is in ``plan`` with the same settings (a
    grid that only gains regimes, temperatures or other new cells), else one phrase per
    setting to blame (``"ddtree.rounds 6 -> 8"``); None if this version cannot read the
    record back (then only an identical record is accepted).
    """
    try:
        before = plan_from_dict(recorded, source="run.json")
    except (ValueError, TypeError):
        return None
    finished = _cell_files(before)
    if finished <= _cell_files(plan):
        return []
    blame, every = [], []
    for key in ("seed", "cost_model", "trace", "trace_sha256"):
        old, new = getattr(before, key), getattr(plan, key)
        if old != new:
            every.append(f"{key} {old!r} -> {new!r}")
            blame.append(every[-1])  # in every cell's file name or fingerprint
    grids = {g.family: g for g in plan.grids}
    for g in before.grids:
        now = grids.get(g.family)
        if now is None:
            every.append(f"the {g.family} family is dropped")
            blame.append(every[-1])
            continue
        own = _cell_files(_alone(before, g))
        for f in dataclasses.fields(g):
            old, new = getattr(g, f.name), getattr(now, f.name)
            if old == new:
                continue
            every.append(_change(g, f.name, old, new))
            # this change alone: does the family keep every finished cell?
            try:
                alone = _alone(before, dataclasses.replace(g, **{f.name: new}))
                kept = own <= _cell_files(alone)
            except ValueError:
                kept = False
            if not kept:
                blame.append(every[-1])
    return blame or every


def _alone(plan: Plan, grid) -> Plan:
    """``grid`` alone with ``plan``'s seed, cost model and trace."""
    return Plan((grid,), seed=plan.seed, cost_model=plan.cost_model, trace=plan.trace,
                trace_sha256=plan.trace_sha256)


def check_out(out: Path, plan: Plan, *, resume: bool) -> dict | None:
    """Refuse an ``--out`` that would lose or silently replace a run; return the record of a
    finished run there (to be resumed), or None.

    ``out`` may be new or empty (but for its lock file, :func:`out_lock`). A folder holding a
    finished run (``run.json``) needs ``--resume``, and then ``plan`` must keep every one of
    its cells with the settings they were run with: a grid that gains regimes, temperatures or
    other new cells is accepted (only the new cells are computed); one that changes the seed,
    rounds, worlds, a cost model, ... or drops cells is refused, naming what changed. A folder
    holding cells of an unfinished run needs ``--resume``. A file is refused.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out: {out} is a file, not a folder; name a new folder")
    if not out.is_dir() or not any(p.name != LOCK_NAME for p in out.iterdir()):
        return None
    record_path = out / "run.json"
    if record_path.is_file():
        try:
            record = read_json(record_path, "run record")
            if not isinstance(record, dict):
                raise ValueError(f"{record_path}: not a JSON object")
        except (OSError, ValueError) as exc:
            raise ValueError(f"--out: {out} holds an unreadable run record ({exc}); name a "
                             "new folder") from None
        what = (f"a finished run (preset {record.get('preset')!r}, {record.get('cells')} "
                f"cells, started {record.get('started', '?')})")
        recorded = record.get("plan")
        changes = [] if recorded == _plan_record(plan) else (
            _changes_to_finished(recorded, plan) if isinstance(recorded, dict) else None)
        if changes is None:
            raise ValueError(f"--out: {out} holds {what} with other settings (its plan record "
                             "is not one this version reads back); name a new folder")
        if changes:
            raise ValueError(
                f"--out: {out} holds {what} with other settings: {'; '.join(changes)}. That "
                "would change or drop its finished cells; name a new folder (--resume keeps a "
                "finished run's cells and only adds new ones: more regimes, temperatures, "
                "...)")
        if not resume:
            same = recorded == _plan_record(plan)
            raise ValueError(
                f"--out: {out} holds {what} with these settings; pass --resume to reuse it, or "
                "name a new folder" if same else
                f"--out: {out} holds {what}; this grid keeps its cells and adds "
                f"{len(_cell_files(plan) - _cell_files(plan_from_dict(recorded)))} new "
                "one(s): pass --resume to compute only those, or name a new folder")
        return record
    if (out / "cells").is_dir():
        if not resume:
            raise ValueError(f"--out: {out} holds the cells of an unfinished run; pass "
                             "--resume to continue it, or name a new folder")
        return None
    raise ValueError(f"--out: {out} is a folder with other files in it; name a new or empty "
                     "folder")


#: What a resumed run keeps of each earlier run's record (``run.json``'s ``earlier_runs``).
EARLIER_RUN_KEYS = ("started", "elapsed_s", "git_commit", "cells", "cells_skipped_on_resume",
                    "workers", "scheduler", "command")


def _earlier_runs(previous: dict | None) -> list[dict]:
    """The earlier runs of a folder being resumed, oldest first: each one's
    :data:`EARLIER_RUN_KEYS` (so resuming never loses when, how fast and from which commit
    the reused cells were computed)."""
    if not previous:
        return []
    return [*previous.get("earlier_runs", []),
            {k: previous.get(k) for k in EARLIER_RUN_KEYS}]


def _load_cell(path: Path) -> list[dict] | None:
    """A saved cell's rows, or None (with a warning, the file set aside) if it is corrupted."""
    try:
        rows = read_json(path, "cell file")
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ValueError("not a list of rows")
        return rows
    except (OSError, ValueError) as exc:
        aside = path.with_name(path.name + ".corrupt")
        os.replace(path, aside)
        print(f"warning: cell file {path} is corrupted ({exc}); set aside as {aside.name} "
              "and recomputed", file=sys.stderr)
        return None


def run_plan(plan: Plan, out: Path, *, resume: bool = False, workers: int = 1,
             scheduler: str | None = None, plot: bool = True, progress: bool = True,
             preset: str | None = None) -> list[dict]:
    """Run every cell of ``plan`` into ``out``; return the rows (in plan order).

    ``out`` is locked for the run (:func:`out_lock`: a folder another running sweep holds is
    refused) and checked (:func:`check_out`): nothing finished is lost or silently replaced.
    With ``resume``, finished cells are reused (a corrupted cell file is named, set aside and
    recomputed; a finished run's grid may gain cells) and an earlier run's figures are
    removed before new ones are drawn. Cells that priced latency outside a model's measured
    range are listed in ``run.json`` (``extrapolated``) and ``summary.md``.
    """
    out = Path(out)
    with out_lock(out):
        return _run_locked(plan, out, resume=resume, workers=workers, scheduler=scheduler,
                           plot=plot, progress=progress, preset=preset)


def _run_locked(plan: Plan, out: Path, *, resume: bool, workers: int, scheduler: str | None,
                plot: bool, progress: bool, preset: str | None) -> list[dict]:
    """:func:`run_plan`'s work, with ``out`` locked."""
    previous = check_out(out, plan, resume=resume)
    settings = plan.settings()
    cells = plan.cells()
    started = time.time()
    results: dict[str, list[dict]] = {}
    todo = []
    for cell in cells:
        path = _cell_path(out, cell, settings)
        saved = _load_cell(path) if resume and path.exists() else None
        if saved is not None:
            results[cell.key] = saved
        else:
            todo.append(cell)
    skipped = len(cells) - len(todo)

    save = functools.partial(_save_cell, out, settings)

    def done(cell: Cell, rows: list[dict]) -> None:
        path = _cell_path(out, cell, settings)
        # A local worker has saved it already during this run; anything older is rewritten.
        if not (path.exists() and path.stat().st_mtime >= started):
            save(cell, rows)
        results[cell.key] = rows

    _execute(todo, settings, workers=workers, scheduler=scheduler, done=done, progress=progress,
             save=save)
    rows = [r for c in cells for r in results[c.key]]
    _write_results(out, rows)
    record = {
        "preset": preset, "plan": plan.to_dict(), "seed": plan.seed,
        "cost_model": plan.cost_model, "cells": len(cells),
        "cells_skipped_on_resume": skipped, "workers": workers, "scheduler": scheduler,
        "versions": _versions(), "git_commit": _git_commit(),
        "started": _dt.datetime.fromtimestamp(started, _dt.UTC).isoformat(),
        "elapsed_s": time.time() - started, "command": sys.argv,
        "cost_models": _cost_provenance(plan),
        **({"trace": trace_record(plan)} if plan.trace else {}),
        # which cell priced latency outside which model's measured range (kept in the cell
        # files, so a resumed run lists its reused cells too)
        "extrapolated": [{"cell": c.key, **note} for c in cells
                         for note in _cell_extrapolation(results[c.key])],
        # a resumed run keeps the record of the runs that computed the cells it reuses
        "earlier_runs": _earlier_runs(previous) if skipped else [],
    }

    for name in (previous or {}).get("figures", []):  # never leave old figures beside new rows
        stale = out / Path(name).name
        if stale.suffix == ".png" and stale.is_file():
            stale.unlink()
    record["figures"] = write_figures(rows, out) if plot else []
    record["elapsed_s"] = time.time() - started
    atomic_write_text(out / "run.json", json.dumps(record, indent=1, default=str))
    atomic_write_text(out / "summary.md", summary_markdown(rows, record, folder=out))
    return rows


def trace_record(plan: Plan) -> dict:
    """What ``run.json`` keeps of a plan's trace (the report labels its rows with it): the
    file, its SHA-256, regime name, models, dtype, device and recorded settings."""
    tr = trace_for(plan.trace)
    h = tr.header
    return {"path": plan.trace, "sha256": plan.trace_sha256, "regime": trace_regime(plan.trace),
            "label": tr.label, "models": h.get("models"), "dtype": h.get("dtype"),
            "device": h.get("device"), "torch": h.get("torch"), "created": h.get("created"),
            "rounds": len(tr), "prompts": h.get("prompts"), "L": tr.depth, "V": tr.vocab_size,
            "settings": h.get("settings")}


def _cost_provenance(plan: Plan) -> list[dict]:

    names = {plan.cost_model}
    for g in plan.grids:
        names.update(getattr(g, "cost_models", ()))
    out = []
    for n in sorted(names):
        m = cost_model(n, plan.trace or "")
        note = getattr(m, "context_note", lambda _x: None)(1024)
        out.append({"name": n, "provenance": m.provenance, "estimate": m.estimate,
                    **({"note": note} if note else {})})
    return out


def _write_results(out: Path, rows: Sequence[dict]) -> None:
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: _csv_value(v) for k, v in r.items() if k in COLUMNS})
    atomic_write_text(out / "results.csv", buf.getvalue())


def _csv_value(v: object) -> object:
    """A cell of ``results.csv``: floats to 6 significant digits, lists ``;``-joined."""
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list | tuple):
        return ";".join(str(_csv_value(x)) for x in v)
    return v


def print_findings(claims: Sequence[Claim]) -> None:
    """The findings, one line per claim (as ``summary.md`` opens), on the console."""
    if claims:
        smoke = smoke_test(claims)
        if smoke:
            print(smoke.replace("**", ""))
        print("Findings (95% intervals; details in summary.md):")
        for line in findings_lines(claims, markdown=False):
            print(line)


def print_table(rows: Sequence[dict]) -> None:
    """The findings, then each family's headline rows (``console_rows``) as one table."""
    from rich.console import Console
    from rich.table import Table

    print_findings(all_claims(rows))
    table = Table(title="treespec sweep: each family's headline rows (every row in results.csv;"
                        " tok/s modelled, the cost model says measured or estimate)")
    for col in ("family", "regime", "method", "verifier", "T", "B", "tau", "95% interval",
                "tok/s", "cost model"):
        table.add_column(col, justify="left" if col in ("family", "regime", "method",
                                                         "verifier", "cost model") else "right")
    for family in FAMILIES.values():
        sub = [r for r in rows if r.get("family") == family.name]
        for r in family.console_rows(sub) if sub else []:
            thr = r.get("throughput_tok_s")
            ci = (f"[{r['tau_ci_low']:.2f}, {r['tau_ci_high']:.2f}]"
                  if not missing(r.get("tau_ci_low")) else "")
            table.add_row(family.name, r["regime"], r["method"], str(r.get("verifier", "")),
                          f"{r['temperature']:g}", _budget_text(r),
                          f"{r['tau_mean']:.3f}", ci, f"{thr:.0f}" if thr else "",
                          cost_label(str(r["cost_model"]), on_trace=is_trace(r["regime"]))
                          if thr else "")
    Console(width=175).print(table)


def _budget_text(r: dict) -> str:
    """The row's budget, with its mean tree size where they differ (an adaptive rule's budget
    is its cap: ``"512 (mean 61)"``)."""
    b, size = r.get("budget", ""), r.get("tree_size_mean")
    if missing(size) or missing(b) or abs(float(size) - float(b)) < 0.5:
        return str(b)
    return f"{b} (mean {float(size):.0f})"


# ----------------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    ap = OneLineParser(
        prog="python -m treespec_sim.sweep",
        description="Run the comparisons of the four method families (DDTree budgets, "
                    "CaDDTree, Tsubame and sampled chains, UniVer/Traversal vs RRSw) on "
                    "synthetic regimes; write a tidy table, a run record, figures and a "
                    "summary. With no arguments: the 'paper' preset.",
        epilog="presets: " + "; ".join(f"{k}: {v[0]}" for k, v in PRESETS.items()))
    ap.add_argument("--preset", default=None, choices=list(PRESETS),
                    help="what to run (default: paper)")
    ap.add_argument("--config", type=Path, metavar="FILE.toml",
                    help="a custom grid (TOML; see docs/usage.md); overrides --preset")
    ap.add_argument("--trace", metavar="FILE",
                    help="run the families that run on traces (ddtree, caddtree, verifiers) on "
                         "a recorded trace's rounds (docs/traces.md); with --config, replaces "
                         "its trace key (default: none)")
    ap.add_argument("--regimes", nargs="+", metavar="NAME",
                    help="replace every family's regimes: names, or fitted regimes' .json files "
                         "(python -m treespec_sim.acceptance fit --fit-out FILE)")
    ap.add_argument("--rounds", type=positive_int, help="replace every family's rounds per cell")
    ap.add_argument("--worlds", type=int,
                    help="replace every family's worlds per regime (seeds seed + i; the rounds "
                         "are split over them; default: the preset's, 3 in every preset)")
    add_seed(ap, "seed for worlds and cells (default 0)", default=None)
    ap.add_argument("--cost-model", metavar="NAME_OR_FILE",
                    help="latency model for the throughput columns: a preset ("
                         + ", ".join(sorted(COST_PRESETS)) + ") or a latency .json file "
                         "(docs/real_models.md); default: the preset's, h200-qwen3-8b")
    # --out and --workers are spelled here, not through cli.add_out: tests/test_docs.py finds
    # the options docs/ quote in the entry point's source.
    ap.add_argument("--out", type=Path,
                    help="output folder (default: runs/sweep-<preset>-<UTC time>)")
    ap.add_argument("--resume", action="store_true", help="skip cells already finished in --out")
    ap.add_argument("--workers", type=positive_int, default=1, help="local worker processes")
    ap.add_argument("--scheduler", metavar="ADDRESS",
                    help="run the cells on an existing dask.distributed scheduler")
    ap.add_argument("--no-plot", action="store_true", help="do not draw the figures")
    ap.add_argument("--quiet", action="store_true",
                    help="no progress bar and no table: print only the output folder")
    add_debug(ap)
    return ap


def plan_from_args(args: argparse.Namespace) -> Plan:
    trace = getattr(args, "trace", None)
    if trace and args.preset and not args.config:
        raise ValueError("--preset and --trace: a preset's grids run on regimes; --trace FILE "
                         "alone runs every family that runs on traces (or give --config)")
    if args.config:
        plan = load_config(args.config, trace=trace)
    elif trace:
        plan = trace_plan(trace)
    else:
        plan = get_preset(args.preset or "paper")
    mine = trace_regime(plan.trace) if plan.trace else None
    grids = []
    files = list(plan.regime_files)
    regimes = None
    if args.regimes:
        regimes = _regime_names([mine if mine and r == TRACE_WORD else r for r in args.regimes],
                                files)
    for g in plan.grids:
        changes = {}
        if regimes:
            changes["regimes"] = regimes
        if args.rounds is not None:
            changes["rounds"] = args.rounds
        if args.worlds is not None:
            changes["worlds"] = args.worlds
        grids.append(dataclasses.replace(g, **changes) if changes else g)
    return Plan(tuple(grids), seed=plan.seed if args.seed is None else args.seed,
                cost_model=args.cost_model or plan.cost_model, trace=plan.trace,
                trace_sha256=plan.trace_sha256, regime_files=tuple(files))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _main(args)
    except (ValueError, OSError) as exc:
        if args.debug:
            raise
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted; finished cells are saved (rerun with --resume)",
              file=sys.stderr)
        return 130


def _main(args: argparse.Namespace) -> int:
    if args.resume and args.out is None:
        raise ValueError("--resume needs --out (the folder of the run to resume)")
    plan = plan_from_args(args)
    name = ("config" if args.config else
            f"trace-{Path(plan.trace).stem}" if plan.trace else args.preset or "paper")
    out = args.out or Path("runs") / (
        f"sweep-{name}-{_dt.datetime.now(_dt.UTC).strftime('%Y%m%d-%H%M%S')}")
    with out_lock(out):  # held from the check to the last file (run_plan's is nested)
        check_out(out, plan, resume=args.resume)  # before any work
        if not args.quiet:
            print(f"treespec sweep: {name!r}, {len(plan.cells())} cells "
                  f"({', '.join(g.family for g in plan.grids)}) -> {out}")
        rows = run_plan(plan, out, resume=args.resume, workers=args.workers,
                        scheduler=args.scheduler, plot=not args.no_plot,
                        progress=not args.quiet, preset=name)
    extrapolated = json.loads((out / "run.json").read_text()).get("extrapolated") or []
    if extrapolated:
        models = sorted({e["model"] for e in extrapolated})
        print(f"note: {len({e['cell'] for e in extrapolated})} cell(s) priced latency outside "
              f"the measured range of {', '.join(models)}; see {out / 'summary.md'}",
              file=sys.stderr)
    if args.quiet:  # the one line a script needs: where the run is
        print(f"wrote {out}")
    else:
        print_table(rows)
        if plan.trace:
            tr = trace_for(plan.trace)
            print(f"{trace_regime(plan.trace)}: the recorded rounds of {tr.label} "
                  f"({len(tr)} rounds, {tr.header.get('dtype', '?')}; {plan.trace})")
        written = [out / "results.csv", out / "run.json", out / "summary.md"]
        print(f"wrote {', '.join(map(str, written))}"
              + ("" if args.no_plot else " and the figures"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
