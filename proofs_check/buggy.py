r"""Known-buggy verification variants, and an independent RRS reference they are built from.

Each variant is a pair (drafting scheme of :mod:`proofs_check.sampled`, exact round-law
function) reproducing one row of the pitfalls table (``docs/theory/verification.md`` "Known
pitfalls"). The losslessness check must flag every one of them: a check that cannot fail is
worthless, and these prove it can.

:func:`reference_rrs_law` is a second, independent implementation of RRS/RRSw (a plain loop over
siblings, sharing no code with :mod:`treespec_sim.verify.rrs`); with its default options it must
agree with the package exactly, and its options switch on the bugs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from treespec_sim import DraftTree
from treespec_sim.rows import ArrayOracle
from treespec_sim.verify import RULES
from treespec_sim.verify.traversal import opportunities_with, round_law_from, traversal_round_law
from treespec_sim.verify.univer import NodeView

__all__ = ["BUGGY_VARIANTS", "BuggyVariant", "reference_rrs_law"]


def reference_rrs_law(tree: DraftTree, rows: np.ndarray, proposal: np.ndarray, *,
                      without_replacement: bool, order: str = "draw", chained: bool = True,
                      skip_duplicates: bool = False) -> dict[tuple[int, ...], float]:
    """Exact emitted-token law of recursive rejection sampling on fixed tokens.

    ``order``: ``"draw"`` (correct), ``"by_q"`` (descending proposal mass) or ``"by_id"``.
    ``chained=False`` recomputes each residual from the target row instead of the previous
    residual. ``skip_duplicates=True`` ignores a repeated sibling token without its residual step.
    """
    def law_at(v: int) -> dict[tuple[int, ...], float]:
        p = rows[v]
        q = proposal[v]
        kids = [int(c) for c in tree.children(v)]
        if order == "by_q":
            kids.sort(key=lambda c: -q[tree.token[c]])
        elif order == "by_id":
            kids.sort(key=lambda c: tree.token[c])
        law: dict[tuple[int, ...], float] = {}
        r = p.copy()
        excluded: set[int] = set()
        seen: set[int] = set()
        reach = 1.0
        for c in kids:
            x = int(tree.token[c])
            if skip_duplicates and x in seen:
                continue
            seen.add(x)
            if without_replacement:
                qi = q.copy()
                qi[list(excluded)] = 0.0
                qi = qi / qi.sum()
            else:
                qi = q
            accept = min(1.0, r[x] / qi[x])
            for s, ps in law_at(c).items():
                law[(x, *s)] = law.get((x, *s), 0.0) + reach * accept * ps
            reach *= 1.0 - accept
            if reach <= 0.0:
                return law
            base = r if chained else p
            resid = np.clip(base - qi, 0.0, None)
            if resid.sum() <= 0.0:
                return law
            r = resid / resid.sum()
            excluded.add(x)
        for y in np.flatnonzero(r > 0):
            law[(int(y),)] = law.get((int(y),), 0.0) + reach * float(r[y])
        return law

    return law_at(0)


LawFn = Callable[[DraftTree, np.ndarray, np.ndarray], dict[tuple[int, ...], float]]


def _package_law(rule: str) -> LawFn:
    """The package's exact law of ``rule``, with its input validation bypassed."""
    law = RULES[rule].round_law
    return lambda tree, rows, prop: law(tree, ArrayOracle(rows, tree), prop)


def _traversal_wrong_denominator(tree, rows, prop):
    """Traversal with ``w(a) <- min(1, Z / (1 - q(l)))`` (a public port), not ``Z / R``."""
    opps = opportunities_with(tree, ArrayOracle(rows, tree), prop, step="traversal",
                          scale_update=lambda z, r, rho_x: min(1.0, z / (1.0 - rho_x)))
    return round_law_from(tree, opps)


def _univer_chooser_peeks(tree, rows, prop):
    """A step chooser that reads the node's drafted children: ``reverse`` when the second
    draw has more target mass than the first, traversal otherwise (illegal: the step must be
    fixed before the node's draws are looked at)."""
    def choose(view: NodeView) -> str:
        kids = tree.children(view.node)
        if kids.size == 2 and view.target[tree.token[kids[1]]] > view.target[tree.token[kids[0]]]:
            return "reverse"
        return "traversal"
    return traversal_round_law(tree, ArrayOracle(rows, tree), prop, step=choose)


@dataclass(frozen=True)
class BuggyVariant:
    """A drafting scheme paired with a verifier law that does not match it."""

    name: str
    scheme: str
    law: LawFn
    description: str


#: Every known-buggy variant, by name.
BUGGY_VARIANTS: dict[str, BuggyVariant] = {v.name: v for v in [
    BuggyVariant("rrs_on_without_replacement_draws", "without_replacement", _package_law("rrs"),
                 "draws without replacement verified with RRS (q not renormalised)"),
    BuggyVariant("rrsw_on_iid_draws", "iid", _package_law("rrsw"),
                 "i.i.d. draws verified with the RRSw update"),
    BuggyVariant("dropped_duplicate_residual", "iid",
                 lambda t, r, q: reference_rrs_law(t, r, q, without_replacement=False,
                                                   skip_duplicates=True),
                 "duplicate i.i.d. siblings skipped without their residual step"),
    BuggyVariant("siblings_reordered_by_q", "without_replacement",
                 lambda t, r, q: reference_rrs_law(t, r, q, without_replacement=True,
                                                   order="by_q"),
                 "RRSw run in descending-q order instead of draw order"),
    BuggyVariant("siblings_reordered_by_id", "without_replacement",
                 lambda t, r, q: reference_rrs_law(t, r, q, without_replacement=True,
                                                   order="by_id"),
                 "RRSw run in token-id order instead of draw order"),
    BuggyVariant("unchained_residual", "iid",
                 lambda t, r, q: reference_rrs_law(t, r, q, without_replacement=False,
                                                   chained=False),
                 "each residual recomputed from the target row, not chained"),
    BuggyVariant("soft_q_on_deterministic_drafts", "top_k", _package_law("rrsw"),
                 "deterministic top-k children verified with the draft softmax q"),
    BuggyVariant("temperature_mismatch", "tempered", _package_law("rrsw"),
                 "drafts sampled at temperature 0.5 (q^2) but verified with q"),
    BuggyVariant("post_hoc_pruning", "post_hoc", _package_law("rrsw"),
                 "draw k+1, keep the k with highest q, verify as if k were drawn"),
    BuggyVariant("traversal_wrong_denominator", "without_replacement",
                 _traversal_wrong_denominator,
                 "Traversal with denominator 1 - q(l) instead of Z + 1 - w"),
    BuggyVariant("traversal_on_greedy_draws", "greedy", _package_law("traversal"),
                 "Greedy drafts (top k-1 fixed) verified as sequential draws by Traversal"),
    BuggyVariant("univer_on_greedy_draws", "greedy", _package_law("univer"),
                 "Greedy drafts verified by the safe univer (Traversal steps at inner nodes)"),
    BuggyVariant("univer_chooser_peeks", "without_replacement", _univer_chooser_peeks,
                 "a step chooser that reads the node's drafted children (reverse iff the "
                 "second draw has more target mass)"),
]}
