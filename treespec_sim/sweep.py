"""The sweep: run a grid of (regime, method, verifier, temperature, budget) cells.

``python -m treespec_sim.sweep`` with no arguments runs the ``default`` preset: three synthetic
regimes (low / mid / high entropy, V = 32768, L = 15) x budgets 16..512 x T in {0, 1} for the
DFlash chain and DDTree, verified by predraw-and-follow. It prints a table and writes, into an
output folder it names:

``results.csv``
    the tidy table, one row per cell and seed (columns: :data:`COLUMNS`);
``cells/*.json``
    one file per finished cell, written atomically; ``--resume`` skips cells found here;
``run.json``
    the run record: config, seed, versions, git commit, timings;
``tau_vs_budget.png``
    expected tokens per round against budget, one panel per regime;
``summary.md``
    a short human-readable summary.

Each cell's randomness comes from ``numpy.random.default_rng([seed, crc32(cell key)])``, so a
cell gives the same numbers whether it runs alone, in a full sweep, or after a resume.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as _dt
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import __version__
from .engine import run_rounds, summarize
from .policies import POLICIES
from .verify import RULES

__all__ = ["COLUMNS", "EXPERIMENT_PRESETS", "PRESETS", "Cell", "SweepConfig", "main", "run_cell",
           "run_sweep"]

#: Columns of ``results.csv``, in order.
COLUMNS = (
    "regime", "method", "verifier", "temperature", "budget", "rounds", "seed",
    "tau_mean", "tau_ci_low", "tau_ci_high",
    "sampled_tau_mean", "sampled_tau_ci_low", "sampled_tau_ci_high",
    "tree_size_mean", "coverage_mean", "surrogate_mean",
    "lost_uncovered", "lost_budget", "lost_depth_cap", "wall_s",
)


@dataclass(frozen=True)
class SweepConfig:
    """A grid of cells plus how much to simulate per cell."""

    regimes: tuple[str, ...]
    methods: tuple[str, ...]
    budgets: tuple[int, ...]
    temperatures: tuple[float, ...]
    rule: str = "follow"
    rounds: int = 64
    # 1 = every round starts from a fresh context drawn from the target's own (T = 1) process.
    # A first-order synthetic world has few states, so long greedy (T = 0) runs revisit the
    # same ones; independent contexts keep rounds representative and the CI a plain t-interval.
    rounds_per_sequence: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        from .synth import REGIMES

        for name in self.regimes:
            if name not in REGIMES:
                raise ValueError(f"regimes: unknown regime {name!r}; known regimes: "
                                 f"{', '.join(sorted(REGIMES))}")
        for m in self.methods:
            if m not in POLICIES:
                raise ValueError(f"methods: unknown method {m!r}; known methods: "
                                 f"{', '.join(sorted(POLICIES))}")
        if self.rule not in RULES:
            raise ValueError(f"rule: unknown rule {self.rule!r}; known rules: "
                             f"{', '.join(sorted(RULES))}")
        if not self.budgets or any(b < 0 for b in self.budgets):
            raise ValueError(f"budgets must be non-negative integers; got {self.budgets}")
        if any(not (t >= 0 and math.isfinite(t)) for t in self.temperatures):
            raise ValueError(f"temperatures must be finite and >= 0; got {self.temperatures}")
        if self.rounds < 2 or self.rounds_per_sequence < 1:
            raise ValueError("rounds must be >= 2 and rounds_per_sequence >= 1")

    def cells(self) -> list[Cell]:
        """Every cell of the grid. The chain ignores the budget: it runs once per (regime, T),
        recorded at budget L."""
        out = []
        for regime in self.regimes:
            for t in self.temperatures:
                for m in self.methods:
                    budgets = (0,) if m == "chain" else self.budgets
                    out.extend(Cell(regime, m, self.rule, float(t), int(b)) for b in budgets)
        return out


@dataclass(frozen=True)
class Cell:
    regime: str
    method: str
    verifier: str
    temperature: float
    budget: int  # 0 for the chain: it always drafts L tokens

    @property
    def key(self) -> str:
        return (f"{self.regime}__{self.method}__{self.verifier}__T{self.temperature!r}"
                f"__B{self.budget}")


#: Named presets.
PRESETS: dict[str, SweepConfig] = {
    "default": SweepConfig(
        regimes=("low-entropy", "mid-entropy", "high-entropy"),
        methods=("chain", "ddtree"),
        budgets=(16, 32, 64, 128, 256, 512),
        temperatures=(0.0, 1.0),
        rounds=64,
    ),
    "quick": SweepConfig(
        regimes=("small", "mid-entropy"),
        methods=("chain", "ddtree"),
        budgets=(16, 64),
        temperatures=(0.0, 1.0),
        rounds=16,
    ),
}


#: Presets that run a dedicated experiment instead of the cell grid (options they honour:
#: --regimes, --rounds, --seed, --out, --resume, --quiet; the first temperature given).
EXPERIMENT_PRESETS = {
    "caddtree": "budget rules under latency presets: DDTree at fixed and oracle budgets, "
                "CaDDTree, exhaustive, long-run (treespec_sim.experiments.budget_choice)",
    "stochastic": "T in {0, 0.6, 1}: deterministic trees, sampled chains and Tsubame, drafters "
                  "without/with corrections (treespec_sim.experiments.stochastic)",
}


def _run_experiment(args: argparse.Namespace, out: Path) -> int:
    if args.preset == "stochastic":
        return _run_stochastic(args, out)
    from .experiments import budget_choice

    regimes = args.regimes or ["low-entropy", "mid-entropy", "high-entropy"]
    temperature = args.temperatures[0] if args.temperatures else 0.0
    rounds = args.rounds or 256
    if not args.quiet:
        print(f"treespec sweep: preset {args.preset!r} ({EXPERIMENT_PRESETS[args.preset]}), "
              f"{rounds} rounds per regime -> {out}")
    results = budget_choice.run(regimes, ["a800-qwen3-8b", "h200-qwen3-8b",
                                          "tiled-illustrative"],
                                rounds=rounds, temperature=temperature, seed=args.seed or 0,
                                context_length=budget_choice.DEFAULT_CONTEXT_LENGTH, out=out,
                                resume=args.resume, progress=not args.quiet)
    if not args.quiet:
        print(budget_choice.results_table(results))
        print(f"wrote {out / 'budget_choice.csv'}, {out / 'budget_choice.md'}, "
              f"{out / 'throughput_vs_budget.png'}")
    return 0


def _run_stochastic(args: argparse.Namespace, out: Path) -> int:
    from .experiments import stochastic

    argv = ["--out", str(out)]
    if args.regimes:
        argv += ["--regimes", *args.regimes]
    if args.temperatures:
        argv += ["--temperatures", *map(str, args.temperatures)]
    if args.budgets:
        argv += ["--budgets", *map(str, args.budgets)]
    if args.methods:
        argv += ["--methods", *args.methods]
    if args.rounds:
        argv += ["--rounds", str(args.rounds)]
    if args.seed is not None:
        argv += ["--seed", str(args.seed)]
    if args.resume:
        argv.append("--resume")
    if not args.quiet:
        print(f"treespec sweep: preset 'stochastic' -> {out}")
    return stochastic.main(argv)


def _cell_rng(seed: int, cell: Cell) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(cell.key.encode())])


def run_cell(cell: Cell, config: SweepConfig, world=None) -> dict:
    """Simulate one cell; return its row of the results table."""
    from .synth import make_world

    if world is None:
        world = make_world(cell.regime, seed=config.seed)
    budget = world.depth if cell.method == "chain" else cell.budget
    t0 = time.perf_counter()
    seqs = run_rounds(world, policy=cell.method, budget=budget, rule=cell.verifier,
                      temperature=cell.temperature, rounds=config.rounds,
                      rng=_cell_rng(config.seed, cell),
                      rounds_per_sequence=config.rounds_per_sequence)
    s = summarize(seqs)
    return {
        "regime": cell.regime, "method": cell.method, "verifier": cell.verifier,
        "temperature": cell.temperature, "budget": budget, "rounds": s.rounds,
        "seed": config.seed,
        "tau_mean": s.expected_tau.mean, "tau_ci_low": s.expected_tau.low,
        "tau_ci_high": s.expected_tau.high,
        "sampled_tau_mean": s.sampled_tau.mean, "sampled_tau_ci_low": s.sampled_tau.low,
        "sampled_tau_ci_high": s.sampled_tau.high,
        "tree_size_mean": s.tree_size, "coverage_mean": s.coverage,
        "surrogate_mean": s.surrogate,
        "lost_uncovered": s.exit_by_cause["uncovered"],
        "lost_budget": s.exit_by_cause["budget"],
        "lost_depth_cap": s.exit_by_cause["depth_cap"],
        "wall_s": time.perf_counter() - t0,
    }


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _git_commit() -> str:
    try:
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=5, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _versions() -> dict[str, str]:
    import scipy

    return {"treespec": __version__, "python": sys.version.split()[0],
            "numpy": np.__version__, "scipy": scipy.__version__,
            "platform": platform.platform()}


def run_sweep(config: SweepConfig, out: Path, *, resume: bool = False, plot: bool = True,
              progress: bool = True, preset: str | None = None) -> list[dict]:
    """Run every cell of ``config`` into ``out``; return the results rows (grid order)."""
    from .synth import make_world

    out = Path(out)
    cells_dir = out / "cells"
    cells = config.cells()
    started = time.time()
    rows: list[dict] = []
    todo = []
    for cell in cells:
        path = cells_dir / f"{cell.key}__s{config.seed}.json"
        done = json.loads(path.read_text()) if resume and path.exists() else None
        if done is not None and done.get("rounds") == config.rounds:
            rows.append(done)
        else:  # not finished, or finished under another round count: (re)compute
            todo.append((cell, path))
    skipped = len(cells) - len(todo)
    worlds: dict[str, object] = {}

    def work(cell: Cell, path: Path) -> None:
        if cell.regime not in worlds:
            worlds[cell.regime] = make_world(cell.regime, seed=config.seed)
        row = run_cell(cell, config, worlds[cell.regime])
        _atomic_write(path, json.dumps(row, indent=1))
        rows.append(row)

    if progress and todo:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        with Progress("[progress.description]{task.description}", BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn()) as bar:
            task = bar.add_task("cells", total=len(todo))
            for cell, path in todo:
                bar.update(task, description=cell.key)
                work(cell, path)
                bar.advance(task)
    else:
        for cell, path in todo:
            work(cell, path)

    order = {c.key: i for i, c in enumerate(cells)}
    rows.sort(key=lambda r: order[Cell(r["regime"], r["method"], r["verifier"],
                                       r["temperature"],
                                       0 if r["method"] == "chain" else r["budget"]).key])
    _write_results(out, rows)
    record = {
        "preset": preset,
        "config": dataclasses.asdict(config),
        "seed": config.seed,
        "cells": len(cells),
        "cells_skipped_on_resume": skipped,
        "versions": _versions(),
        "git_commit": _git_commit(),
        "started": _dt.datetime.fromtimestamp(started, _dt.UTC).isoformat(),
        "elapsed_s": time.time() - started,
        "cost_model": None,  # latency models arrive with the cost-aware issue
        "command": sys.argv,
    }
    _atomic_write(out / "run.json", json.dumps(record, indent=1))
    if plot:
        plot_tau_vs_budget(rows, out / "tau_vs_budget.png")
    _atomic_write(out / "summary.md", summary_markdown(rows, config, record))
    return rows


def _write_results(out: Path, rows: Sequence[dict]) -> None:
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    _atomic_write(out / "results.csv", buf.getvalue())


def plot_tau_vs_budget(rows: Sequence[dict], path: Path) -> None:
    """Expected tokens per round vs budget: one panel per regime, one line per (method, T)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    regimes = list(dict.fromkeys(r["regime"] for r in rows))
    fig, axes = plt.subplots(1, len(regimes), figsize=(4.2 * len(regimes), 3.6), squeeze=False)
    for ax, regime in zip(axes[0], regimes, strict=True):
        sub = [r for r in rows if r["regime"] == regime]
        for t in sorted({r["temperature"] for r in sub}):
            tree = sorted((r for r in sub if r["method"] != "chain" and r["temperature"] == t),
                          key=lambda r: r["budget"])
            for method in dict.fromkeys(r["method"] for r in tree):
                pts = [r for r in tree if r["method"] == method]
                x = [r["budget"] for r in pts]
                y = np.array([r["tau_mean"] for r in pts])
                lo = np.array([r["tau_ci_low"] for r in pts])
                hi = np.array([r["tau_ci_high"] for r in pts])
                line, = ax.plot(x, y, marker="o", label=f"{method}, T={t:g}")
                ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2)
            for r in sub:
                if r["method"] == "chain" and r["temperature"] == t:
                    ax.axhline(r["tau_mean"], ls="--", lw=1, color="gray" if t else "black",
                               label=f"chain (L={r['budget']}), T={t:g}")
        ax.set_xscale("log", base=2)
        ax.set_title(regime)
        ax.set_xlabel("budget B (non-root nodes)")
        ax.set_ylabel("E[tokens per round]")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def summary_markdown(rows: Sequence[dict], config: SweepConfig, record: dict) -> str:
    lines = [
        "# Sweep summary",
        "",
        f"Git commit `{record['git_commit']}`, seed {config.seed}, {config.rounds} rounds per "
        f"cell ({config.rounds_per_sequence} per decoded sequence), verifier "
        f"`{config.rule}`. tau = exact expected tokens per round (bonus included) of each "
        f"round's tree, averaged over rounds; 95% CI over sequences.",
        "",
        "| regime | method | T | budget | tau | 95% CI | coverage | surrogate | "
        "lost: uncovered / budget / depth cap |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['regime']} | {r['method']} | {r['temperature']:g} | {r['budget']} | "
            f"{r['tau_mean']:.2f} | [{r['tau_ci_low']:.2f}, {r['tau_ci_high']:.2f}] | "
            f"{r['coverage_mean']:.2f} | {r['surrogate_mean']:.2f} | "
            f"{r['lost_uncovered']:.2f} / {r['lost_budget']:.2f} / {r['lost_depth_cap']:.2f} |")
    lines += ["", "![tau vs budget](tau_vs_budget.png)", ""]
    return "\n".join(lines)


def print_table(rows: Sequence[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="E[tokens per round] (exact per round; 95% CI over sequences)")
    for col in ("regime", "method", "T", "B", "tau", "95% CI", "coverage", "surrogate",
                "size"):
        table.add_column(col, justify="right" if col not in ("regime", "method") else "left")
    for r in rows:
        table.add_row(r["regime"], r["method"], f"{r['temperature']:g}", str(r["budget"]),
                      f"{r['tau_mean']:.2f}",
                      f"[{r['tau_ci_low']:.2f}, {r['tau_ci_high']:.2f}]",
                      f"{r['coverage_mean']:.2f}", f"{r['surrogate_mean']:.2f}",
                      f"{r['tree_size_mean']:.0f}")
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)
    console.print(table)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m treespec_sim.sweep",
        description="Simulate draft trees over a grid of synthetic regimes, methods, "
                    "temperatures and budgets; write a tidy table, a run record, a plot and a "
                    "summary. With no arguments: the 'default' preset.")
    ap.add_argument("--preset", default="default",
                    choices=sorted(PRESETS) + sorted(EXPERIMENT_PRESETS),
                    help="starting grid (default: %(default)s); the options below override it")
    ap.add_argument("--regimes", nargs="+", metavar="NAME",
                    help="synthetic regimes (see treespec_sim.synth.REGIMES)")
    ap.add_argument("--methods", nargs="+", metavar="NAME",
                    help=f"tree policies: {', '.join(sorted(POLICIES))}")
    ap.add_argument("--budgets", nargs="+", type=int, metavar="B",
                    help="non-root node budgets (the chain always uses L)")
    ap.add_argument("--temperatures", nargs="+", type=float, metavar="T",
                    help="target sampling temperatures (0 = greedy)")
    ap.add_argument("--rule", help=f"verifier: {', '.join(sorted(RULES))}")
    ap.add_argument("--rounds", type=int, help="rounds per cell")
    ap.add_argument("--rounds-per-sequence", type=int,
                    help="rounds per decoded sequence (the unit of the confidence intervals)")
    ap.add_argument("--seed", type=int, help="seed for worlds and cells (default 0)")
    ap.add_argument("--out", type=Path,
                    help="output folder (default: runs/sweep-<preset>-<UTC time>)")
    ap.add_argument("--resume", action="store_true",
                    help="skip cells already finished in --out")
    ap.add_argument("--no-plot", action="store_true", help="do not draw tau_vs_budget.png")
    ap.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    return ap


def config_from_args(args: argparse.Namespace) -> SweepConfig:
    base = PRESETS[args.preset]
    changes = {}
    for name in ("regimes", "methods", "budgets", "temperatures"):
        value = getattr(args, name)
        if value is not None:
            changes[name] = tuple(value)
    for name in ("rule", "rounds", "rounds_per_sequence", "seed"):
        value = getattr(args, name)
        if value is not None:
            changes[name] = value
    return dataclasses.replace(base, **changes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.preset in EXPERIMENT_PRESETS:
        if args.resume and args.out is None:
            parser.error("--resume needs --out (the folder of the run to resume)")
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%d-%H%M%S")
        try:
            return _run_experiment(args, args.out or Path("runs") / f"sweep-{args.preset}-{stamp}")
        except ValueError as exc:
            parser.error(str(exc))
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    if args.resume and args.out is None:
        parser.error("--resume needs --out (the folder of the run to resume)")
    out = args.out or Path("runs") / (
        f"sweep-{args.preset}-{_dt.datetime.now(_dt.UTC).strftime('%Y%m%d-%H%M%S')}")
    if not args.quiet:
        print(f"treespec sweep: preset {args.preset!r}, {len(config.cells())} cells, "
              f"{config.rounds} rounds each -> {out}")
    rows = run_sweep(config, out, resume=args.resume, plot=not args.no_plot,
                     progress=not args.quiet, preset=args.preset)
    if not args.quiet:
        print_table(rows)
        print(f"wrote {out / 'results.csv'}, {out / 'run.json'}, {out / 'summary.md'}"
              + ("" if args.no_plot else f", {out / 'tau_vs_budget.png'}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
