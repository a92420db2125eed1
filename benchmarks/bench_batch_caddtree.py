"""Benchmark: a budget shared across a batch (batch_caddtree) against DDTree one request at a time.

For ``--batch`` requests at ``--max-budget``, ``batch_caddtree`` builds every request's DDTree at
``max_budget``, merges their pops and stops by CaDDTree's rule on the batch's cost; the
baseline builds the same requests' DDTree trees one by one at ``max_budget``
(``ddtree(log_q, max_budget)`` in a loop), what a server verifying fixed trees of that size
pays. Also reported: the loop of ``ddtree`` at each request's chosen budget (what a server
told the shared budget in advance would pay). Medians of interleaved repeats in the same run,
on DFlash-like marginals (as bench_ddtree), the requests' sharpness mixed.

Run: ``python benchmarks/bench_batch_caddtree.py`` (``--batch``, ``--max-budget``, ``--repeats``,
``--json``). The bar (docs/performance.md): the ratio to the one-by-one loop at most 2.
"""

from __future__ import annotations

import json
import platform
import time

import numpy as np
from bench_ddtree import dflash_like

from treespec_sim.cli import OneLineParser, add_json_flag, add_repeats, add_seed, positive_int
from treespec_sim.cost import batch_costs, get_cost_model
from treespec_sim.policies import batch_caddtree, ddtree


def build_parser() -> OneLineParser:
    """The parser of ``python benchmarks/bench_batch_caddtree.py``."""
    ap = OneLineParser(prog="python benchmarks/bench_batch_caddtree.py",
                       description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=positive_int, default=64)
    ap.add_argument("--max-budget", type=positive_int, default=512)
    ap.add_argument("--depth", type=positive_int, default=15)
    ap.add_argument("--vocab", type=positive_int, default=32768)
    ap.add_argument("--costs", nargs="+", default=["h200-qwen3-8b-batch", "a800-qwen3-8b-batch"])
    add_repeats(ap, default=7)
    add_seed(ap)
    add_json_flag(ap)
    return ap


def main(argv=None) -> list[dict]:
    args = build_parser().parse_args(argv)
    rng = np.random.default_rng(args.seed)
    kinds = ("sharp", "mixed", "flat")
    lps = [dflash_like(rng, args.depth, args.vocab, kinds[i % 3]) for i in range(args.batch)]
    rows = []
    for name in args.costs:
        draft, verify = batch_costs(get_cost_model(name), [1024] * args.batch)
        kw = {"draft_cost": draft, "verify_cost": verify, "max_budget": args.max_budget}
        chosen = [t.size for t in batch_caddtree(lps, **kw)]
        t_joint, t_loop, t_same = [], [], []

        def joint(kw=kw):
            return batch_caddtree(lps, **kw)

        def loop():
            return [ddtree(lp, args.max_budget) for lp in lps]

        def same(chosen=chosen):
            return [ddtree(lp, max(b, 1)) for lp, b in zip(lps, chosen, strict=True)]

        joint(), loop(), same()  # warm: compiled kernels, caches
        for _ in range(args.repeats):
            for fn, acc in ((joint, t_joint), (loop, t_loop), (same, t_same)):
                t0 = time.perf_counter()
                fn()
                acc.append(time.perf_counter() - t0)
        med = [float(np.median(t)) for t in (t_joint, t_loop, t_same)]
        rows.append({"cost": name, "batch": args.batch, "max_budget": args.max_budget,
                     "nodes_in_all": int(sum(chosen)),
                     "budgets_min_median_max": [int(min(chosen)), int(np.median(chosen)),
                                                int(max(chosen))],
                     "joint_ms": 1e3 * med[0], "ddtree_loop_ms": 1e3 * med[1],
                     "ddtree_at_chosen_ms": 1e3 * med[2],
                     "ratio_vs_loop": med[0] / med[1], "ratio_vs_chosen": med[0] / med[2]})
    if args.json:
        print(json.dumps({"machine": platform.platform(), "rows": rows}, indent=1))
    else:
        print(f"{'cost':22s} {'b':>3s} {'nodes':>6s} {'B min/med/max':>14s} {'joint':>9s} "
              f"{'ddtree x b':>10s} {'ratio':>6s} {'ddtree(B_i)':>11s} {'ratio':>6s}")
        for r in rows:
            lo, mid, hi = r["budgets_min_median_max"]
            print(f"{r['cost']:22s} {r['batch']:3d} {r['nodes_in_all']:6d} "
                  f"{f'{lo}/{mid}/{hi}':>14s} {r['joint_ms']:7.1f}ms {r['ddtree_loop_ms']:8.1f}ms "
                  f"{r['ratio_vs_loop']:6.2f} {r['ddtree_at_chosen_ms']:9.1f}ms "
                  f"{r['ratio_vs_chosen']:6.2f}")
    return rows


if __name__ == "__main__":
    main()
