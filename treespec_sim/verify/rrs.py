r"""Recursive rejection sampling for sampled trees: RRS (i.i.d. siblings) and RRSw (without).

RRS: SpecInfer (Miao et al., ASPLOS'24) multi-step speculative sampling. RRSw: Jeon et al. 2024
(recursive speculative decoding, RSD), the without-replacement variant also used by Sequoia.

At node ``v`` with target row :math:`p_v` and children :math:`x_1, \dots, x_k` in draw (node)
order, start from :math:`r \leftarrow p_v`; for each child, with :math:`q_i` the law it was drawn
from, accept it with probability :math:`\min(1, r(x_i)/q_i(x_i))` and descend; otherwise
:math:`r \leftarrow \mathrm{norm}((r - q_i)_+)`. If every child is rejected the bonus is drawn
from :math:`r`. RRS: :math:`q_i = q_v` (i.i.d. draws; duplicates still apply their residual
step). RRSw: :math:`q_i` is :math:`q_v` renormalised over the tokens not drawn before.

Lossless because step ``i`` is ordinary speculative sampling of :math:`q_i` against
:math:`r_{i-1}`, with :math:`x_i \sim q_i` independent of everything that decided
:math:`r_{i-1}` (``docs/theory/verification.md``, "rrs and rrsw"). Both need the siblings in their
true draw order and the exact law they were drawn from.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .._sampling import sample_categorical
from ..proposal import ProposalRows
from ..rows import TargetOracle
from ..tree import DraftTree
from ..validation import as_float_array, row_sum_tolerance
from .outcome import Outcome

__all__ = ["acceptance_steps", "check_proposal", "rrs_expected_length", "rrs_round_law",
           "rrs_sample", "run_node"]

#: A residual with less total mass than this is the (measure-zero) "r == q_i" case: the step
#: accepts with probability 1 and the residual is never used.
_ZERO_RESIDUAL = 1e-15


def check_proposal(proposal, tree: DraftTree, *, without_replacement: bool
                   ) -> np.ndarray | ProposalRows:
    """Validate the proposal rows of a sampled tree; return them as float64 (n+1, V).

    Only rows of nodes that have children are read; each must be a distribution (within the
    input dtype's tolerance, :data:`treespec_sim.validation.ROW_SUM_TOL_BY_DTYPE`; renormalised
    in float64), and every child's token must have positive proposal mass.

    A :class:`~treespec_sim.proposal.ProposalRows` (what sampled builders return) is
    checked law by law -- each distinct law once, not once per node -- and returned as a
    ``ProposalRows`` (renormalised laws replaced), never densified: the verifiers read it row by
    row. The same conditions raise the same messages, naming the first inner node that reads
    the offending law.
    """
    if isinstance(proposal, ProposalRows):
        return _check_proposal_rows(proposal, tree, without_replacement=without_replacement)
    raw, source = as_float_array(proposal, "proposal")
    tol = row_sum_tolerance(source)
    arr = np.asarray(raw, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] != tree.n_nodes:
        raise ValueError(f"proposal must have shape (n+1, V) = ({tree.n_nodes}, V); got "
                         f"{arr.shape}")
    inner = np.unique(tree.parent[1:])
    rows = arr[inner]
    if not np.isfinite(rows).all():
        r, c = np.argwhere(~np.isfinite(rows))[0]
        raise ValueError(f"proposal[{inner[r]}, {c}] = {rows[r, c]} is not finite")
    if (rows < 0).any():
        r, c = np.argwhere(rows < 0)[0]
        raise ValueError(f"proposal[{inner[r]}, {c}] = {rows[r, c]} is negative")
    sums = rows.sum(axis=1)
    off = np.flatnonzero(np.abs(sums - 1.0) > tol)
    if off.size:
        raise ValueError(f"proposal[{inner[off[0]]}] sums to {float(sums[off[0]])!r}, not 1 "
                         f"(tolerance {tol:g} for {source} input)")
    if np.any(np.abs(sums - 1.0) > 1e-12):  # copy only when there is something to fix
        arr = arr.copy()
        arr[inner] = rows / sums[:, None]
    if tree.size:
        _check_drafted_tokens(tree, arr.shape[1],
                              lambda: arr[tree.parent[1:], tree.token[1:]])
    _check_siblings(tree, without_replacement)
    return arr


def _check_drafted_tokens(tree: DraftTree, vocab_size: int, mass_of) -> None:
    """Every drafted token is in the vocabulary and had positive proposal mass.

    ``mass_of()`` returns the proposal mass of each node's token under its parent's law,
    float64 (n,); it is called only after the range check passed.
    """
    tok = tree.token[1:]
    if int(tok.max()) >= vocab_size:
        v = int(np.argmax(tok >= vocab_size)) + 1
        raise ValueError(f"tree.token[{v}] = {tree.token[v]} is outside the proposal's "
                         f"vocabulary (V = {vocab_size})")
    zero = np.flatnonzero(mass_of() <= 0)
    if zero.size:
        v = int(zero[0]) + 1
        raise ValueError(f"node {v} drafted token {tree.token[v]} with zero proposal mass "
                         f"(proposal[{tree.parent[v]}, {tree.token[v]}] = 0)")


def _check_siblings(tree: DraftTree, without_replacement: bool) -> None:
    if without_replacement and tree.has_duplicate_siblings:
        raise ValueError("tree has duplicate siblings, impossible for draws without "
                         "replacement; verify i.i.d.-drawn trees with rule 'rrs'")


def _check_proposal_rows(proposal: ProposalRows, tree: DraftTree, *,
                         without_replacement: bool) -> ProposalRows:
    """:func:`check_proposal` of a :class:`ProposalRows`: ``O(R V + n)`` for ``R`` laws."""
    if proposal.shape[0] != tree.n_nodes:
        raise ValueError(f"proposal must have shape (n+1, V) = ({tree.n_nodes}, V); got "
                         f"{proposal.shape}")
    tol = row_sum_tolerance("float64")
    inner = np.unique(tree.parent[1:])
    used = proposal.row_of[inner]
    if (used < 0).any():  # an inner node reading a zero row
        v = int(inner[np.argmax(used < 0)])
        raise ValueError(f"proposal[{v}] sums to 0.0, not 1 (tolerance {tol:g} for float64 "
                         "input)")
    laws = list(proposal.laws)
    stats = proposal.law_stats
    fixed = False
    # first inner node of each used law, in node order (so errors name the node a dense
    # check would name first)
    uniq, first = np.unique(used, return_index=True)
    # the builder's statistics all clean (finite, >= 0, sums within 1e-12 of 1): the loop
    # would raise nothing and fix nothing, so it is skipped (one vector test, not R scalar ones)
    clean = False
    if stats is not None:
        st = np.array([stats[r] for r in uniq.tolist()], dtype=np.float64).reshape(-1, 2)
        clean = bool((st[:, 0] >= 0).all() and (np.abs(st[:, 1] - 1.0) <= 1e-12).all())
    for r, i in [] if clean else sorted(zip(uniq.tolist(), first.tolist(), strict=True),
                                        key=lambda p: p[1]):
        q, v = laws[r], int(inner[i])
        # NaN propagates through both; +-inf through the sum (the builder's stats are these)
        lo, total = (q.min(), q.sum()) if stats is None else stats[r]
        if not (np.isfinite(lo) and np.isfinite(total)):
            c = int(np.flatnonzero(~np.isfinite(q))[0])
            raise ValueError(f"proposal[{v}, {c}] = {q[c]} is not finite")
        if lo < 0:
            c = int(np.flatnonzero(q < 0)[0])
            raise ValueError(f"proposal[{v}, {c}] = {q[c]} is negative")
        if abs(total - 1.0) > tol:
            raise ValueError(f"proposal[{v}] sums to {float(total)!r}, not 1 (tolerance "
                             f"{tol:g} for float64 input)")
        if abs(total - 1.0) > 1e-12:
            laws[r] = q / total
            fixed = True
    out = proposal.with_laws(laws) if fixed else proposal
    if tree.size:
        def mass_of() -> np.ndarray:
            # one entry per node, read from its parent's law (a scalar read each: cheaper
            # than a mask and a gather per distinct law for a few dozen nodes)
            law_of_parent = out.row_of[tree.parent[1:]].tolist()
            return np.array([out.laws[r][t] for r, t in
                             zip(law_of_parent, tree.token[1:].tolist(), strict=True)],
                            dtype=np.float64)

        _check_drafted_tokens(tree, out.vocab_size, mass_of)
    _check_siblings(tree, without_replacement)
    return out


def acceptance_steps(r0: np.ndarray, q: np.ndarray, tokens: np.ndarray, without_replacement: bool
           ) -> Iterator[tuple[float, np.ndarray]]:
    """For each sibling in draw order: (acceptance probability, residual before the step).

    After the last yield the generator's return value is the final residual (bonus law).
    """
    r = r0
    q_left = q.copy() if without_replacement else q
    for x in tokens:
        if without_replacement:
            qi = q_left / q_left.sum()
        else:
            qi = q
        accept = 1.0 if r[x] >= qi[x] else float(r[x] / qi[x])
        yield accept, r
        if accept >= 1.0:
            return r  # never rejected: nothing after this sibling is reachable
        resid = np.maximum(r - qi, 0.0)  # np.clip's values, ~10x faster
        total = resid.sum()
        if total <= _ZERO_RESIDUAL:  # r == q_i up to rounding: acceptance was 1
            return r
        r = resid / total
        if without_replacement:
            q_left = q_left.copy()
            q_left[x] = 0.0
    return r


def run_node(gen: Iterator[tuple[float, np.ndarray]]) -> tuple[list[float], np.ndarray]:
    accepts = []
    try:
        while True:
            a, _ = next(gen)
            accepts.append(a)
    except StopIteration as stop:
        return accepts, stop.value


def rrs_sample(tree: DraftTree, oracle: TargetOracle, rng: np.random.Generator,
               proposal: np.ndarray, *, without_replacement: bool) -> Outcome:
    """Sample one round of RRS (``without_replacement=False``) or RRSw."""
    path: list[int] = []
    v = 0
    while True:
        kids = tree.children(v)
        steps = acceptance_steps(np.asarray(oracle.row(v), dtype=np.float64), proposal[v],
                       tree.token[kids], without_replacement)
        i = 0
        while True:
            try:
                accept, _ = next(steps)
            except StopIteration as stop:  # every child rejected: bonus from the residual
                bonus = sample_categorical(stop.value, rng)
                return Outcome.from_path(tree, tuple(path), bonus)
            if accept >= 1.0 or rng.random() < accept:
                v = int(kids[i])
                path.append(v)
                break
            i += 1


def rrs_expected_length(tree: DraftTree, oracle: TargetOracle, proposal: np.ndarray, *,
                        without_replacement: bool) -> float:
    r"""Exact :math:`E[\tau]` over the verifier's coins, tokens fixed (bottom-up recursion)."""
    accepted_below = np.zeros(tree.n_nodes)
    for v in range(tree.n_nodes - 1, -1, -1):
        kids = tree.children(v)
        if kids.size == 0:
            continue
        accepts, _ = run_node(acceptance_steps(np.asarray(oracle.row(v), dtype=np.float64),
                                      proposal[v], tree.token[kids], without_replacement))
        reach = 1.0
        total = 0.0
        for i, a in enumerate(accepts):
            total += reach * a * (1.0 + accepted_below[kids[i]])
            reach *= 1.0 - a
        accepted_below[v] = total
    return float(1.0 + accepted_below[0])


def rrs_round_law(tree: DraftTree, oracle: TargetOracle, proposal: np.ndarray, *,
                  without_replacement: bool) -> dict[tuple[int, ...], float]:
    """Exact law of the emitted tokens ``(path tokens..., bonus)`` for fixed drafted tokens."""

    def node_law(v: int) -> dict[tuple[int, ...], float]:
        kids = tree.children(v)
        accepts, residual = run_node(acceptance_steps(np.asarray(oracle.row(v), dtype=np.float64),
                                             proposal[v], tree.token[kids],
                                             without_replacement))
        law: dict[tuple[int, ...], float] = {}
        reach = 1.0
        for i, a in enumerate(accepts):
            if a > 0:
                x = int(tree.token[kids[i]])
                for s, ps in node_law(int(kids[i])).items():
                    law[(x, *s)] = law.get((x, *s), 0.0) + reach * a * ps
            reach *= 1.0 - a
        if reach > 0:
            for y in np.flatnonzero(residual > 0):
                law[(int(y),)] = law.get((int(y),), 0.0) + reach * float(residual[y])
        return law

    return node_law(0)
