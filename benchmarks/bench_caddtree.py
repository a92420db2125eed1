"""Benchmark: CaDDTree's per-round build cost relative to plain DDTree at the same final budget.

CaDDTree must look past its final budget to know where to stop; this package builds DDTree at
``max_budget`` once and scans theta for every prefix (``treespec_sim.policies.caddtree``). The
baseline is ``ddtree(log_q, B*)`` with ``B*`` the budget CaDDTree chose — what a decoder told the
right budget in advance would pay. Also reported: the ratio to ``ddtree(log_q, max_budget)``.
Medians of interleaved repeats in the same run, on DFlash-like marginals (as bench_ddtree).

Run: ``python benchmarks/bench_caddtree.py`` (``--repeats``, ``--json``).
"""

from __future__ import annotations

import json
import platform
import time
from functools import partial

import numpy as np
from bench_ddtree import dflash_like

from treespec_sim.cli import OneLineParser, add_json_flag, add_repeats, add_seed, positive_int
from treespec_sim.cost import get_cost_model
from treespec_sim.policies import CaDDTreePolicy, caddtree, ddtree


def build_parser() -> OneLineParser:
    """The parser of ``python benchmarks/bench_caddtree.py``."""
    ap = OneLineParser(prog="python benchmarks/bench_caddtree.py",
                       description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=positive_int, default=15)
    ap.add_argument("--vocab", type=positive_int, default=32768)
    ap.add_argument("--max-budget", type=positive_int, default=1024)
    ap.add_argument("--costs", nargs="+", default=["a800-qwen3-8b", "h200-qwen3-8b",
                                                   "tiled-illustrative"])
    ap.add_argument("--kinds", nargs="+", default=["sharp", "mixed", "flat"])
    add_repeats(ap, default=15)
    add_seed(ap)
    ap.add_argument("--stat", choices=["median", "min"], default="median",
                    help="summary of the repeats (min resists load from other processes)")
    add_json_flag(ap)
    return ap


def main(argv=None) -> list[dict]:
    args = build_parser().parse_args(argv)
    rng = np.random.default_rng(args.seed)
    rows = []
    for kind in args.kinds:
        lp = dflash_like(rng, args.depth, args.vocab, kind)
        for name in args.costs:
            cost = get_cost_model(name)
            kw = {"draft_cost": cost.draft_cost(), "verify_cost": cost.verify_cost,
                  "max_budget": args.max_budget}
            b_star = caddtree(lp, **kw).size
            # CaDDTreePolicy in a decoder: the previous round stopped at B* (same marginals here,
            # i.e. a round like the last one), so this round's first trial is 1.1 B* + 4
            hint = int(1.1 * b_star) + 4
            policy = CaDDTreePolicy(**kw)
            t_cad, t_hint, t_same, t_max = [], [], [], []

            def hinted(policy=policy, lp=lp, hint=hint):
                policy.last_budget = int((hint - 4) / policy.margin)  # as after a like round
                return policy(lp)

            sides = ((partial(caddtree, lp, **kw), t_cad),
                     (hinted, t_hint),
                     (partial(ddtree, lp, b_star), t_same),
                     (partial(ddtree, lp, args.max_budget), t_max))
            for _ in range(args.repeats):
                for fn, acc in sides:
                    t0 = time.perf_counter()
                    fn()
                    acc.append(time.perf_counter() - t0)
            summary = np.median if args.stat == "median" else np.min
            med = [float(summary(t)) for t in (t_cad, t_hint, t_same, t_max)]
            rows.append({"kind": kind, "cost": name, "final_budget": b_star,
                         "caddtree_ms": 1e3 * med[0], "caddtree_hinted_ms": 1e3 * med[1],
                         "ddtree_same_budget_ms": 1e3 * med[2],
                         "ddtree_max_budget_ms": 1e3 * med[3],
                         "ratio_vs_same_budget": med[0] / med[2],
                         "hinted_ratio_vs_same_budget": med[1] / med[2]})
    if args.json:
        print(json.dumps({"machine": platform.platform(), "rows": rows}, indent=1))
    else:
        print(f"{'marginals':9s} {'cost':20s} {'B*':>5s} {'ddtree(B*)':>10s} {'caddtree':>9s} "
              f"{'ratio':>6s} {'hinted':>8s} {'ratio':>6s} {'ddtree(max)':>11s}")
        for r in rows:
            print(f"{r['kind']:9s} {r['cost']:20s} {r['final_budget']:5d} "
                  f"{r['ddtree_same_budget_ms']:8.2f}ms {r['caddtree_ms']:7.2f}ms "
                  f"{r['ratio_vs_same_budget']:6.2f} {r['caddtree_hinted_ms']:6.2f}ms "
                  f"{r['hinted_ratio_vs_same_budget']:6.2f} {r['ddtree_max_budget_ms']:9.2f}ms")
    return rows


if __name__ == "__main__":
    main()
