"""What a sweep runs: a :class:`Plan` (grids per family, the seed, the cost model), the presets,
and the TOML config that states one (``docs/usage.md``)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .families import (
    FAMILIES,
    Cell,
    RunSettings,
    check_trace_grid,
    is_trace,
    trace_grids,
    trace_regime,
)
from .families.base import RECORDED_COST, cost_model, trace_for, trace_sha256
from .files import read_toml
from .synth import is_regime_file, regime_file, register_regime
from .validation import Interval, check_param

__all__ = ["PRESETS", "TRACE_WORD", "Plan", "get_preset", "load_config", "plan_from_dict",
           "regime_names", "trace_plan"]


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
        check_param(self.seed, "seed", Interval("int", 0, numpy=False))
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
       for p, (note, make) in f.presets.items()},
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


def regime_names(regimes, files: list[str]):
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
            values["regimes"] = regime_names(values["regimes"], files)
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


