"""Benchmark: rounds per second per core for DDTree with exact expected length, and its split.

One round = sample a fresh context (world) + the drafter's exact per-depth marginals (world) +
``ddtree`` (tree building) + the target's edge probabilities and exact ``E[tau]`` with
``follow`` (verification). Reported per (V, B): rounds/s on one core and each part's share of
the round, medians of interleaved repeats; plus the wall-clock scaling of a small sweep from 1
to 2 worker processes (ratio in the same run).

Run: ``python benchmarks/bench_sweep.py`` (``--rounds``, ``--json``).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from treespec_sim.families import DDTreeGrid
from treespec_sim.policies import ddtree
from treespec_sim.sweep import Plan, run_plan
from treespec_sim.synth import make_world
from treespec_sim.verify import expected_length


def split(regime: str, vocab: int, budget: int, rounds: int, seed: int = 0) -> dict:
    world = make_world(regime, seed=seed, vocab_size=vocab)
    rng = np.random.default_rng(seed)
    # Warm every per-topic kernel cache (draft, T = 1 for contexts, T = 0 for the target):
    # a sweep builds each once per process, so a steady-state round does not pay for it.
    for topic in range(world.n_topics):
        world.drafter.kernel(topic)
        world.target_kernel(topic, 1.0)._cdf()
        world.target_kernel(topic, 0.0).argmax(0)
    parts = {"context": [], "draft": [], "tree": [], "verify": []}
    for _ in range(rounds):
        t0 = time.perf_counter()
        ctx = world.sample_context(rng)
        t1 = time.perf_counter()
        log_q = world.draft(ctx)
        t2 = time.perf_counter()
        tree = ddtree(log_q, budget, root_token=int(ctx.last_token))
        t3 = time.perf_counter()
        expected_length(tree, world.target_oracle(ctx, tree, 0.0), rule="follow")
        t4 = time.perf_counter()
        for k, a, b in (("context", t0, t1), ("draft", t1, t2), ("tree", t2, t3),
                        ("verify", t3, t4)):
            parts[k].append(b - a)
    med = {k: float(np.median(v)) for k, v in parts.items()}
    total = sum(med.values())
    return {"vocab": vocab, "budget": budget, "rounds_per_s": 1.0 / total,
            **{f"share_{k}": v / total for k, v in med.items()},
            **{f"ms_{k}": 1e3 * v for k, v in med.items()}}


def scaling(rounds: int) -> dict:
    plan = Plan((DDTreeGrid(("low-entropy", "mid-entropy"), budgets=(64,),
                            temperatures=(0.0, 1.0), rounds=rounds),
                 DDTreeGrid(("high-entropy",), budgets=(64,), temperatures=(0.0, 1.0),
                            rounds=rounds)))
    from treespec_sim.families import _world

    walls = {}
    for workers in (1, 2):
        _world.cache_clear()  # forked workers must not inherit a warm world
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            run_plan(plan, Path(tmp), workers=workers, progress=False, plot=False)
            walls[workers] = time.perf_counter() - t0
    return {"cells": len(plan.cells()), "wall_1_worker_s": walls[1],
            "wall_2_workers_s": walls[2], "speedup": walls[1] / walls[2]}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--regime", default="mid-entropy")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [split(args.regime, v, b, args.rounds) for v in (1024, 32768) for b in (64, 512)]
    scale = scaling(max(4, args.rounds // 3))
    result = {"machine": platform.platform(), "split": rows, "scaling": scale}
    if args.json:
        print(json.dumps(result, indent=1))
        return result
    print(f"{'V':>6} {'B':>4} {'rounds/s':>9} {'context':>8} {'draft':>7} {'tree':>6} "
          f"{'verify':>7}   (shares of a round; ms in brackets)")
    for r in rows:
        print(f"{r['vocab']:6d} {r['budget']:4d} {r['rounds_per_s']:9.1f} "
              + " ".join(f"{100 * r['share_' + k]:5.1f}% ({r['ms_' + k]:.1f})"
                         for k in ("context", "draft", "tree", "verify")))
    print(f"scaling: {scale['cells']} cells, 1 worker {scale['wall_1_worker_s']:.1f} s, "
          f"2 workers {scale['wall_2_workers_s']:.1f} s, speedup {scale['speedup']:.2f}x")
    return result


if __name__ == "__main__":
    main()
