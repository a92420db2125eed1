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
from treespec_sim.verify import RULES, check_chain
from treespec_sim.verify.block import block_weights
from treespec_sim.verify.traversal import opportunities_with, round_law_from, traversal_round_law
from treespec_sim.verify.univer import NodeView

__all__ = ["BUGGY_VARIANTS", "BuggyVariant", "ensemble_tokenwise_law", "reference_rrs_law"]


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


def _chain_of(tree: DraftTree, rows: np.ndarray, prop: np.ndarray):
    """``(tokens, target rows (gamma + 1, V), proposal rows (gamma, V))`` of a chain tree."""
    check_chain(tree)
    gamma = tree.size
    return [int(t) for t in tree.token[1:]], np.asarray(rows[: gamma + 1], dtype=np.float64), \
        np.asarray(prop[:gamma], dtype=np.float64)


def _block_variant_law(tree, rows, prop, *, first_failure: bool = False,
                       tokenwise_residual: bool = False) -> dict[tuple[int, ...], float]:
    """Block verification with a port's mistake: ``first_failure`` takes ``tau`` as the last
    index before the first failing one (a review suggestion in vllm-ascend PR #11985) instead
    of the largest passing index; ``tokenwise_residual`` draws the bonus from the token-wise
    residual ``norm((P - q)+)`` instead of ``norm((w_tau P - q)+)`` (vllm-ascend #7807)."""
    x, big_p, q = _chain_of(tree, rows, prop)
    gamma = len(x)
    w, _, h = block_weights(x, big_p, q)
    law: dict[tuple[int, ...], float] = {}
    for tau in range(gamma + 1):
        if first_failure:
            prob = float(np.prod(h[1:tau + 1])) * (1.0 - h[tau + 1] if tau < gamma else 1.0)
        else:
            prob = (h[tau] if tau > 0 else 1.0) * float(np.prod(1.0 - h[tau + 1:]))
        if prob <= 0.0:
            continue
        scale = 1.0 if tokenwise_residual else w[tau]
        weights = big_p[gamma] if tau == gamma else np.maximum(scale * big_p[tau] - q[tau], 0.0)
        if weights.sum() <= 1e-15:
            continue
        for y in np.flatnonzero(weights > 0).tolist():
            key = (*x[:tau], y)
            law[key] = law.get(key, 0.0) + prob * float(weights[y] / weights.sum())
    return law


def ensemble_tokenwise_law(tree, rows, prop, *, weight: float
                           ) -> dict[tuple[int, ...], float]:
    r"""Token-wise speculative sampling of a chain with DIVERSE's static ensemble
    (Hugging Face transformers' ``_speculative_sampling`` with ``assistant_ensemble_weight``
    ``w``): accept :math:`X_i` with :math:`\min(1, 1 - w + w\,p/q)`, stop at the first
    rejection, bonus from :math:`\mathrm{norm}((p - q)_+)` (after a full chain: ``p``). Its first
    token has law :math:`w p + (1 - w) q`, at total variation :math:`(1 - w)\,TV(p, q)` from
    the target. ``weight=1`` is ordinary (lossless) speculative sampling."""
    x, big_p, q = _chain_of(tree, rows, prop)
    law: dict[tuple[int, ...], float] = {}
    reach = 1.0
    for i, t in enumerate(x):
        a = min(1.0, 1.0 - weight + weight * big_p[i, t] / q[i, t])
        resid = np.maximum(big_p[i] - q[i], 0.0)
        if reach * (1.0 - a) > 0.0 and resid.sum() > 0.0:
            for y in np.flatnonzero(resid > 0).tolist():
                key = (*x[:i], y)
                law[key] = law.get(key, 0.0) + reach * (1.0 - a) * float(resid[y] / resid.sum())
        reach *= a
    for y in np.flatnonzero(big_p[len(x)] > 0).tolist():
        key = (*x, y)
        law[key] = law.get(key, 0.0) + reach * float(big_p[len(x), y])
    return law


@dataclass(frozen=True)
class BuggyVariant:
    """A drafting scheme paired with a verifier law that does not match it.

    ``chains_only``: the law verifies chains (every node at most one child), and is checked on
    chain shapes only. ``shipped``: a rule an engine or a port shipped (the rest are the
    pitfalls of the verification theory).
    """

    name: str
    scheme: str
    law: LawFn
    description: str
    chains_only: bool = False
    shipped: bool = False


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
    # what engines and ports ship (docs/check_your_verifier.md, "The catalogue")
    BuggyVariant("sibling_order_ratio", "top_k", _package_law("sibling-ratio"),
                 "min(1, p/q) per child in sibling order on top-k children, bonus from "
                 "norm((p - q)+) (warpfront/hipfire PR #483)",
                 shipped=True),
    BuggyVariant("sample_match_acc_below_1", "top_k",
                 _package_law("sample-match[acc=0.7]"),
                 "SGLang sample-and-match with --speculative-accept-threshold-acc 0.7",
                 shipped=True),
    BuggyVariant("sample_match_single_below_1", "top_k",
                 _package_law("sample-match[single=0.5]"),
                 "SGLang sample-and-match with --speculative-accept-threshold-single 0.5",
                 shipped=True),
    BuggyVariant("sample_match_on_iid_draws", "iid", _package_law("sample-match"),
                 "sample-and-match on i.i.d. draws (a duplicate sibling counted twice in the "
                 "running target sum)",
                 shipped=True),
    BuggyVariant("block_first_failure", "iid",
                 lambda t, r, q: _block_variant_law(t, r, q, first_failure=True),
                 "block verification stopped at the first failing index instead of taking the "
                 "largest passing one (vllm-ascend PR #11985 review)",
                 chains_only=True, shipped=True),
    BuggyVariant("block_tokenwise_residual", "iid",
                 lambda t, r, q: _block_variant_law(t, r, q, tokenwise_residual=True),
                 "block verification with the bonus from the token-wise residual "
                 "norm((P - q)+) (vllm-ascend #7807)",
                 chains_only=True, shipped=True),
    BuggyVariant("hf_ensemble_weight_0.5", "iid",
                 lambda t, r, q: ensemble_tokenwise_law(t, r, q, weight=0.5),
                 "token-wise chain verification with assistant_ensemble_weight = 0.5 "
                 "(Hugging Face transformers, DIVERSE): lossy by design",
                 chains_only=True, shipped=True),
]}
