"""Benchmark: ``ddtree`` (input checks on) against DDTree's own builder and one exp-and-sum pass.

Three sides, timed interleaved in one run on the same raw ``(L, V)`` array (float32 and
float64), on DFlash-like marginals (sharp at shallow depths, flatter deeper):

* ``fast``: ``ddtree_with_mask`` -- input checks (every row's mass), tree, ancestor mask;
* ``ref``: ``proofs_check.reference.ddtree_torch_reference`` -- DDTree's builder as its public
  code runs it (``torch.topk`` of float32 marginals, ``K = min(B, V)``, Python ``heapq``
  pops, ancestor mask);
* ``expsum``: ``np.exp(lp).sum(axis=1)`` -- one exp-and-row-sum pass, the floor of any exact
  check of the rows' mass in numpy.

``same`` is ``True`` for identical trees, ``tie`` where they differ only by tokens of exactly
equal value (ddtree breaks such ties towards the smaller token id, torch.topk in an unspecified
order). torch runs on one thread, as ddtree does. The builder is numba-compiled
(:mod:`treespec_sim.policies._dense`); the first call's compile is paid before timing.

Reported as ratios of medians (``ref/fast``, ``fast/expsum``) and whether the trees are
identical. Run: ``python benchmarks/bench_ddtree.py`` (``--repeats``, ``--json``).
"""

from __future__ import annotations

import json
import time

import numpy as np

from proofs_check.reference import ddtree_torch_reference
from treespec_sim import machine
from treespec_sim.cli import (
    OneLineParser,
    add_budgets,
    add_json_flag,
    add_repeats,
    add_seed,
    positive_int,
)
from treespec_sim.policies import ddtree_with_mask


def dflash_like(rng: np.random.Generator, L: int, V: int, kind: str) -> np.ndarray:
    """Log-marginals whose sharpness falls with depth (``kind``: sharp / mixed / flat)."""
    top = {"sharp": (12.0, 3.0), "mixed": (8.0, 0.7), "flat": (2.0, 0.3)}[kind]
    scale = np.linspace(top[0], top[1], L)[:, None]
    logits = rng.standard_normal((L, V)) * scale
    return logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)


def _same_up_to_exact_ties(lp: np.ndarray, tree, token: list, depth: list) -> bool:
    """Whether the two trees differ only by swapping tokens of exactly equal value: the same
    per-depth multiset of node values (ddtree breaks such ties towards the smaller id)."""
    if len(token) != tree.size + 1:
        return False
    ours = sorted(zip(tree.depth[1:].tolist(), lp[tree.depth[1:] - 1, tree.token[1:]].tolist(),
                      strict=True))
    theirs = sorted(zip(depth[1:], lp[np.asarray(depth[1:]) - 1, token[1:]].tolist(),
                      strict=True))
    return ours == theirs


def _once(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def build_parser() -> OneLineParser:
    """The parser of ``python benchmarks/bench_ddtree.py``."""
    ap = OneLineParser(prog="python benchmarks/bench_ddtree.py",
                       description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=positive_int, default=15)
    ap.add_argument("--vocab", type=positive_int, default=32768)
    add_budgets(ap, default=[64, 256, 1024])
    ap.add_argument("--kinds", nargs="+", default=["sharp", "mixed", "flat"])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    add_repeats(ap, default=15)
    add_seed(ap)
    add_json_flag(ap)
    return ap


def main(argv=None) -> list[dict]:
    args = build_parser().parse_args(argv)
    # One core per side: ddtree and the numpy pass are single-threaded, and torch's thread pool
    # on a shared 2-core machine spins against the other side (the reference read 7-14 ms).
    import torch

    torch.set_num_threads(1)
    for dtype in args.dtypes:  # numba's compile (or its cache's load) before any timing
        ddtree_with_mask(np.log(np.full((2, 8), 0.125, dtype=dtype)), 4)
    rng = np.random.default_rng(args.seed)
    rows = []
    for kind in args.kinds:
        lp64 = dflash_like(rng, args.depth, args.vocab, kind)
        for dtype in args.dtypes:
            lp = lp64.astype(dtype)
            for budget in args.budgets:
                times = {"fast": [], "ref": [], "expsum": []}
                for _ in range(args.repeats):  # interleaved: machine noise hits all alike
                    t, (tree, mask) = _once(lambda lp=lp, b=budget: ddtree_with_mask(lp, b))
                    times["fast"].append(t)
                    t, ref = _once(lambda lp=lp, b=budget: ddtree_torch_reference(lp, b))
                    times["ref"].append(t)
                    t, _ = _once(lambda lp=lp: np.exp(lp).sum(axis=1))
                    times["expsum"].append(t)
                parent, token, depth, ref_mask = ref
                same = (tree.parent.tolist() == parent and tree.token[1:].tolist() == token[1:]
                        and np.array_equal(mask, ref_mask))
                if not same and _same_up_to_exact_ties(lp, tree, token, depth):
                    same = "tie"  # torch.topk's order among equal values is unspecified
                med = {k: float(np.median(v)) for k, v in times.items()}
                rows.append({"kind": kind, "dtype": dtype, "budget": budget,
                             "fast_ms": 1e3 * med["fast"], "ref_ms": 1e3 * med["ref"],
                             "expsum_ms": 1e3 * med["expsum"],
                             "ref_over_fast": med["ref"] / med["fast"],
                             "fast_over_expsum": med["fast"] / med["expsum"],
                             "identical": same, "max_depth": tree.max_depth})
    if args.json:
        print(json.dumps(rows, indent=1))
        return rows
    print(f"ddtree (checks on) vs DDTree's builder and one exp+sum pass; L={args.depth}, "
          f"V={args.vocab}, median of {args.repeats}, interleaved; "
          f"{machine.cpu_description()}")
    print(f"{'marginals':>9} {'dtype':>7} {'B':>5} {'fast ms':>8} {'ref ms':>7} {'exp ms':>7} "
          f"{'ref/fast':>8} {'fast/exp':>8} {'same':>5} {'depth':>5}")
    for r in rows:
        print(f"{r['kind']:>9} {r['dtype']:>7} {r['budget']:>5} {r['fast_ms']:8.2f} "
              f"{r['ref_ms']:7.2f} {r['expsum_ms']:7.2f} {r['ref_over_fast']:8.2f} "
              f"{r['fast_over_expsum']:8.2f} {r['identical']!s:>5} {r['max_depth']:>5}")
    print("targets (docs/performance.md): ref/fast >= 3 (B=64), 5 (B=256), 10 (B=1024); "
          "fast/exp <= 2 (B<=256), 3 (B=1024)")
    return rows


if __name__ == "__main__":
    main()
