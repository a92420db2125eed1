"""The safe UniVer rule against Traversal on many drawn trees (docs/theory/univer.md, section 4).

Section 3.3 guarantees ``E[tau](univer) >= E[tau](traversal)`` in expectation over the draws, not
on every drawn tree. The verifier family's run holds one drawn tree per context (150 contexts);
this script draws many: ``--contexts`` fresh contexts over the regime's worlds 0-2, ``--draws``
binary depth-5 trees (``sampled-tree[2x5]``, T = 1) each, and prints the mean of
``E[tau](univer) - E[tau](traversal)`` on the same trees with a 95% t-interval over contexts,
and the most negative and most positive single trees.

Run: ``python docs/results/verifiers/safe_vs_traversal.py --regime mt-bench --contexts 3000
--draws 2`` (about a minute on one core).
"""

from __future__ import annotations

import argparse

import numpy as np

from treespec_sim.engine import run_round
from treespec_sim.stats import mean_ci
from treespec_sim.synth import make_world


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python docs/results/verifiers/safe_vs_traversal.py")
    ap.add_argument("--regime", default="mt-bench")
    ap.add_argument("--contexts", type=int, default=3000)
    ap.add_argument("--draws", type=int, default=2)
    ap.add_argument("--seed", type=int, default=12345)
    args = ap.parse_args(argv)
    worlds = [make_world(args.regime, seed=s) for s in (0, 1, 2)]
    rng = np.random.default_rng(args.seed)
    per_context, single = [], []
    for i in range(args.contexts):
        world = worlds[i % len(worlds)]
        ctx = world.sample_context(rng)
        d = []
        for _ in range(args.draws):
            rnd = run_round(world, ctx, method="sampled-tree[2x5]", rule="traversal",
                            temperature=1.0, rng=rng, sample=False)
            d.append(rnd.expected_tau_under("univer") - rnd.expected_tau_under("traversal"))
        per_context.append(float(np.mean(d)))
        single += d
    ci = mean_ci(np.array(per_context))
    print(f"{args.regime}: {args.contexts} contexts x {args.draws} trees: univer - traversal "
          f"{ci.mean:+.4f} [{ci.low:+.4f}, {ci.high:+.4f}] tokens per round; single trees "
          f"from {min(single):+.3f} to {max(single):+.3f}")


if __name__ == "__main__":
    main()
