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

Other presets: ``quick`` (under a minute), one per family (``ddtree``, ``caddtree``,
``stochastic``, ``verifiers``, ``stochastic-map``: the regime map at ``T = 1``) and the further
presets a family names (``verifiers-engines``); ``--config FILE.toml`` for custom grids
(validated before any work starts); ``--trace FILE`` (or ``trace = "FILE"`` in a config) runs
the families that run on traces on a recorded trace's rounds, the trace standing where a
regime stands (``docs/traces.md``, "The sweep on a trace"; :func:`trace_plan`). Outputs, in
``--out`` (default ``runs/sweep-<preset>-<time>``):

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
import dataclasses
import datetime as _dt
import functools
import json
import math
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .cli import OneLineParser, add_debug, add_seed, positive_int
from .cost import PRESETS as COST_PRESETS
from .cost import record_extrapolation
from .families import (
    COLUMNS,
    FAMILIES,
    Cell,
    Claim,
    Row,
    RunSettings,
    all_claims,
    is_trace,
    run_cell,
    trace_regime,
)
from .families.base import cost_model, smoke_test, trace_for
from .families.render import cost_label, missing
from .files import atomic_write_text
from .provenance import git_commit, versions
from .report import findings_lines, summary_markdown, write_figures
from .sweep_lock import LOCK_NAME, out_lock
from .sweep_plan import (
    PRESETS,
    TRACE_WORD,
    Plan,
    get_preset,
    load_config,
    plan_from_dict,
    regime_names,
    trace_plan,
)
from .sweep_store import (
    EARLIER_RUN_KEYS,
    cell_path,
    check_out,
    earlier_runs,
    load_cell,
    save_cell,
    write_results,
)
from .warmup import warm_up

__all__ = ["COLUMNS", "EARLIER_RUN_KEYS", "LOCK_NAME", "PRESETS", "Plan", "check_out",
           "load_config", "main", "out_lock", "plan_from_dict", "run_plan", "trace_plan",
           "trace_record"]

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


def _run_recorded(cell: Cell, settings: RunSettings) -> list[Row]:
    """:func:`run_cell`, with the cell's latency-model extrapolations on its rows.

    Every request a latency model priced outside its measured range during the cell
    (:func:`treespec_sim.cost.record_extrapolation`) goes, as a list of records, under the
    rows' ``extrapolated`` field (empty if there was none): the rows are what a worker
    returns and what the cell file keeps, so the record survives worker processes, dask and
    ``--resume``.
    """
    settings.register_regimes()  # a worker process knows the plan's file regimes by name
    warm_up()                    # once per process; dask's workers compile once per machine
    with record_extrapolation() as log:
        rows = run_cell(cell, settings)
    notes = log.records()
    if notes:
        rows = [dataclasses.replace(r, extrapolated=notes) for r in rows]
    return rows


def _cell_extrapolation(rows: Sequence[Row]) -> list[dict]:
    """The extrapolation records a cell's rows carry (see :func:`_run_recorded`)."""
    return list(rows[0].get("extrapolated") or []) if rows else []


def _run_chunk(cells: list[Cell], settings: RunSettings,
               save: Callable[[Cell, list[Row]], None] | None) -> list[list[Row]]:
    """Run ``cells`` in order in one worker; ``save`` each as it finishes (nothing is lost)."""
    out = []
    for cell in cells:
        rows = _run_recorded(cell, settings)
        if save is not None:
            save(cell, rows)
        out.append(rows)
    return out


def _run_indexed_chunk(task: tuple) -> tuple[int, list[list[Row]]]:
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
             done: Callable[[Cell, list[Row]], None], progress: bool,
             save: Callable[[Cell, list[Row]], None] | None = None) -> None:
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

    def finish(cell: Cell, rows: list[Row]) -> None:
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


def run_plan(plan: Plan, out: Path, *, resume: bool = False, workers: int = 1,
             scheduler: str | None = None, plot: bool = True, progress: bool = True,
             preset: str | None = None) -> list[Row]:
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
                plot: bool, progress: bool, preset: str | None) -> list[Row]:
    """:func:`run_plan`'s work, with ``out`` locked."""
    previous = check_out(out, plan, resume=resume)
    settings = plan.settings()
    cells = plan.cells()
    started = time.time()
    results: dict[str, list[Row]] = {}
    todo = []
    for cell in cells:
        path = cell_path(out, cell, settings)
        saved = (load_cell(path, FAMILIES[cell.family].row) if resume and path.exists()
                 else None)
        if saved is not None:
            results[cell.key] = saved
        else:
            todo.append(cell)
    skipped = len(cells) - len(todo)

    save = functools.partial(save_cell, out, settings)

    def done(cell: Cell, rows: list[Row]) -> None:
        path = cell_path(out, cell, settings)
        # A local worker has saved it already during this run; anything older is rewritten.
        if not (path.exists() and path.stat().st_mtime >= started):
            save(cell, rows)
        results[cell.key] = rows

    _execute(todo, settings, workers=workers, scheduler=scheduler, done=done, progress=progress,
             save=save)
    rows = [r for c in cells for r in results[c.key]]
    write_results(out, rows)
    record = {
        "preset": preset, "plan": plan.to_dict(), "seed": plan.seed,
        "cost_model": plan.cost_model, "cells": len(cells),
        "cells_skipped_on_resume": skipped, "workers": workers, "scheduler": scheduler,
        "versions": versions(), "git_commit": git_commit(),
        "started": _dt.datetime.fromtimestamp(started, _dt.UTC).isoformat(),
        "elapsed_s": time.time() - started, "command": sys.argv,
        "cost_models": _cost_provenance(plan),
        **({"trace": trace_record(plan)} if plan.trace else {}),
        # which cell priced latency outside which model's measured range (kept in the cell
        # files, so a resumed run lists its reused cells too)
        "extrapolated": [{"cell": c.key, **note} for c in cells
                         for note in _cell_extrapolation(results[c.key])],
        # a resumed run keeps the record of the runs that computed the cells it reuses
        "earlier_runs": earlier_runs(previous) if skipped else [],
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


def print_findings(claims: Sequence[Claim]) -> None:
    """The findings, one line per claim (as ``summary.md`` opens), on the console."""
    if claims:
        smoke = smoke_test(claims)
        if smoke:
            print(smoke.replace("**", ""))
        print("Findings (95% intervals; details in summary.md):")
        for line in findings_lines(claims, markdown=False):
            print(line)


def print_table(rows: Sequence[Row]) -> None:
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
        sub = [r for r in rows if r.family == family.name]
        for r in family.console_rows(sub) if sub else []:
            thr = r.get("throughput_tok_s")
            ci = (f"[{r.get('tau_ci_low'):.2f}, {r.get('tau_ci_high'):.2f}]"
                  if not missing(r.get("tau_ci_low")) else "")
            regime = r.get("regime")
            table.add_row(family.name, regime, r.get("method"), str(r.get("verifier", "")),
                          f"{r.get('temperature'):g}", _budget_text(r),
                          f"{r.get('tau_mean'):.3f}", ci, f"{thr:.0f}" if thr else "",
                          cost_label(str(r.get("cost_model")), on_trace=is_trace(regime))
                          if thr else "")
    Console(width=175).print(table)


def _budget_text(r: Row) -> str:
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
        regimes = regime_names([mine if mine and r == TRACE_WORD else r for r in args.regimes],
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
