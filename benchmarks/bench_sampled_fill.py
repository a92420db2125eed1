"""Benchmark: a 64-node Tsubame draft (pass 1 plan + pass 2 sampled fill) against DDTree's build.

On a calibrated regime at ``V = 32768`` (default ``math500``), the same contexts, interleaved in
one run: DDTree's 64-node tree (the baseline), Tsubame with the DFlash marginal proposal
(``policies.tsubame``: one law per depth), and the registry's ``tsubame`` build exactly as
``engine.run_round`` calls it (``DraftRequest`` with the world's conditional proposal: one law
per distinct ``(depth, parent token)``, each an ``O(V)`` call into the world). Every timed call
starts from a fresh copy of the context's ``world.draft_lazy(ctx)`` (nothing cached from an
earlier call, as in a round on a new context); the world's own ``draft`` stage is not timed.
Reported as median ms per draft and as a ratio to DDTree's median in the same run.

Run: ``python benchmarks/bench_sampled_fill.py`` (``--contexts``, ``--temperatures``,
``--json``).
"""

from __future__ import annotations

import copy
import json
import platform
import time

import numpy as np

from treespec_sim.cli import (
    OneLineParser,
    add_json_flag,
    add_repeats,
    add_seed,
    positive_int,
    temperature,
)
from treespec_sim.methods import DraftRequest, get_method
from treespec_sim.policies import ddtree, tsubame
from treespec_sim.synth import make_world


def _timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _n_laws(draft) -> int:
    laws = getattr(draft.proposal, "laws", None)
    return -1 if laws is None else len(laws)  # -1: a dense proposal (older code)


def build_parser() -> OneLineParser:
    """The parser of ``python benchmarks/bench_sampled_fill.py``."""
    ap = OneLineParser(prog="python benchmarks/bench_sampled_fill.py",
                       description=__doc__.splitlines()[0])
    ap.add_argument("--regime", default="math500")
    add_seed(ap)
    ap.add_argument("--budget", type=positive_int, default=64)
    ap.add_argument("--contexts", type=positive_int, default=24)
    add_repeats(ap, default=2, help="timed passes over the contexts")
    ap.add_argument("--temperatures", type=temperature, nargs="+", default=[1.0, 0.6])
    add_json_flag(ap)
    return ap


def main(argv=None) -> list[dict]:
    args = build_parser().parse_args(argv)
    world = make_world(args.regime, seed=args.seed)
    rng = np.random.default_rng(args.seed)
    contexts = [world.sample_context(rng) for _ in range(args.contexts)]
    lazies = [world.draft_lazy(c) for c in contexts]
    build = get_method("tsubame")[0].build

    def request(ctx, lazy, t):
        def conditional(depth, parent_token, ctx=ctx):
            return world.draft_conditional(ctx, depth, parent_token)
        return DraftRequest(log_q=lazy, budget=args.budget, temperature=t, rule="rrsw",
                            root_token=int(ctx.last_token), rng=rng, conditional=conditional)

    sides = {"ddtree": lambda ctx, lz: ddtree(lz, args.budget, root_token=int(ctx.last_token))}
    for t in args.temperatures:
        sides[f"tsubame T={t:g}"] = (
            lambda ctx, lz, t=t: tsubame(lz, args.budget, rng=rng, temperature=t,
                                         root_token=int(ctx.last_token)))
        sides[f"tsubame engine T={t:g}"] = (
            lambda ctx, lz, t=t: build(request(ctx, lz, t)))
    times: dict[str, list[float]] = {k: [] for k in sides}
    laws: dict[str, list[int]] = {k: [] for k in sides}
    sizes: dict[str, list[int]] = {k: [] for k in sides}
    for timed_pass in range(args.repeats + 1):  # pass 0 warms the world's kernels, untimed
        for ctx, lazy in zip(contexts, lazies, strict=True):
            for name, fn in sides.items():  # interleaved: machine noise hits every side alike
                fresh = copy.deepcopy(lazy)
                dt, out = _timed(lambda fn=fn, ctx=ctx, fresh=fresh: fn(ctx, fresh))
                if timed_pass:
                    times[name].append(dt)
                    tree = getattr(out, "tree", out)
                    sizes[name].append(tree.size)
                    laws[name].append(_n_laws(out) if hasattr(out, "proposal") else 0)
    base = float(np.median(times["ddtree"]))
    rows = [{"side": k, "ms": 1e3 * float(np.median(v)), "ratio_to_ddtree":
             float(np.median(v)) / base, "nodes": float(np.median(sizes[k])),
             "laws": float(np.median(laws[k]))} for k, v in times.items()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return rows
    print(f"64-node drafts on {args.regime} (seed {args.seed}), V={world.vocab_size}, "
          f"L={world.depth}, {args.contexts} contexts x {args.repeats} passes, median; "
          f"{platform.processor() or platform.machine()}")
    print(f"{'side':>22} {'ms':>8} {'/ddtree':>8} {'nodes':>6} {'laws':>5}")
    for r in rows:
        print(f"{r['side']:>22} {r['ms']:8.2f} {r['ratio_to_ddtree']:8.2f} {r['nodes']:6.0f} "
              f"{r['laws']:5.0f}")
    return rows


if __name__ == "__main__":
    main()
