"""Benchmark: the time split of one speculative round on real models (default: tiny, CPU).

Every round is split into draft (drafter forward + its context-cache update), build (policy +
4-D mask), verify (target tree forward), decide (float64 rows + verifier) and commit (KV-cache
compaction). The overhead is everything outside the two model forwards (build + decide +
commit), reported as a fraction of the round: a ratio measured within the same run, so machine
noise affects both sides alike. The issue's target is <= 10% at B = 64 on CPU.

Run: ``python benchmarks/bench_real_models.py`` (``--budgets``, ``--prompts``, ``--new-tokens``,
``--device``, ``--target DIR --drafter DIR``, ``--json``).
"""

from __future__ import annotations

import json
import platform

import numpy as np

from treespec_sim.cli import (
    OneLineParser,
    add_budgets,
    add_checkpoints,
    add_device,
    add_json_flag,
    add_new_tokens,
    add_prompts,
    add_threads,
)


def build_parser() -> OneLineParser:
    """The parser of ``python benchmarks/bench_real_models.py``."""
    ap = OneLineParser(prog="python benchmarks/bench_real_models.py",
                       description=__doc__.splitlines()[0])
    add_checkpoints(ap)
    add_device(ap)
    add_budgets(ap, default=[16, 64, 256])
    add_prompts(ap, default=4)
    add_new_tokens(ap, default=96)
    add_threads(ap)
    add_json_flag(ap)
    return ap


def main(argv=None) -> list[dict]:
    args = build_parser().parse_args(argv)

    import torch

    from real_models import bundle as bundle_mod
    from real_models import decode
    from real_models.validate import load_prompts

    torch.set_num_threads(args.threads)
    bundle = bundle_mod.load(args.target or bundle_mod.TINY_TARGET,
                             args.drafter or bundle_mod.TINY_DRAFTER, device=args.device)
    prompts = load_prompts(bundle, args.prompts, 64)
    configs = [("ar", "ar", None), ("chain", "chain", None)]
    configs += [(f"ddtree B={b}", "ddtree", b) for b in args.budgets]
    # warm-up (first forwards allocate)
    decode(bundle, prompts[0], 16, method="ddtree", budget=max(args.budgets))
    rows = []
    ar_tpot = None
    for label, method, budget in configs:
        res = [decode(bundle, p, args.new_tokens, method=method, budget=budget) for p in prompts]
        rounds = [r for x in res for r in x.rounds]
        total = sum(r.total for r in rounds)
        split = {s: sum(getattr(r, s) for r in rounds) / len(rounds) * 1e3
                 for s in ("draft", "build", "verify", "decide", "commit")}
        tpot = float(np.mean([x.decode_s / len(x.tokens) for x in res]))
        ar_tpot = tpot if method == "ar" else ar_tpot
        rows.append({"method": label, "rounds": len(rounds),
                     "tau": float(np.mean([r.tau for r in rounds])),
                     **{f"{k}_ms": v for k, v in split.items()},
                     "round_ms": total / len(rounds) * 1e3,
                     "overhead_fraction": sum(r.overhead for r in rounds) / total,
                     "speedup_vs_ar": ar_tpot / tpot})
    if args.json:
        print(json.dumps(rows, indent=1))
        return rows
    print(f"real-model round time split, {args.device}, {args.threads} thread(s), "
          f"{platform.processor() or platform.machine()}; {args.prompts} prompts x "
          f"{args.new_tokens} tokens, T = 0; milliseconds per round (means)\n")
    print("| method | tau | draft | build | verify | decide | commit | round | overhead | "
          "speedup |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['method']} | {r['tau']:.2f} | {r['draft_ms']:.2f} | {r['build_ms']:.2f} | "
              f"{r['verify_ms']:.2f} | {r['decide_ms']:.2f} | {r['commit_ms']:.2f} | "
              f"{r['round_ms']:.2f} | {100 * r['overhead_fraction']:.1f}% | "
              f"{r['speedup_vs_ar']:.2f} |")
    return rows


if __name__ == "__main__":
    main()
