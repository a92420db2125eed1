"""Where a sweep keeps its results: one JSON file per finished cell (named by the cell and a
fingerprint of what its rows depend on), the checks of ``--resume`` against the run record, and
the tidy ``results.csv``."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path

from .families import (
    COLUMNS,
    Cell,
    Row,
    RunSettings,
    is_trace,
)
from .files import atomic_write_text, read_json
from .sweep_lock import LOCK_NAME
from .sweep_plan import Plan, plan_from_dict

__all__ = ["EARLIER_RUN_KEYS", "cell_files", "cell_fingerprint", "cell_path",
           "changes_to_finished", "check_out", "csv_value", "earlier_runs", "load_cell",
           "plan_record", "save_cell", "write_results"]


def cell_fingerprint(cell: Cell, settings: RunSettings) -> str:
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


def cell_path(out: Path, cell: Cell, settings: RunSettings) -> Path:
    return (out / "cells" / cell.family
            / f"{cell.key}__s{settings.seed}__{cell_fingerprint(cell, settings)}.json")


def save_cell(out: Path, settings: RunSettings, cell: Cell, rows: list[Row]) -> None:
    """The cell's rows, each as :meth:`~treespec_sim.families.Row.as_dict`, in one JSON file
    (written atomically)."""
    atomic_write_text(cell_path(out, cell, settings), json.dumps([r.as_dict() for r in rows]))


def plan_record(plan: Plan) -> dict:
    """What decides a run's numbers (compared when a folder already holds a run)."""
    return json.loads(json.dumps(plan.to_dict(), default=str))


def cell_files(plan: Plan) -> set[Path]:
    """The cell files ``plan`` writes, relative to its ``--out`` (its cells' identities)."""
    settings = plan.settings()
    return {cell_path(Path(), c, settings) for c in plan.cells()}


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


def changes_to_finished(recorded: dict, plan: Plan) -> list[str] | None:
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
    finished = cell_files(before)
    if finished <= cell_files(plan):
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
        own = cell_files(_alone(before, g))
        for f in dataclasses.fields(g):
            old, new = getattr(g, f.name), getattr(now, f.name)
            if old == new:
                continue
            every.append(_change(g, f.name, old, new))
            # this change alone: does the family keep every finished cell?
            try:
                alone = _alone(before, dataclasses.replace(g, **{f.name: new}))
                kept = own <= cell_files(alone)
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
        changes = [] if recorded == plan_record(plan) else (
            changes_to_finished(recorded, plan) if isinstance(recorded, dict) else None)
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
            same = recorded == plan_record(plan)
            raise ValueError(
                f"--out: {out} holds {what} with these settings; pass --resume to reuse it, or "
                "name a new folder" if same else
                f"--out: {out} holds {what}; this grid keeps its cells and adds "
                f"{len(cell_files(plan) - cell_files(plan_from_dict(recorded)))} new "
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


def earlier_runs(previous: dict | None) -> list[dict]:
    """The earlier runs of a folder being resumed, oldest first: each one's
    :data:`EARLIER_RUN_KEYS` (so resuming never loses when, how fast and from which commit
    the reused cells were computed)."""
    if not previous:
        return []
    return [*previous.get("earlier_runs", []),
            {k: previous.get(k) for k in EARLIER_RUN_KEYS}]


def load_cell(path: Path, row: type[Row]) -> list[Row] | None:
    """A saved cell's rows, read as its family's schema ``row``, or None (with a warning, the
    file set aside) if it is corrupted or not rows of that schema."""
    try:
        data = read_json(path, "cell file")
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise ValueError("not a list of rows")
        try:
            return [row.from_dict(r) for r in data]
        except TypeError as exc:  # a field the schema needs is missing
            raise ValueError(f"not {row.__name__} rows ({exc})") from None
    except (OSError, ValueError) as exc:
        aside = path.with_name(path.name + ".corrupt")
        os.replace(path, aside)
        print(f"warning: cell file {path} is corrupted ({exc}); set aside as {aside.name} "
              "and recomputed", file=sys.stderr)
        return None


def write_results(out: Path, rows: Sequence[Row]) -> None:
    """``results.csv``: every family's rows (their :data:`COLUMNS`; a column a family's rows
    leave empty, an empty cell), one writer for all."""
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: csv_value(v) for k, v in r.as_dict().items() if k in COLUMNS})
    atomic_write_text(out / "results.csv", buf.getvalue())


def csv_value(v: object) -> object:
    """A cell of ``results.csv``: floats to 6 significant digits, lists ``;``-joined."""
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list | tuple):
        return ";".join(str(csv_value(x)) for x in v)
    return v


