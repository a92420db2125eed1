"""Single-node multi-draft verification as optimal transport (ground truth for the tests).

At one node of a draft tree, ``k`` drafts ``X = (X_1..X_k)`` with joint law ``Q`` are checked
against the target distribution ``p``. Every lossless verifier (output ``Y ~ p`` exactly) induces
a coupling of ``Q`` and ``p``, and conversely, so the best achievable acceptance is the optimal
transport value with membership cost ``1[y ∉ X]`` (SpecTr, Sun et al., NeurIPS 2023)::

    α*(p, Q) = max_π  Σ_{x̄, y ∈ x̄} π(x̄, y)          (π a coupling of Q and p)
             = min_{H ⊆ V} [ p(H) + Q(some X_i ∉ H) ]   (max-flow / min-cut dual)

Draft laws: ``replacement=True`` means ``k`` i.i.d. draws from ``q`` (SpecTr, SpecInfer);
``replacement=False`` means ``k`` sequential draws without replacement, draw ``i`` from ``q``
renormalised over the tokens not yet drawn (RSD, Jeon et al. 2024).

Functions:

* :func:`draft_set_law` — exact law of the *set* of drafted tokens.
* :func:`optimal_acceptance` — α* as an LP over (draft set, output token), solved with cvxpy.
* :func:`optimal_acceptance_subsets` — the min-cut closed form over all ``2^V`` token sets.
* :func:`optimal_acceptance_sorted` — the same minimum over the ``V+1`` prefixes of the tokens
  sorted by ``p/q`` (Hu et al., ICLR 2025); exact for i.i.d. drafts (proof in its docstring).
* :func:`rrs_acceptance` / :func:`rrsw_acceptance` — exact acceptance of recursive rejection
  sampling with (SpecInfer) and without (RSD) replacement; both are lossless, so they are lower
  bounds on the matching α*.

See ``docs/theory/verification.md``: "The single-node OT problem and its min-cut bound", "Why only
the draft set matters", "Without replacement" and "rrs and rrsw".
All arithmetic is float64; inputs are validated and renormalised to sum exactly to 1.
"""

from __future__ import annotations

import numbers

import numpy as np

from ._lp import solve_lp

__all__ = [
    "LP_TOL",
    "MAX_SUBSET_VOCAB",
    "SUM_TOL",
    "draft_set_law",
    "optimal_acceptance",
    "optimal_acceptance_sorted",
    "optimal_acceptance_subsets",
    "raw_set_law",
    "rrs_acceptance",
    "rrsw_acceptance",
]

LP_TOL = 1e-6
"""Agreement expected between the LP optimum and the closed forms (HiGHS feasibility ~1e-7)."""

SUM_TOL = 1e-9
"""Largest ``|Σp − 1|`` accepted for an input distribution."""

MAX_SUBSET_VOCAB = 16
"""Largest vocabulary for which :func:`optimal_acceptance_subsets` enumerates all subsets."""


# ----------------------------------------------------------------------------- validation


def _check_dist(x: object, name: str) -> np.ndarray:
    """Validate a probability vector and return it as float64, renormalised to sum to 1."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a 1-D array of floats") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must be non-empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    if np.any(arr < 0):
        raise ValueError(f"{name} has negative entries")
    total = float(arr.sum())
    if abs(total - 1.0) > SUM_TOL:
        raise ValueError(f"{name} must sum to 1 (within {SUM_TOL}), sums to {total!r}")
    return arr / total


def _check_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise ValueError(f"k must be an integer, got {k!r}")
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return k


def _check_k_support(k: int, q: np.ndarray, replacement: bool) -> None:
    support = int(np.count_nonzero(q))
    if not replacement and k > support:
        raise ValueError(
            f"k={k} exceeds the support size of q ({support}); "
            "cannot draw that many tokens without replacement")


def _check_pq(p: object, q: object, k: object, replacement: bool
              ) -> tuple[np.ndarray, np.ndarray, int]:
    p_arr = _check_dist(p, "p")
    q_arr = _check_dist(q, "q")
    if p_arr.shape != q_arr.shape:
        raise ValueError(f"p and q must have the same length, got {p_arr.size} and {q_arr.size}")
    k_int = _check_k(k)
    _check_k_support(k_int, q_arr, replacement)
    return p_arr, q_arr, k_int


# ----------------------------------------------------------------------------- draft-set law


def raw_set_law(q: np.ndarray, k: int, replacement: bool) -> dict[frozenset[int], float]:
    """Dynamic programme over the set drafted so far (q already validated)."""
    support = [int(x) for x in np.flatnonzero(q)]
    law: dict[frozenset[int], float] = {frozenset(): 1.0}
    for _ in range(k):
        nxt: dict[frozenset[int], float] = {}
        for s, mass in law.items():
            if replacement:
                free, denom = support, 1.0
            else:
                free = [x for x in support if x not in s]
                denom = float(q[free].sum())  # = 1 − q(S), summed directly (no cancellation)
            for x in free:
                t = s | {x}
                nxt[t] = nxt.get(t, 0.0) + mass * q[x] / denom
        law = nxt
    return law


def draft_set_law(q: object, k: int, *, replacement: bool) -> dict[frozenset[int], float]:
    """Exact law of the set of distinct tokens among ``k`` drafts from ``q``.

    The acceptance of any verifier, and the OT problem, depend on the drafts only through this
    set (``docs/theory/verification.md`` "Why only the draft set matters"), so the LPs aggregate
    ordered tuples into sets.

    Parameters
    ----------
    q : array_like, shape (V,)
        Draft distribution (non-negative, sums to 1 within ``SUM_TOL``).
    k : int
        Number of drafts, ``k >= 1``; without replacement also ``k <= #{x : q(x) > 0}``.
    replacement : bool
        ``True``: ``k`` i.i.d. draws (SpecTr / SpecInfer),
        ``D(C) = Σ_{x̄ ∈ C^k, set(x̄) = C} Π_i q(x_i)``.
        ``False``: sequential draws without replacement (RSD, Jeon et al. 2024),
        ``D(C) = Σ_{orderings of C} Π_i q(x_i) / (1 − Σ_{j<i} q(x_j))``, ``|C| = k``.

    Returns
    -------
    dict[frozenset[int], float]
        Probability of each reachable drafted set (only tokens with ``q > 0`` occur). The values
        sum to 1 up to rounding.

    Notes
    -----
    Computed by a dynamic programme over the set drafted so far: from set ``S`` the next draft is
    ``x`` with probability ``q(x)`` (i.i.d.) or ``q(x) / q(V∖S)`` for ``x ∉ S`` (without
    replacement), which depends on ``S`` only. Cost ``O(k · #sets · V)``.
    """
    q_arr = _check_dist(q, "q")
    k_int = _check_k(k)
    _check_k_support(k_int, q_arr, replacement)
    return raw_set_law(q_arr, k_int, replacement)


# ----------------------------------------------------------------------------- LP optimum


def optimal_acceptance(p: object, q: object, k: int, *, replacement: bool) -> float:
    """Optimal acceptance α* of any lossless ``k``-draft verifier, solved as an LP with cvxpy.

    Parameters
    ----------
    p : array_like, shape (V,)
        Target distribution.
    q : array_like, shape (V,)
        Draft distribution.
    k : int
        Number of drafts (``k >= 1``; without replacement ``k <= |supp q|``).
    replacement : bool
        ``True``: i.i.d. drafts; ``False``: sequential draws without replacement.

    Returns
    -------
    float
        ``α* = max_π Σ_{C} Σ_{y ∈ C} π(C, y)`` subject to ``π >= 0``,
        ``Σ_y π(C, y) = D(C)`` (``D`` = :func:`draft_set_law`) and ``Σ_C π(C, y) = p(y)``,
        clipped to ``[0, 1]``.

    Raises
    ------
    ValueError
        Bad ``p``, ``q`` or ``k`` (message names the argument).
    RuntimeError
        The solver did not report ``optimal``. ``optimal_inaccurate`` is accepted with a
        ``RuntimeWarning`` (the value is then only approximately optimal).

    Notes
    -----
    This is the optimal-transport multi-draft problem (OTM) of SpecTr (Sun et al., NeurIPS 2023)
    with draft tuples aggregated into sets (``docs/theory/verification.md`` "Why only the draft set
    matters"); its dual is the min-cut form of Hu et al. (ICLR 2025) and, for ``k = 2``, Khisti et
    al. (ICLR 2025). For ``k = 1`` it is the maximal coupling, ``α* = 1 − TV(p, q)`` (Leviathan et
    al. 2023).

    The two marginal families have the same total mass, so one constraint is redundant; the
    column constraint of the last token is dropped (keeping it made HiGHS report infeasible on a
    1e-14 mismatch; ``docs/theory/verification.md`` "The single-node OT problem and its min-cut
    bound"). Solved with HiGHS, presolve off (with presolve HiGHS declared some feasible instances
    with tiny set masses infeasible), when cvxpy has it; the default solver otherwise.
    Variables: ``#sets × V`` (V=5, k=2: 15 × 5 i.i.d., 10 × 5 without replacement; about 9 ms
    per solve). Agreement with the closed forms is expected within ``LP_TOL`` (observed ≤ 2e-7 on
    3000 stress instances).
    """
    import cvxpy as cp

    p_arr, q_arr, k_int = _check_pq(p, q, k, replacement)
    law = raw_set_law(q_arr, k_int, replacement)
    sets = sorted(law, key=lambda s: (len(s), sorted(s)))
    weights = np.array([law[s] for s in sets], dtype=np.float64)
    weights /= weights.sum()  # exact total 1, like p
    n_sets, vocab = len(sets), p_arr.size
    member = np.zeros((n_sets, vocab), dtype=np.float64)
    for i, s in enumerate(sets):
        member[i, list(s)] = 1.0

    pi = cp.Variable((n_sets, vocab), nonneg=True)
    constraints = [cp.sum(pi, axis=1) == weights]
    if vocab > 1:
        constraints.append(cp.sum(pi[:, :-1], axis=0) == p_arr[:-1])
    problem = cp.Problem(cp.Maximize(cp.sum(cp.multiply(member, pi))), constraints)
    value = solve_lp(problem, "optimal_acceptance")
    return float(min(1.0, max(0.0, value)))


# ----------------------------------------------------------------------------- closed forms


def _all_in_h_wo(law: dict[frozenset[int], float], vocab: int) -> np.ndarray:
    """``P(all drafts ∈ H)`` for every bitmask ``H``: subset-sum (zeta) transform of the law."""
    f = np.zeros(1 << vocab, dtype=np.float64)
    for s, mass in law.items():
        f[sum(1 << x for x in s)] += mass
    for bit in range(vocab):
        view = f.reshape(-1, 2, 1 << bit)
        view[:, 1, :] += view[:, 0, :]
    return f


def optimal_acceptance_subsets(p: object, q: object, k: int, *, replacement: bool) -> float:
    """Min-cut closed form of α*, minimising over all ``2^V`` token sets ``H``.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions, ``V <= MAX_SUBSET_VOCAB`` (16).
    k : int
        Number of drafts.
    replacement : bool
        ``True``: i.i.d. drafts; ``False``: without replacement.

    Returns
    -------
    float
        ``α* = min_{H ⊆ V} [p(H) + P(some draft ∉ H)]``, i.e.

        * i.i.d.: ``min_H [p(H) + 1 − q(H)^k]`` (Hu et al., ICLR 2025; for ``k = 2`` the
          Khisti et al. ICLR 2025 form ``min_S [p(S) + q(S^c)² + 2 q(S) q(S^c)]``);
        * without replacement: ``min_H [p(H) + 1 − P_wo(all k draws ∈ H)]``.

    Raises
    ------
    ValueError
        Bad inputs, or ``V > 16``.

    Notes
    -----
    Upper bound: ``P(Y ∈ X) <= P(Y ∈ H) + P(∃ i: X_i ∉ H)`` for every ``H``; tightness is
    max-flow/min-cut on the bipartite network draft-set → token (``docs/theory/verification.md``
    "The single-node OT problem and its min-cut bound"). Beware the common mis-statement
    ``p(H) + (1 − q(H))^k``, which is only right at ``k = 1``.
    ``P_wo(all ∈ H) = Σ_{C ⊆ H} D(C)`` is computed for all ``H`` at once by a subset-sum
    transform of :func:`draft_set_law`; cost ``O(V 2^V)``.
    """
    p_arr, q_arr, k_int = _check_pq(p, q, k, replacement)
    vocab = p_arr.size
    if vocab > MAX_SUBSET_VOCAB:
        raise ValueError(f"p has {vocab} tokens; subset enumeration allows at most "
                         f"{MAX_SUBSET_VOCAB}")
    masks = np.arange(1 << vocab, dtype=np.int64)
    bits = ((masks[:, None] >> np.arange(vocab)) & 1).astype(np.float64)
    p_h = bits @ p_arr
    if replacement:
        all_in = (bits @ q_arr) ** k_int
    else:
        all_in = _all_in_h_wo(raw_set_law(q_arr, k_int, replacement), vocab)
    return float(np.clip(np.min(p_h + (1.0 - all_in)), 0.0, 1.0))


def optimal_acceptance_sorted(p: object, q: object, k: int, *, replacement: bool) -> float:
    """The min-cut form of α* evaluated only over prefixes of tokens sorted by ``p/q``.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions.
    k : int
        Number of drafts.
    replacement : bool
        ``True``: i.i.d. drafts; ``False``: without replacement.

    Returns
    -------
    float
        ``min_{j = 0..V} [p(H_j) + P(some draft ∉ H_j)]`` where ``H_j`` is the first ``j`` tokens
        in ascending ``p(x)/q(x)`` (``q(x) = 0 < p(x)`` sorts last; tokens with ``p = q = 0``
        change nothing). Always ``>=`` the true α*.

    Notes
    -----
    Efficient evaluation of Hu et al. (ICLR 2025): the optimal ``H`` is a ratio prefix.

    **Exact for i.i.d. drafts** (any ``k``), by an exchange argument: write
    ``f(H) = p(H) − g(q(H))`` with ``g(t) = t^k`` convex. If ``H`` is optimal, ``x ∈ H`` and
    ``y ∉ H`` with ``q(x), q(y) > 0``, optimality against ``H∖{x}`` and ``H ∪ {y}`` gives
    ``p(x)/q(x) <= (g(t) − g(t − q(x)))/q(x) <= g'(t) <= (g(t + q(y)) − g(t))/q(y) <= p(y)/q(y)``
    with ``t = q(H)``; a token with ``q = 0 < p`` is never in an optimal ``H``. So some optimal
    ``H`` is a prefix (ties are harmless: for ``k >= 2`` the inequalities are strict, for ``k = 1``
    tied tokens have ratio 1 and contribute 0). Cost ``O(V log V)``.

    **Without replacement** the sources quoted in ``docs/theory/verification.md`` ("Without
    replacement") report agreement on 2000 instances with full support and gaps up to 1e-8
    when some ``q`` are near zero, and mark the prefix property for
    this case as unproven [R]; ``P_wo(all ∈ H)`` depends on the individual ``q`` inside ``H``, so
    the proof above does not carry over. Guaranteed here: it is an upper bound on α*. Observed:
    equal to :func:`optimal_acceptance_subsets` to rounding (≤ 6e-16) on 2e4 random instances with
    exact zeros, 450 adversarial hill-climbs and full grids on V = 3, 4 — no counterexample, but
    no proof (``tests/proofs/test_ot.py`` keeps it as an empirical check). Computed from
    :func:`draft_set_law`, cost ``O(#sets)``.
    """
    p_arr, q_arr, k_int = _check_pq(p, q, k, replacement)
    vocab = p_arr.size
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q_arr > 0, p_arr / np.where(q_arr > 0, q_arr, 1.0),
                         np.where(p_arr > 0, np.inf, 0.0))
    order = np.argsort(ratio, kind="stable")
    p_pre = np.concatenate([[0.0], np.cumsum(p_arr[order])])
    if replacement:
        all_in = np.concatenate([[0.0], np.cumsum(q_arr[order])]) ** k_int
    else:
        rank = np.empty(vocab, dtype=np.int64)
        rank[order] = np.arange(vocab)
        by_max_rank = np.zeros(vocab + 1, dtype=np.float64)
        for s, mass in raw_set_law(q_arr, k_int, replacement).items():
            by_max_rank[max(rank[x] for x in s) + 1] += mass  # C ⊆ H_j  iff  max rank < j
        all_in = np.cumsum(by_max_rank)
    return float(np.clip(np.min(p_pre + (1.0 - all_in)), 0.0, 1.0))


# ----------------------------------------------------------------------------- RRS / RRSw


def _excess(r: np.ndarray, prop: np.ndarray) -> tuple[np.ndarray, float]:
    """``[r − prop]_+`` and its mass ``TV(r, prop)``."""
    diff = np.maximum(r - prop, 0.0)
    return diff, float(diff.sum())


def rrs_acceptance(p: object, q: object, k: int) -> float:
    """Exact acceptance of recursive rejection sampling with ``k`` i.i.d. drafts (SpecInfer).

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions.
    k : int
        Number of i.i.d. drafts.

    Returns
    -------
    float
        ``α_RRS = 1 − Π_{i=1..k} z_i`` with ``r_0 = p``, ``z_i = Σ_x [r_{i−1} − q]_+(x)``
        ``(= 1 − Σ_x min(r_{i−1}, q))`` and ``r_i = [r_{i−1} − q]_+ / z_i``.

    Notes
    -----
    Multi-step speculative sampling of SpecInfer (Miao et al., ASPLOS 2024),
    ``docs/theory/verification.md`` "rrs and rrsw": draft ``i`` is accepted w.p.
    ``min(1, r(x_i)/q(x_i))``; on rejection ``r ← norm([r − q]_+)`` (also for duplicate drafts);
    if all ``k`` are rejected a token is drawn from ``r``. The
    residual does not depend on which token was rejected, so the acceptance is the deterministic
    product above. If ``z_i = 0`` the residual is all-zero (``r_{i−1} = q``): step ``i`` accepts
    with probability 1 and the recursion stops (no 0/0). For ``k = 1`` this is ``1 − TV(p, q)``.
    """
    r, q_arr, k_int = _check_pq(p, q, k, True)
    reject = 1.0
    for _ in range(k_int):
        diff, z = _excess(r, q_arr)
        reject *= z
        if z == 0.0 or reject == 0.0:
            return 1.0
        r = diff / z
    return float(min(1.0, max(0.0, 1.0 - reject)))


def rrsw_acceptance(p: object, q: object, k: int) -> float:
    """Exact acceptance of recursive rejection sampling without replacement (RRSw, RSD).

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions.
    k : int
        Number of drafts, ``k <= |supp q|``.

    Returns
    -------
    float
        ``A(p, ∅, 1)`` where, with ``q_S = q·1[∉S] / q(V∖S)`` the proposal after drafting set
        ``S`` and ``z = Σ [r − q_S]_+``::

            A(r, S, i) = (1 − z) + Σ_x [q_S − r]_+(x) · A([r − q_S]_+ / z, S ∪ {x}, i + 1),
            A(·, ·, k + 1) = 0.

    Notes
    -----
    Recursive rejection sampling without replacement of Jeon et al. 2024 (RSD),
    ``docs/theory/verification.md`` "rrs and rrsw": draft ``i`` is ``x_i ~ q_{S_{i−1}}``,
    accepted w.p. ``min(1, r(x_i)/q_{S_{i−1}}(x_i))``; on rejection
    ``r ← norm([r − q_{S_{i−1}}]_+)``. Given a rejection at step ``i``, ``x_i`` has law
    ``norm([q_S − r]_+)`` (total mass ``z``), which gives the recursion; it branches only over
    tokens that can be rejected. If ``z = 0`` (all-zero residual, ``r = q_S``) the step accepts
    surely and there is nothing to normalise. Exact; cost ``O(V^k)`` in the worst case. For
    ``k = 1`` this is ``1 − TV(p, q)``.
    """
    p_arr, q_arr, k_int = _check_pq(p, q, k, False)

    def accept(r: np.ndarray, drafted: frozenset[int], step: int) -> float:
        if step > k_int:
            return 0.0
        free = q_arr.copy()
        free[list(drafted)] = 0.0
        prop = free / free.sum()
        diff, z = _excess(r, prop)
        if z == 0.0:
            return 1.0
        r_next = diff / z
        rej = np.maximum(prop - r, 0.0)
        total = 1.0 - z
        for x in np.flatnonzero(rej):
            total += float(rej[x]) * accept(r_next, drafted | {int(x)}, step + 1)
        return total

    return float(min(1.0, max(0.0, accept(p_arr, frozenset(), 1))))

