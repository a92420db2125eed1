"""Benchmark: the DDTree builder against a straightforward per-node heapq builder.

Both sides start from the full ``(L, V)`` float64 log-probability array and end with the tree
and its ancestor-only attention mask, so the timed work includes top-K extraction (or, for the
fast builder, its threshold pass) and the mask. Reported as a ratio of medians measured in the
same run, interleaved, on DFlash-like marginals (sharp at shallow depths, flatter deeper).

Run: ``python benchmarks/bench_ddtree.py`` (``--repeats``, ``--json``).
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

from proofs_check.reference import ddtree_heap_reference
from treespec_sim.policies import ddtree_with_mask


def dflash_like(rng: np.random.Generator, L: int, V: int, kind: str) -> np.ndarray:
    """Log-marginals whose sharpness falls with depth (``kind``: sharp / mixed / flat)."""
    top = {"sharp": (12.0, 3.0), "mixed": (8.0, 0.7), "flat": (2.0, 0.3)}[kind]
    scale = np.linspace(top[0], top[1], L)[:, None]
    logits = rng.standard_normal((L, V)) * scale
    return logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)


def _time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=15)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--budgets", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--kinds", nargs="+", default=["sharp", "mixed", "flat"])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print results as JSON only")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    rows = []
    for kind in args.kinds:
        lp = dflash_like(rng, args.depth, args.vocab, kind)
        for budget in args.budgets:
            # interleave the two sides so machine noise hits both alike
            fast_t, base_t = [], []
            for _ in range(args.repeats):
                t, (tree, mask) = _time(lambda lp=lp, b=budget: ddtree_with_mask(lp, b), 1)
                fast_t.append(t)
                t, ref = _time(lambda lp=lp, b=budget: ddtree_heap_reference(lp, b), 1)
                base_t.append(t)
            parent, token, _depth, ref_mask = ref
            same = (tree.parent.tolist() == parent and tree.token[1:].tolist() == token[1:]
                    and np.array_equal(mask, ref_mask))
            f, b = float(np.median(fast_t)), float(np.median(base_t))
            rows.append({"kind": kind, "budget": budget, "fast_ms": 1e3 * f,
                         "baseline_ms": 1e3 * b, "speedup": b / f, "identical": same,
                         "max_depth": tree.max_depth})
    if args.json:
        print(json.dumps(rows, indent=1))
        return rows
    print(f"ddtree vs per-node heapq baseline; L={args.depth}, V={args.vocab}, float64, "
          f"median of {args.repeats}; {platform.processor() or platform.machine()}")
    print(f"{'marginals':>9} {'B':>5} {'fast ms':>8} {'base ms':>8} {'ratio':>6} "
          f"{'same':>5} {'depth':>5}")
    for r in rows:
        print(f"{r['kind']:>9} {r['budget']:>5} {r['fast_ms']:8.2f} {r['baseline_ms']:8.2f} "
              f"{r['speedup']:6.1f} {r['identical']!s:>5} {r['max_depth']:>5}")
    return rows


if __name__ == "__main__":
    main()
