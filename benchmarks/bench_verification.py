"""Benchmark: the ground-truth machinery for tree verification, at V = 5, k = 2 per level.

Times (medians of interleaved repeats, same run):

* exact enumeration of one round on a two-level tree (2 root children, 2 children each, drawn
  without replacement): every filled tree (20 x 20^2 = 8,000 ordered draws) times the
  verifier's exact round law, for ``rrsw`` and ``univer``;
* the (c1) global-optimum LP (1,000 unordered trees, 15,000 variables) and the (c2)
  decomposed LPs;
* as the baseline, the single-node OT LP ``optimal_acceptance(p, q, 2)`` at the same V, so each
  time is also reported as a ratio to it (machines are noisy; ratios travel better).

Run: ``python benchmarks/bench_verification.py`` (``--repeats``, ``--json``).
"""

from __future__ import annotations

import json
import platform
import time

import numpy as np

from proofs_check.ot import optimal_acceptance
from proofs_check.sampled import round_law, two_level_shape
from proofs_check.theorems import RandomWorld, _package
from proofs_check.tree_lp import TwoLevelWorld, decomposed_optimum, global_optimum
from treespec_sim.cli import OneLineParser, add_json_flag, add_repeats


def build_parser() -> OneLineParser:
    """The parser of ``python benchmarks/bench_verification.py``."""
    parser = OneLineParser(prog="python benchmarks/bench_verification.py",
                           description=__doc__.splitlines()[0])
    add_repeats(parser, default=3)
    add_json_flag(parser)
    return parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    vocab = 5
    world = RandomWorld(np.random.default_rng(0), vocab)
    p2 = np.array([world.p((y,)) for y in range(vocab)])
    q2 = np.array([world.q((y,)) for y in range(vocab)])
    tl = TwoLevelWorld(world.p(()), world.q(()), p2, q2, 2, 2, "without_replacement")
    shape = two_level_shape(2, 2)
    jobs = {
        "baseline: single-node OT LP (V=5, k=2)":
            lambda: optimal_acceptance(world.p(()), world.q(()), 2, replacement=False),
        "enumerate two-level round, rrsw":
            lambda: round_law(shape, world.p, world.q, scheme="without_replacement",
                              law_fn=_package("rrsw")),
        "enumerate two-level round, univer":
            lambda: round_law(shape, world.p, world.q, scheme="without_replacement",
                              law_fn=_package("univer")),
        "(c1) global-optimum LP": lambda: global_optimum(tl),
        "(c2) decomposed LPs": lambda: decomposed_optimum(tl),
    }
    times: dict[str, list[float]] = {k: [] for k in jobs}
    for _ in range(args.repeats):
        for name, job in jobs.items():
            start = time.perf_counter()
            job()
            times[name].append(time.perf_counter() - start)
    med = {k: float(np.median(v)) for k, v in times.items()}
    base = med["baseline: single-node OT LP (V=5, k=2)"]
    if args.json:
        print(json.dumps({"machine": platform.processor() or platform.machine(),
                          "median_s": med, "ratio_to_baseline": {k: v / base
                                                                 for k, v in med.items()}}))
        return
    print(f"{'job':42s} {'median s':>10s} {'x baseline':>11s}")
    for name, t in med.items():
        print(f"{name:42s} {t:10.3f} {t / base:11.1f}")


if __name__ == "__main__":
    main()
