"""Benchmark: how long ``proofs_check.check_verifier`` takes at its default sample size.

Each rule of the issue's acceptance list, through ``rule_sampler`` (its sampler called as
``verify`` calls it), 6 cases x 5000 rounds, seed 0, one after another in one process; CPU and
wall-clock seconds, and the 1-minute load average when it started (on a shared machine the wall
clock grows with the load, the CPU seconds much less). Also the ratio of each check's CPU time
to the ``sample-match`` check's in the same run. ``docs/check_your_verifier.md``, "How long a
check takes".

Run: ``python benchmarks/bench_check_verifier.py`` (``--json``).
"""

from __future__ import annotations

import json
import os
import time

import scipy.stats  # noqa: F401  (its first import is not a check's time)

from proofs_check import check_verifier, rule_sampler
from treespec_sim.cli import OneLineParser, add_json_flag

#: (rule, checker scheme): the lossy sibling-order rule and every lossless rule engines ship.
RULES = (("sibling-ratio", "deterministic"), ("rrs", "iid"), ("rrsw", "without_replacement"),
         ("traversal", "without_replacement"), ("univer", "without_replacement"),
         ("sample-match", "deterministic"), ("block", "chain"))


def build_parser() -> OneLineParser:
    """The parser of ``python benchmarks/bench_check_verifier.py``."""
    ap = OneLineParser(prog="python benchmarks/bench_check_verifier.py",
                       description=__doc__.splitlines()[0])
    add_json_flag(ap)
    return ap


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    out = []
    for rule, scheme in RULES:
        load = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), time.process_time()
        rep = check_verifier(rule_sampler(rule), scheme=scheme)
        out.append({"rule": rule, "scheme": scheme, "lossless": rep.lossless,
                    "cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0,
                    "load": load, "family_p": rep.family_p,
                    "worst_tv": max(c.tv for c in rep.cases), "power": rep.power.pooled})
    base = next(r["cpu_s"] for r in out if r["rule"] == "sample-match")
    for r in out:
        r["cpu_vs_sample_match"] = r["cpu_s"] / base
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print("| rule | scheme | result | CPU s | wall s | load (1 min) | report |")
    print("|---|---|---|---|---|---|---|")
    for r in out:
        print(f"| `{r['rule']}` | {r['scheme']} | {'lossless' if r['lossless'] else 'lossy'} | "
              f"{r['cpu_s']:.1f} | {r['wall_s']:.1f} | {r['load']:.1f} | family p = "
              f"{r['family_p']:.3g}, worst first-token TV {r['worst_tv']:.3f}, power "
              f"{r['power']:.2f} |")


if __name__ == "__main__":
    main()
