"""Benchmark: rounds per second per core for DDTree with exact expected length, and its split.

One round = sample a fresh context (world) + one :func:`treespec_sim.engine.run_round` (DDTree,
``sample=False``): the drafter's exact per-depth marginals (draft), ``ddtree`` and the loop's own
bookkeeping (tree building), the target's rows and exact ``E[tau]`` with ``follow``
(verification), each part as the round measures it. Two paths, timed in the same run:

* ``ranked`` -- what the sweep does: ``world.draft_lazy`` computes only the drafter's class
  chain ``h_1..h_L``; ``ddtree`` reads per-depth top-``B`` lists from it (their cost counts as
  tree building, as the reference's ``torch.topk`` does). Below ``V = 4096`` ``ddtree``
  materialises the array instead (cheaper there).
* ``array`` -- the baseline: ``world.draft`` materialises ``log q`` ``(L, V)``; ``ddtree`` reads it.

Reported per (V, B, path): rounds/s on one core and each part's share of the round (medians
over rounds, per-topic tables warmed first: a sweep builds them once per process); the
ranked/array ratio; and the wall clock of a small sweep at 1 and 2 worker processes.

Also the fresh-context targets (``docs/performance.md``): rounds/s of ddtree ``B = 64`` at
``T = 0`` and ``T = 1``, of the nested ``B = 512`` tree with exact ``E[tau]`` at six budgets
and of Tsubame ``B = 64`` with UniVer at ``T = 1``,
each against its target (:func:`fresh_rounds`; ``--fresh-only`` runs just those), by the wall
clock and per CPU second of this process (steadier on a shared machine), and the time of the
drafter's class chain alone on fresh contexts: the rate a round could reach on this CPU if all
else in it were free.

Run: ``python benchmarks/bench_sweep.py`` (``--rounds``, ``--json``, ``--fresh-only``).
"""

from __future__ import annotations

import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from treespec_sim import machine
from treespec_sim.cli import OneLineParser, add_json_flag, positive_int
from treespec_sim.engine import run_round
from treespec_sim.families import DDTreeGrid, world_for
from treespec_sim.sweep import Plan, run_plan
from treespec_sim.synth import make_world


class _ArrayBackend:
    """The world without ``draft_lazy``: ``run_round`` then reads the dense ``(L, V)`` array."""

    def __init__(self, world) -> None:
        self._world = world
        self.depth, self.vocab_size = world.depth, world.vocab_size

    def sample_context(self, rng):
        return self._world.sample_context(rng)

    def advance(self, ctx, tokens):
        return self._world.advance(ctx, tokens)

    def draft(self, ctx):
        return self._world.draft(ctx)

    def target_oracle(self, ctx, tree, temperature):
        return self._world.target_oracle(ctx, tree, temperature)


def split(regime: str, vocab: int, budget: int, rounds: int, seed: int = 0,
          lazy: bool = True) -> dict:
    """Median seconds of each part of a round, as :func:`run_round` measures them."""
    world = make_world(regime, seed=seed, vocab_size=vocab)
    backend = world if lazy else _ArrayBackend(world)
    rng = np.random.default_rng(seed)
    # Warm every per-topic kernel cache (draft, T = 1 for contexts, T = 0 for the target):
    # a sweep builds each once per process, so a steady-state round does not pay for it.
    world.warm((0.0,))
    parts = {"context": [], "draft": [], "tree": [], "verify": []}
    for _ in range(rounds):
        t0 = time.perf_counter()
        ctx = world.sample_context(rng)
        t1 = time.perf_counter()
        rnd = run_round(backend, ctx, method="ddtree", budget=budget, rule="follow",
                        temperature=0.0, rng=rng, sample=False)
        t2 = time.perf_counter()
        rnd.expected_tau  # noqa: B018 -- exact E[tau] is part of verification
        t3 = time.perf_counter()
        engine = (t2 - t1) - sum(rnd.timings.values())  # the loop's own bookkeeping
        parts["context"].append(t1 - t0)
        parts["draft"].append(rnd.timings["draft"])
        parts["tree"].append(rnd.timings["build"] + engine)
        parts["verify"].append(rnd.timings["verify"] + (t3 - t2))
    med = {k: float(np.median(v)) for k, v in parts.items()}
    total = sum(med.values())
    return {"vocab": vocab, "budget": budget, "rounds_per_s": 1.0 / total,
            **{f"share_{k}": v / total for k, v in med.items()},
            **{f"ms_{k}": 1e3 * v for k, v in med.items()}}


#: The performance targets (``docs/performance.md``; rounds/s, one process, exact E[tau]) for
#: :func:`fresh_rounds`.
FRESH_TARGETS = {"ddtree B=64 T=0": 1000.0, "ddtree B=64 T=1": 1000.0,
                 "nested B=512, tau at 6 budgets": 500.0, "tsubame B=64 + univer T=1": 100.0}
NESTED_BUDGETS = (8, 16, 32, 64, 128, 512)


def fresh_rounds(regime: str, rounds: int, seed: int = 0) -> list[dict]:
    """Rounds per second through :func:`run_round` on fresh contexts, as the sweep runs them.

    Every round samples a new context (so the drafter's per-context caches miss, as in a
    sweep) and reads exact ``E[tau]`` and the exit decomposition (``follow``); the nested case
    builds the ``B = 512`` tree once and reads both at the six budgets of
    :data:`NESTED_BUDGETS`; the Tsubame case fills a ``B = 64`` tree by sampling at ``T = 1``
    and reads its exact ``E[tau]`` under UniVer. Per-topic tables are warmed first (built once
    per process).

    After each block of 50 rounds, the drafter's class chain alone (``world.draft_lazy`` on 10
    further fresh contexts, drawn from their own generator so the rounds' stream is the same)
    is timed: ``chain_ms`` is a fresh context's chain ``h_1..h_L`` (14 sparse products at
    ``V = 32768``, the floats the simulator defines), and ``chain_bound_rounds_per_s`` the rate
    a round could reach if everything else in it were free -- the ceiling on these targets
    on this CPU (docs/performance.md, "Where a fresh round's time goes").
    """
    world = make_world(regime, seed=seed)
    world.warm((0.0, 1.0))
    out = []
    for name in FRESH_TARGETS:
        rng = np.random.default_rng(seed)
        t = 1.0 if "T=1" in name else 0.0

        def one(rng=rng, t=t, name=name) -> None:
            ctx = world.sample_context(rng)
            if name.startswith("tsubame"):
                rnd = run_round(world, ctx, method="tsubame", budget=64, rule="univer",
                                temperature=t, rng=rng, sample=False)
                rnd.expected_tau  # noqa: B018
            elif name.startswith("nested"):
                big = run_round(world, ctx, method="ddtree", budget=NESTED_BUDGETS[-1],
                                rule="follow", temperature=0.0, rng=rng, sample=False,
                                nested=True)
                for b in NESTED_BUDGETS:
                    sub = big.at_budget(b)
                    sub.expected_tau  # noqa: B018
                    sub.exits  # noqa: B018
            else:
                rnd = run_round(world, ctx, method="ddtree", budget=64, rule="follow",
                                temperature=t, rng=rng, sample=False)
                rnd.expected_tau  # noqa: B018
                rnd.exits  # noqa: B018

        for _ in range(min(20, rounds)):
            one()
        wall = cpu = 0.0
        done = 0
        chain_rng = np.random.default_rng([seed, 1])
        chain_s, chain_n = 0.0, 0
        while done < rounds:
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(50):
                one()
            wall += time.perf_counter() - t0
            # CPU time too: on a shared machine the wall clock counts other processes
            cpu += time.process_time() - c0
            done += 50
            for ctx in [world.sample_context(chain_rng) for _ in range(10)]:
                t0 = time.perf_counter()
                world.draft_lazy(ctx)
                chain_s += time.perf_counter() - t0
            chain_n += 10
        rate = done / wall
        out.append({"case": name, "rounds_per_s": rate, "cpu_rounds_per_s": done / cpu,
                    "target": FRESH_TARGETS[name], "of_target": rate / FRESH_TARGETS[name],
                    "chain_ms": 1e3 * chain_s / chain_n, "chain_share": rate * chain_s / chain_n,
                    "chain_bound_rounds_per_s": chain_n / chain_s})
    return out


def scaling(rounds: int) -> dict:
    """Wall clock of one small sweep (8 DDTree cells on calibrated regimes) at 1 and 2 workers."""
    plan = Plan((DDTreeGrid(("math500", "gsm8k", "humaneval", "mt-bench"), budgets=(64, 512),
                            temperatures=(0.0, 1.0), rounds=rounds),))
    walls = {}
    for workers in (1, 2):
        world_for.cache_clear()  # forked workers must not inherit a warm world
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            run_plan(plan, Path(tmp), workers=workers, progress=False, plot=False)
            walls[workers] = time.perf_counter() - t0
    return {"cells": len(plan.cells()), "rounds_per_cell": rounds,
            "wall_1_worker_s": walls[1], "wall_2_workers_s": walls[2],
            "speedup": walls[1] / walls[2]}


def build_parser() -> OneLineParser:
    """The parser of ``python benchmarks/bench_sweep.py``."""
    ap = OneLineParser(prog="python benchmarks/bench_sweep.py",
                       description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=positive_int, default=30, help="timed rounds per (V, B, path)")
    ap.add_argument("--regime", default="math500",
                    help="a word-class regime (the calibrated ones) exercises the ranked path")
    ap.add_argument("--scaling-rounds", type=positive_int, default=200,
                    help="rounds per cell of the 1-vs-2-worker sweep")
    add_json_flag(ap)
    ap.add_argument("--fresh-rounds", type=positive_int, default=300,
                    help="rounds per case of the fresh-context targets (docs/performance.md)")
    ap.add_argument("--fresh-only", action="store_true",
                    help="only the fresh-context targets (skip the split and the scaling)")
    return ap


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    fresh = fresh_rounds(args.regime, args.fresh_rounds)
    if args.fresh_only:
        result = {"machine": platform.platform(), "kernels": _kernels(), "regime": args.regime,
                  "fresh": fresh}
        if args.json:
            print(json.dumps(result, indent=1))
        else:
            _print_fresh(args.regime, fresh)
        return result
    rows = [{"path": path, **split(args.regime, v, b, args.rounds, lazy=path == "ranked")}
            for v in (1024, 32768) for b in (64, 512) for path in ("ranked", "array")]
    scale = scaling(args.scaling_rounds)
    result = {"machine": platform.platform(), "regime": args.regime, "split": rows,
              "scaling": scale, "fresh": fresh}
    if args.json:
        print(json.dumps(result, indent=1))
        return result
    print(f"regime {args.regime}; medians of {args.rounds} rounds; shares of a round (ms)")
    print(f"{'V':>6} {'B':>4} {'path':>6} {'rounds/s':>9} {'context':>13} {'draft':>13} "
          f"{'tree':>13} {'verify':>12}  ranked/array")
    for r in rows:
        base = next(x for x in rows if x["vocab"] == r["vocab"] and x["budget"] == r["budget"]
                    and x["path"] == "array")
        print(f"{r['vocab']:6d} {r['budget']:4d} {r['path']:>6} {r['rounds_per_s']:9.1f} "
              + " ".join(f"{100 * r['share_' + k]:5.1f}% ({r['ms_' + k]:4.2f})"
                         for k in ("context", "draft", "tree", "verify"))
              + (f"  {r['rounds_per_s'] / base['rounds_per_s']:.2f}x"
                 if r["path"] == "ranked" else ""))
    print(f"scaling: {scale['cells']} cells x {scale['rounds_per_cell']} rounds, "
          f"1 worker {scale['wall_1_worker_s']:.1f} s, 2 workers {scale['wall_2_workers_s']:.1f} s,"
          f" speedup {scale['speedup']:.2f}x")
    _print_fresh(args.regime, fresh)
    return result


def _kernels() -> str:
    """The CPU this run measured on."""
    return machine.cpu_description()


def _print_fresh(regime: str, fresh: list[dict]) -> None:
    print(f"fresh contexts of make_world({regime!r}), exact E[tau] + exits "
          f"(targets: docs/performance.md; {_kernels()}):")
    for r in fresh:
        print(f"  {r['case']:32s} {r['rounds_per_s']:8.1f} rounds/s  target "
              f"{r['target']:6.0f}  ({r['of_target']:.2f}x of target; "
              f"{r['cpu_rounds_per_s']:.1f} per CPU second)")
        print(f"  {'':32s} the chain alone {r['chain_ms']:.3f} ms a fresh context "
              f"({100 * r['chain_share']:.0f}% of a round): at most "
              f"{r['chain_bound_rounds_per_s']:.0f} rounds/s if the rest were free")


if __name__ == "__main__":
    main()
