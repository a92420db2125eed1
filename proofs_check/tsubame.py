r"""Sampled drafting policies at T > 0 (Tsubame, sampled chains, dynamic trees) as exact checks.

A *Tsubame world* has a target ``p(path)``, a drafter whose conditional proposal
``q̂(path)`` depends on the sampled ancestors (a correction), and per-depth marginals ``m_d`` (a
DFlash drafter's one-pass output, which ignores the path). Pass 1 of every check is the
package's own planner (:func:`treespec_sim.policies.tsubame_shape` on ``log m``); pass 2
is enumerated exactly (:func:`proofs_check.sampled.enumerate_trees`) with either proposal; the
package's verifier laws are mixed over every filled tree and compared with the target's law
(``docs/theory/tsubame.md``, conditions C1-C4).

Known-buggy variants, each violating one condition:

``pass1_token_reuse`` (C3)
    pass 1 draws two i.i.d. candidate sets per node and the plan keeps the one with the higher
    draft score; pass 2 *reuses* it instead of drawing afresh; verified with RRS as a fresh draw.
``target_filtered_candidates`` (C1)
    two draws without replacement; the tree keeps the first one whose target probability is at
    least its proposal probability (this round's target read before verification).
``corrected_sampled_marginal_verified`` (C4)
    children drawn from the correction ``q̂(path)``, the verifier told the marginal ``m_d``.
``dedup_iid_siblings`` (C4)
    i.i.d. duplicates merged, the merged (distinct) children still verified with RRS, the merge
    warned against in ``docs/theory/verification.md`` "Known pitfalls" (skipping a duplicate's
    residual step is ``caught[dropped_duplicate_residual]``). Merging and switching to RRSw is
    *lossless* (:func:`dedup_rrsw_gap`).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from treespec_sim import DraftTree
from treespec_sim.policies import tsubame_shape
from treespec_sim.policies.dynamic import dynamic_tree
from treespec_sim.rows import ArrayOracle
from treespec_sim.verify import RULES

from .enumerate import draw_tuples, extend_law, follow_round_law_bruteforce, max_law_gap
from .sampled import enumerate_trees, round_law, target_law_from

__all__ = ["BUGGY_TSUBAME", "TsubameWorld", "buggy_gap", "dedup_rrsw_gap", "dynamic_follow_gap",
           "lossless_gap", "sampled_policies"]


class TsubameWorld:
    """Target ``p(path)``, correction ``q̂(path)`` and marginals ``m_d``, drawn lazily."""

    def __init__(self, rng: np.random.Generator, vocab: int, depth: int, *,
                 alpha: float = 1.0, mix: float = 0.5):
        self.rng, self.vocab, self.depth, self.alpha, self.mix = rng, vocab, depth, alpha, mix
        self._p: dict[tuple[int, ...], np.ndarray] = {}
        self._q: dict[tuple[int, ...], np.ndarray] = {}
        # marginals: mostly the target's "typical" row, plus noise (informative but wrong)
        self.marginals = np.array([rng.dirichlet(np.full(vocab, alpha)) for _ in range(depth)])

    def p(self, path: tuple[int, ...]) -> np.ndarray:
        if path not in self._p:
            self._p[path] = self.rng.dirichlet(np.full(self.vocab, self.alpha))
        return self._p[path]

    def corrected(self, path: tuple[int, ...]) -> np.ndarray:
        """``q̂(path)``: a mix of the target row and noise (a conditional, path-aware draft)."""
        if path not in self._q:
            noise = self.rng.dirichlet(np.full(self.vocab, self.alpha))
            self._q[path] = (1 - self.mix) * self.p(path) + self.mix * noise
        return self._q[path]

    def marginal(self, path: tuple[int, ...]) -> np.ndarray:
        """``m_{|path|+1}``: ignores the path (a DFlash marginal)."""
        return self.marginals[min(len(path), self.depth - 1)]

    @property
    def log_marginals(self) -> np.ndarray:
        return np.log(self.marginals)


def _package_law(rule: str):
    law = RULES[rule].round_law
    return lambda tree, rows, prop: law(tree, ArrayOracle(rows, tree), prop)


def _gap(law: dict, world: TsubameWorld, n_tokens: int) -> float:
    return max_law_gap(extend_law(law, world.p, n_tokens),
                       target_law_from(world.p, n_tokens, world.vocab))


#: (policy label, drafting scheme, verifier rule, proposal kind) checked for losslessness.
sampled_policies = (
    ("sampled_chain,marginal", "iid", "rrs", "marginal"),
    ("sampled_chain,corrected", "iid", "rrs", "corrected"),
    ("tsubame,iid", "iid", "rrs", "marginal"),
    ("tsubame,iid,corrected", "iid", "rrs", "corrected"),
    ("tsubame,wo", "without_replacement", "rrsw", "marginal"),
    ("tsubame,wo,corrected", "without_replacement", "rrsw", "corrected"),
    ("tsubame,wo,corrected", "without_replacement", "traversal", "corrected"),
    ("tsubame,wo,corrected", "without_replacement", "univer", "corrected"),
    ("tsubame,wo,corrected", "without_replacement", "univer-guided", "corrected"),
)


def _shape(world: TsubameWorld, label: str, rng: np.random.Generator) -> DraftTree:
    if label.startswith("sampled_chain"):
        n = world.depth
        return DraftTree.from_parents(np.arange(-1, n), [-1] + [0] * n)
    # pass 1: the package's planner on the marginals, a budget the enumeration can afford
    return tsubame_shape(world.log_marginals, int(rng.integers(2, 5)))


def lossless_gap(label: str, scheme: str, rule: str, kind: str):
    """Check: the policy's pass-2 draws verified by ``rule`` emit the target's law."""
    def run(rng: np.random.Generator, size: int) -> tuple[int, float]:
        worst, n = 0.0, 0
        for _ in range(4 * size):
            world = TsubameWorld(rng, 3, 2, alpha=float(rng.choice([0.5, 1.0, 3.0])))
            shape = _shape(world, label, rng)
            prop = world.corrected if kind == "corrected" else world.marginal
            law = round_law(shape, world.p, prop, scheme=scheme, law_fn=_package_law(rule))
            worst = max(worst, _gap(law, world, int(shape.depth.max()) + 1))
            n += 1
        return n, worst
    return run


def dynamic_follow_gap(rng: np.random.Generator, size: int) -> tuple[int, float]:
    """Check: the EAGLE-2-like dynamic tree (deterministic tokens) with ``follow`` is lossless,
    at any target temperature (rows are arbitrary laws)."""
    worst, n = 0.0, 0
    for _ in range(4 * size):
        world = TsubameWorld(rng, 3, 3, alpha=float(rng.choice([0.3, 1.0])))
        tree = dynamic_tree(world.log_marginals, int(rng.integers(1, 7)),
                            top_k=int(rng.integers(1, 4)))
        rows = np.array([world.p(path) for path in [(), *tree.paths()]])
        n_tokens = int(tree.depth.max()) + 1
        worst = max(worst, _gap(follow_round_law_bruteforce(tree, rows), world, n_tokens))
        n += 1
    return n, worst


# ------------------------------------------------------------------------- buggy variants
def _law_pass1_reuse(world: TsubameWorld) -> dict:
    """Root with one child: two i.i.d. candidates, keep the higher-q one, verify as fresh."""
    q = world.marginal(())
    shape = DraftTree.from_parents_multiset([-1, 0], [-1, 0])
    kept: dict[int, float] = defaultdict(float)
    for (a, b), prob in draw_tuples(q, 2, replacement=True):
        kept[max((a, b), key=lambda x: (q[x], -x))] += prob
    return _mix_single_child(world, shape, kept, q, "rrs")


def _law_target_filtered(world: TsubameWorld) -> dict:
    """Two draws without replacement; keep the first with p >= q (else the second)."""
    q = world.marginal(())
    p = world.p(())
    shape = DraftTree.from_parents_multiset([-1, 0], [-1, 0])
    kept: dict[int, float] = defaultdict(float)
    for (a, b), prob in draw_tuples(q, 2, replacement=False):
        kept[a if p[a] >= q[a] else b] += prob
    return _mix_single_child(world, shape, kept, q, "rrsw")


def _mix_single_child(world, shape, kept: dict[int, float], q: np.ndarray, rule: str) -> dict:
    law: dict[tuple[int, ...], float] = defaultdict(float)
    for x, prob in kept.items():
        tree = DraftTree.from_parents([-1, 0], [-1, x])
        rows = np.array([world.p(()), world.p((x,))])
        prop = np.array([q, q])
        for s, ps in _package_law(rule)(tree, rows, prop).items():
            law[s] += prob * ps
    return dict(law)


def _law_corrected_marginal(world: TsubameWorld) -> dict:
    shape = DraftTree.from_parents_multiset([-1, 0, 0, 1], [-1, 0, 0, 0])
    law: dict[tuple[int, ...], float] = defaultdict(float)
    for tree, _prop, prob in enumerate_trees(shape, world.corrected, "without_replacement"):
        rows = np.array([world.p(path) for path in [(), *tree.paths()]])
        told = np.array([world.marginal(path) for path in [(), *tree.paths()]])
        for s, ps in _package_law("rrsw")(tree, rows, told).items():
            law[s] += prob * ps
    return dict(law)


def _law_dedup_iid(world: TsubameWorld, rule: str = "rrs") -> dict:
    """Root with 2 i.i.d. children; a duplicate is merged; verified with ``rule``."""
    q = world.marginal(())
    law: dict[tuple[int, ...], float] = defaultdict(float)
    for (a, b), prob in draw_tuples(q, 2, replacement=True):
        tokens = [a] if a == b else [a, b]
        tree = DraftTree.from_parents([-1] + [0] * len(tokens), [-1, *tokens])
        rows = np.array([world.p(path) for path in [(), *tree.paths()]])
        prop = np.array([q] * tree.n_nodes)
        for s, ps in _package_law(rule)(tree, rows, prop).items():
            law[s] += prob * ps
    return dict(law)


def dedup_rrsw_gap(rng: np.random.Generator, size: int) -> tuple[int, float]:
    """Check: merging duplicate i.i.d. siblings and verifying with RRSw *is* lossless.

    The first-appearance sequence of i.i.d. draws is a without-replacement sequence whose
    length is decided independently of the next new token (so C3's adaptive stopping holds);
    the warning against merging (``docs/theory/verification.md`` "Known pitfalls",
    ``docs/theory/tsubame.md`` §3) is about keeping the RRS rule after the merge (caught below).
    """
    worst, n = 0.0, 0
    for _ in range(2 * size):
        world = TsubameWorld(rng, 3, 2, alpha=float(rng.choice([0.3, 1.0, 3.0])))
        worst = max(worst, _gap(_law_dedup_iid(world, "rrsw"), world, 2))
        n += 1
    return n, worst


#: Tsubame-specific known-buggy variants: name -> (condition violated, what, law builder).
BUGGY_TSUBAME = {
    "pass1_token_reuse": ("C3", "pass-1 candidates selected by draft score, reused as fresh draws",
                          _law_pass1_reuse),
    "target_filtered_candidates": ("C1", "drafted children kept only if p >= q (target read)",
                                   _law_target_filtered),
    "corrected_sampled_marginal_verified": ("C4", "drawn from the correction, verified with the "
                                                  "marginal", _law_corrected_marginal),
    "dedup_iid_siblings": ("C4", "duplicate i.i.d. siblings merged, still verified with RRS",
                           _law_dedup_iid),
}


def buggy_gap(name: str):
    """Caught check: the variant's law differs from the target's (gap > tolerance)."""
    _, _, build = BUGGY_TSUBAME[name]

    def run(rng: np.random.Generator, size: int) -> tuple[int, float]:
        worst, n = 0.0, 0
        for _ in range(max(2, size)):
            world = TsubameWorld(rng, 3, 2, alpha=1.0)
            law = build(world)
            worst = max(worst, _gap(law, world, 2 if name != "corrected_sampled_marginal_verified"
                                    else 3))
            n += 1
        return n, worst
    return run
