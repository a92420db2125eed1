"""Benchmark: verifier-family rounds (Tsubame B = 64, exact E[tau]) against a DDTree round.

On a calibrated regime at ``V = 32768`` (default ``math500``, ``T = 1``), one process, in one
run with the rounds interleaved:

* the baseline: a DDTree round (``run_round(method="ddtree", budget=64, rule="follow")`` and
  its exact ``expected_tau``) on a fresh context;
* a ``univer`` round exactly as the performance target measures it (``docs/performance.md``):
  ``run_round(method="tsubame", budget=64, rule="univer", sample=False)`` and
  ``rnd.expected_tau`` on another fresh context (each round on its own context: nothing cached
  from an earlier round of the same context);
* on that same tree, the exact E[tau] of each other rule (``traversal``, ``rrsw``,
  ``univer-guided``, ``univer-fixed``) on a fresh target oracle; a rule's round time is the
  univer round's draft + build time plus its own verification time.

Per-topic tables (the target kernels, the drafter's class chain and the token-level drafter
kernel that the correction proposal reads) are built for every topic before the untimed warm-up
rounds: a sweep builds each once per process, and 20 warm-up rounds over 32 topics left about
half of them to the timed rounds (a drafter kernel costs ~6 ms, ~2 ms per univer round on
average). ``--cold-tables`` skips that (the measurement before it was added).

Reported: rounds/s of each, the verification time alone (ms, the oracle's row reads included),
and each round's time as a ratio to the DDTree round's in the same run. Machines are noisy:
compare ratios, and before/after numbers only from the same machine.

Run: ``python benchmarks/bench_verifiers.py`` (``--regime``, ``--contexts``, ``--temperature``,
``--json``).
"""

from __future__ import annotations

import json
import platform
import time

import numpy as np

from treespec_sim.cli import (
    OneLineParser,
    add_json_flag,
    add_seed,
    add_temperature,
    nonnegative_int,
    positive_int,
)
from treespec_sim.engine import run_round
from treespec_sim.synth import make_world
from treespec_sim.verify import expected_length

OTHER_RULES = ("traversal", "rrsw", "univer-guided", "univer-fixed")


def build_parser() -> OneLineParser:
    """The parser of ``python benchmarks/bench_verifiers.py``."""
    ap = OneLineParser(prog="python benchmarks/bench_verifiers.py",
                       description=__doc__.splitlines()[0])
    ap.add_argument("--regime", default="math500")
    add_seed(ap)
    ap.add_argument("--budget", type=positive_int, default=64)
    ap.add_argument("--contexts", type=positive_int, default=60)
    ap.add_argument("--warmup", type=nonnegative_int, default=20, help="untimed rounds first")
    ap.add_argument("--cold-tables", action="store_true",
                    help="do not build every topic's tables first (timed rounds may build them)")
    add_temperature(ap, default=1.0, help="sampling temperature (default: %(default)s)")
    add_json_flag(ap)
    return ap


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    world = make_world(args.regime, seed=args.seed)
    rng = np.random.default_rng(args.seed)
    t = args.temperature
    if not args.cold_tables:
        world.warm((t,))  # every topic's target kernels and drafter tables

    def ddtree_round() -> float:
        ctx = world.sample_context(rng)
        t0 = time.perf_counter()
        rnd = run_round(world, ctx, method="ddtree", budget=args.budget, rule="follow",
                        temperature=t, rng=rng, sample=False)
        _ = rnd.expected_tau
        return time.perf_counter() - t0

    def univer_round() -> tuple[float, float, object, object]:
        ctx = world.sample_context(rng)
        t0 = time.perf_counter()
        rnd = run_round(world, ctx, method="tsubame", budget=args.budget, rule="univer",
                        temperature=t, rng=rng, sample=False)
        t1 = time.perf_counter()
        _ = rnd.expected_tau
        t2 = time.perf_counter()
        return t2 - t0, t2 - t1, rnd, ctx

    for _ in range(args.warmup):
        ddtree_round()
        univer_round()
    dd: list[float] = []
    rounds: dict[str, list[float]] = {"univer": [], **{r: [] for r in OTHER_RULES}}
    verif: dict[str, list[float]] = {k: [] for k in rounds}
    for _ in range(args.contexts):
        dd.append(ddtree_round())
        total, tau_s, rnd, ctx = univer_round()
        rounds["univer"].append(total)
        verif["univer"].append(tau_s)
        for rule in OTHER_RULES:
            oracle = world.target_oracle(ctx, rnd.tree, t)  # fresh: no row cached
            t0 = time.perf_counter()
            expected_length(rnd.tree, oracle, rule=rule, proposal=rnd.proposal)
            dt = time.perf_counter() - t0
            verif[rule].append(dt)
            rounds[rule].append(total - tau_s + dt)
    dd_s = float(np.sum(dd))
    out = {"machine": platform.processor() or platform.machine(), "regime": args.regime,
           "tables_warmed": not args.cold_tables,
           "temperature": t, "budget": args.budget, "contexts": args.contexts,
           "ddtree_rounds_per_s": args.contexts / dd_s, "rules": {}}
    for rule, times in rounds.items():
        tot = float(np.sum(times))
        out["rules"][rule] = {"rounds_per_s": args.contexts / tot,
                              "verify_ms": 1e3 * float(np.mean(verif[rule])),
                              "x_ddtree_round": tot / dd_s}
    if args.json:
        print(json.dumps(out))
        return out
    tables = "cold tables" if args.cold_tables else "tables warmed"
    print(f"{args.regime} T={t} B={args.budget}, {args.contexts} fresh contexts ({tables}); "
          f"DDTree round: {out['ddtree_rounds_per_s']:.1f} rounds/s")
    print(f"{'rule':15s} {'rounds/s':>9s} {'verify ms':>10s} {'x DDTree round':>15s}")
    for rule, row in out["rules"].items():
        print(f"{rule:15s} {row['rounds_per_s']:9.1f} {row['verify_ms']:10.2f} "
              f"{row['x_ddtree_round']:15.2f}")
    return out


if __name__ == "__main__":
    main()
