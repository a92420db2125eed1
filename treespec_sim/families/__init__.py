r"""The sweep's families: two modules per family, one registry.

Each family (:class:`~treespec_sim.families.base.Family`) computes in one module and presents
in another. The computing module (``ddtree.py``) owns its grid (a frozen, validated
dataclass), the cells it expands into, the runner of one cell (through
:func:`treespec_sim.engine.run_round`) and the schema of its rows (a frozen
:class:`~treespec_sim.families.base.Row` dataclass, ``ddtree.row``); the presenting module
(``ddtree_report.py``) its tables and figures in the report and its claims as numbers
(:class:`Claim`), read off those rows. Presenting imports computing's public names; computing
never imports presenting (``tests/sim/test_layers.py``). :mod:`treespec_sim.sweep` and
:mod:`treespec_sim.report` loop over :data:`FAMILIES` and never name one.

``ddtree`` (:mod:`.ddtree`)
    DDTree (and the DFlash chain, the dynamic tree) across budgets and temperatures: exact
    :math:`E[\tau]`, coverage, the exit-law decomposition of lost target mass by depth and cause.
``caddtree`` (:mod:`.caddtree`)
    budget rules under latency presets: DDTree at fixed budgets and at the oracle budget,
    CaDDTree, the exhaustive argmax and the long-run rule, on the same rounds.
``stochastic`` (:mod:`.stochastic`)
    deterministic trees, sampled chains and Tsubame across temperatures and drafters.
``verifiers`` (:mod:`.verifiers`)
    RRSw, Traversal and UniVer on the same sampled trees at ``T > 0``.
``stochastic-map`` (:mod:`.stochastic_map`)
    the regime map at ``T = 1``: the drafter's sampling law and correction against the
    target's entropy, where sampled trees beat deterministic ones.
``serving`` (:mod:`.serving`)
    how big the trees should be at batch size ``b``: the best fixed budget per batch size, one
    budget shared across a batch (``batch_caddtree``), per-request CaDDTree and chains, under
    batched cost models.

A cell runs in any process (a local worker or a dask worker): :func:`run_cell` finds its
family by name, and the family builds (and caches, :func:`world_for`) its worlds; its
randomness depends only on the seed and the cell's key, so the numbers are the same whichever
process runs it. Worlds, the split of a cell's rounds over them and the row columns:
:mod:`.base`.

A trace (``docs/traces.md``) stands where a regime stands: its regime is ``"trace:<name>"``,
and a family that runs on traces has ``check_trace(grid, trace, regime)`` (refusing, before
any work, what the trace does not hold) and ``trace_preset(trace, regime)`` (its grid for
``--trace FILE``); :func:`check_trace_grid` and :func:`trace_grids` loop over them.

Adding a family: a computing module and a presenting module with the :class:`Family`
attributes (the five pairs here are the examples; one module may hold both), and one line in
the registry below (or :func:`register` from outside the package); ``docs/architecture.md``
says what its test must check.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from . import (
    caddtree,
    caddtree_report,
    ddtree,
    ddtree_report,
    serving,
    serving_report,
    stochastic,
    stochastic_map,
    stochastic_map_report,
    stochastic_report,
    verifiers,
    verifiers_report,
)
from .base import (
    COLUMNS,
    VERDICTS,
    Cell,
    Claim,
    Family,
    FigureSpec,
    Row,
    RunSettings,
    WorldShare,
    is_trace,
    throughput_columns,
    trace_regime,
    world_for,
    world_shares,
)
from .caddtree import CaDDTreeGrid
from .ddtree import DDTreeGrid
from .stochastic import StochasticGrid
from .stochastic_map import StochasticMapGrid
from .verifiers import VerifierGrid

__all__ = ["COLUMNS", "FAMILIES", "VERDICTS", "CaDDTreeGrid", "Cell", "Claim", "DDTreeGrid",
           "Family", "FigureSpec", "Row", "RunSettings", "StochasticGrid", "StochasticMapGrid",
           "VerifierGrid", "WorldShare", "all_claims", "check_trace_grid", "is_trace", "register",
           "run_cell", "throughput_columns", "trace_grids", "trace_regime", "world_for",
           "world_shares"]

#: The registry: family name -> family (:class:`Family`), in report order.
FAMILIES: dict[str, Family] = {}


def register(computing, presenting=None) -> Family:
    """Add the family of ``computing`` and ``presenting`` (its two modules, or objects with
    their names; ``presenting`` None: one module holds both) to :data:`FAMILIES`, under its
    name; returns its :class:`Family`.

    Raises
    ------
    ValueError
        A module lacks a name of :class:`Family`, the grid names another family, or the name
        is taken by another family.
    """
    family = Family.of(computing, presenting)
    if getattr(family.grid, "family", None) != family.name:
        raise ValueError(f"family {family.name!r}: its grid's family is "
                         f"{getattr(family.grid, 'family', None)!r}")
    held = FAMILIES.get(family.name)
    if held is not None and held != family:
        raise ValueError(f"a family named {family.name!r} is already registered")
    FAMILIES[family.name] = family
    return family


for _computing, _presenting in ((ddtree, ddtree_report), (caddtree, caddtree_report),
                                (stochastic, stochastic_report), (verifiers, verifiers_report),
                                (stochastic_map, stochastic_map_report),
                                (serving, serving_report)):
    register(_computing, _presenting)


def run_cell(cell: Cell, settings: RunSettings) -> list[Row]:
    """Run one cell; return its rows (its family's :class:`Row` schema).

    Pure given ``(cell, settings)``: the same inputs give the same rows in any process. The
    family's runner gives the rows; each is :meth:`~Row.stamped` with its family, the seed,
    the worlds (where the runner left them empty), the cell's key and ``wall_s`` (the cell's
    wall clock shared over its rows).
    """
    start = time.perf_counter()
    rows = FAMILIES[cell.family].run(cell, settings)
    wall = time.perf_counter() - start
    return [r.stamped(cell, settings, wall / max(1, len(rows))) for r in rows]


def all_claims(rows: Sequence[Row]) -> list[Claim]:
    """Every family's headline claims measured on ``rows``, in registry order.

    Parameters
    ----------
    rows : sequence of Row
        Result rows of any families (each family's ``claims`` gets its own; a family without
        rows gives none).

    Returns
    -------
    list of Claim
    """
    out: list[Claim] = []
    for family in FAMILIES.values():
        sub = [r for r in rows if r.family == family.name]
        if sub:
            out += family.claims(sub)
    return out


def check_trace_grid(grid, tr, regime: str) -> None:
    """Refuse, before any work, a grid whose cells on the trace ``tr`` (regime ``regime``) would
    leave its recorded data: the family's own ``check_trace`` names the key (an unrecorded
    temperature, a budget above ``B_max``, ...); a family without one does not run on traces.

    Raises
    ------
    ValueError
    """
    check = FAMILIES[grid.family].check_trace
    if check is None:
        runs = ", ".join(f for f, fam in FAMILIES.items() if fam.check_trace is not None)
        raise ValueError(f"{grid.family}: this family does not run on a trace (its rounds "
                         f"leave the recorded data); families that do: {runs}")
    check(grid, tr, regime)


def trace_grids(tr, regime: str) -> tuple:
    """Every family's grid for ``python -m treespec_sim.sweep --trace FILE`` (the families with
    a ``trace_preset``; one that returns None, e.g. the verifiers on a trace without a sampled
    tree, is left out)."""
    out = []
    for family in FAMILIES.values():
        make = family.trace_preset
        grid = make(tr, regime) if make is not None else None
        if grid is not None:
            out.append(grid)
    return tuple(out)
