r"""Ground-truth programs for tree verification: node-level conditional OT and two-level trees.

See ``docs/theory/verification.md`` "The two-level tree LP (c1) and why the last constraint
family is needed" and ``docs/theory/univer.md``:

* :func:`conditional_ot_value` — the *scaled, value-weighted* OT at one node: couple the
  children-set law :math:`D` with the sub-probability target :math:`\mu = s\,p` plus a "stop"
  atom of mass :math:`1 - s`, maximising :math:`\sum_C \sum_{y \in C} \pi(C, y)\,\mathrm{val}(y)`.
  With :math:`s = 1` and unit values it is :func:`proofs_check.ot.optimal_acceptance`. It is the
  node problem of UniVer's framework (``docs/theory/univer.md``).
* :func:`global_optimum` — (c1): the best expected accepted depth of *any* lossless verifier of
  a two-level sampled tree, one LP over (tree, first token, second token).
* :func:`decomposed_optimum` — (c2): value-weighted local OT, level 2 first (each first-level
  token's value is its own optimal acceptance), then one LP at the root.

All values are returned as expected tokens per round, :math:`E[\tau]` = accepted + 1, the unit of
:func:`treespec_sim.verify.expected_length`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ._lp import solve_lp
from .ot import raw_set_law

__all__ = ["TwoLevelWorld", "conditional_ot_value", "decomposed_optimum", "global_optimum",
           "set_law", "tree_law"]

TREE_SCHEMES = ("iid", "without_replacement", "greedy")


def set_law(q: np.ndarray, k: int, scheme: str) -> dict[frozenset[int], float]:
    """Law of the set of ``k`` children drafted from ``q`` under ``scheme``."""
    q = np.asarray(q, dtype=np.float64)
    if scheme == "iid":
        return raw_set_law(q, k, True)
    if scheme == "without_replacement":
        return raw_set_law(q, k, False)
    if scheme == "greedy":
        held = sorted(range(q.size), key=lambda x: (-q[x], x))[: k - 1]
        rest = q.copy()
        rest[held] = 0.0
        return {frozenset([*held, int(j)]): float(rest[j] / rest.sum())
                for j in np.flatnonzero(rest > 0)}
    raise ValueError(f"scheme must be one of {TREE_SCHEMES}; got {scheme!r}")


@dataclass(frozen=True)
class TwoLevelWorld:
    """A two-level sampled tree and its target.

    Attributes
    ----------
    p1, q1 : ndarray (V,)
        Target and draft laws of the first token.
    p2, q2 : ndarray (V, V)
        Row ``y1``: target and draft laws of the second token after ``y1``.
    k1, k2 : int
        Children of the root, and of every first-level child.
    scheme : str
        Drafting scheme of every node (``"iid"``, ``"without_replacement"``, ``"greedy"``).
    """

    p1: np.ndarray
    q1: np.ndarray
    p2: np.ndarray
    q2: np.ndarray
    k1: int
    k2: int
    scheme: str = "without_replacement"

    @property
    def vocab(self) -> int:
        return int(self.p1.size)


def tree_law(world: TwoLevelWorld) -> list[tuple[tuple[int, ...], tuple[frozenset, ...], float]]:
    """Every unordered drafted tree ``(S1 sorted, (S2(y) for y in S1), probability)``."""
    first = set_law(world.q1, world.k1, world.scheme)
    second = {y: set_law(world.q2[y], world.k2, world.scheme) for y in range(world.vocab)}
    out = []
    for s1, p_s1 in first.items():
        s1_sorted = tuple(sorted(s1))
        for combo in itertools.product(*(second[y].items() for y in s1_sorted)):
            prob = p_s1 * float(np.prod([pc for _, pc in combo]))
            out.append((s1_sorted, tuple(c for c, _ in combo), prob))
    return out


def conditional_ot_value(mu, law: dict[frozenset[int], float], values) -> float:
    r"""Optimum of the scaled, value-weighted conditional OT at one node.

    .. math::
        \max_{\pi \ge 0} \sum_C \sum_{y \in C} \pi(C, y)\,\mathrm{val}(y)
        \quad\text{s.t.}\quad \sum_{y \in V \cup \{\mathrm{stop}\}} \pi(C, y) = D(C),\;
        \sum_C \pi(C, y) = \mu(y)\ (y \in V),

    so the stop atom receives :math:`1 - \sum_y \mu(y)`. Pairs with ``y`` not in ``C`` are
    corrections (bonus tokens), worth nothing at this node.

    Parameters
    ----------
    mu : array_like (V,)
        Scaled target, non-negative, total :math:`s \le 1`.
    law : dict frozenset -> float
        Children-set law :math:`D`.
    values : array_like (V,)
        Non-negative worth of accepting each token (1 + the value below it).
    """
    import cvxpy as cp

    mu = np.asarray(mu, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    if (mu < 0).any() or mu.sum() > 1 + 1e-12:
        raise ValueError(f"mu must be a sub-probability vector; got total {mu.sum()!r}")
    if (values < 0).any():
        raise ValueError("values must be non-negative")
    sets = list(law)
    weights = np.array([law[c] for c in sets])
    weights = weights / weights.sum()
    vocab = mu.size
    gain = np.zeros((len(sets), vocab + 1))
    for i, c in enumerate(sets):
        gain[i, list(c)] = values[list(c)]
    pi = cp.Variable((len(sets), vocab + 1), nonneg=True)
    constraints = [cp.sum(pi, axis=1) == weights, cp.sum(pi[:, :vocab], axis=0) == mu]
    if mu.sum() >= 1 - 1e-15:  # no stop mass: the last token's column is then redundant
        constraints = [cp.sum(pi, axis=1) == weights, pi[:, vocab] == 0,
                       cp.sum(pi[:, : vocab - 1], axis=0) == mu[:-1]]
    problem = cp.Problem(cp.Maximize(cp.sum(cp.multiply(gain, pi))), constraints)
    return solve_lp(problem, "conditional_ot_value")


def decomposed_optimum(world: TwoLevelWorld) -> float:
    r"""(c2): value-weighted local OT, :math:`E[\tau]`.

    Level 2: :math:`v(y) = \alpha^*(p_2(\cdot \mid y), D_2^y)`. Root: the OT of :math:`D_1` and
    :math:`p_1` with acceptance of ``y`` worth :math:`1 + v(y)`. Lossless by construction (each
    local plan is a coupling), so RRSw-tree :math:`\le` (c2) :math:`\le` (c1).
    """
    v = np.array([conditional_ot_value(world.p2[y], set_law(world.q2[y], world.k2,
                                                             world.scheme), np.ones(world.vocab))
                  for y in range(world.vocab)])
    root = conditional_ot_value(world.p1, set_law(world.q1, world.k1, world.scheme), 1.0 + v)
    return 1.0 + root


def global_optimum(world: TwoLevelWorld) -> float:
    r"""(c1): the best :math:`E[\tau]` of any lossless verifier of the two-level tree.

    Variables :math:`\pi_1(T, y_1) \ge 0` (all :math:`y_1`) and :math:`\pi_2(T, y_1, y_2) \ge 0`
    (:math:`y_1 \in S_1(T)`). Maximise accepted depth
    :math:`\sum_{y_1 \in S_1}\pi_1 + \sum_{y_1 \in S_1, y_2 \in S_2(y_1)} \pi_2` subject to
    :math:`\sum_{y_1}\pi_1(T, \cdot) = P(T)`, :math:`\sum_T \pi_1(\cdot, y_1) = p_1(y_1)`,
    :math:`\sum_{y_2}\pi_2(T, y_1, \cdot) = \pi_1(T, y_1)` and, for every :math:`(y_1, y_2)`,
    :math:`\sum_{T \ni y_1}\pi_2(T, y_1, y_2) = p_2(y_2 \mid y_1)\sum_{T \ni y_1}\pi_1(T, y_1)`:
    an accepted :math:`y_1` must be followed by :math:`y_2 \sim p_2(\cdot \mid y_1)` (without the
    last family the LP overstates the optimum; ``docs/theory/verification.md`` "The two-level tree
    LP (c1) and why the last constraint family is needed"). One redundant equality per family is
    dropped. Size: ``#T * V * (1 + k1)`` variables (V = 5, k = 2: 15,000).
    """
    import cvxpy as cp
    import scipy.sparse as sp

    trees = tree_law(world)
    vocab = world.vocab
    n_t = len(trees)
    prob = np.array([t[2] for t in trees])
    prob = prob / prob.sum()
    # pi2 index: one block of V per (tree, first-level token in S1)
    blocks = [(i, y1, s2) for i, (s1, s2s, _) in enumerate(trees)
              for y1, s2 in zip(s1, s2s, strict=True)]
    n_b = len(blocks)
    pi1 = cp.Variable(n_t * vocab, nonneg=True)
    pi2 = cp.Variable(n_b * vocab, nonneg=True)

    gain1 = np.zeros(n_t * vocab)
    for i, (s1, _, _) in enumerate(trees):
        gain1[[i * vocab + y for y in s1]] = 1.0
    gain2 = np.zeros(n_b * vocab)
    for b, (_, _, s2) in enumerate(blocks):
        gain2[[b * vocab + y for y in s2]] = 1.0

    rows_t = sp.kron(sp.eye(n_t), np.ones((1, vocab)), format="csr")  # sum over y1 per tree
    cols_y = sp.kron(np.ones((1, n_t)), sp.eye(vocab), format="csr")  # sum over trees per y1
    sum_y2 = sp.kron(sp.eye(n_b), np.ones((1, vocab)), format="csr")  # sum over y2 per block
    pick = sp.csr_matrix((np.ones(n_b), (np.arange(n_b),
                                         [i * vocab + y1 for i, y1, _ in blocks])),
                         shape=(n_b, n_t * vocab))
    # for each (y1, y2): sum over blocks with that y1 of pi2, and p2 * sum of the matching pi1
    lhs = sp.csr_matrix((np.ones(n_b * vocab),
                         ([y1 * vocab + y2 for _, y1, _ in blocks for y2 in range(vocab)],
                          np.arange(n_b * vocab))), shape=(vocab * vocab, n_b * vocab))
    rhs = sp.csr_matrix(([world.p2[y1, y2] for _, y1, _ in blocks for y2 in range(vocab)],
                         ([y1 * vocab + y2 for _, y1, _ in blocks for y2 in range(vocab)],
                          [i * vocab + y1 for i, y1, _ in blocks for _ in range(vocab)])),
                        shape=(vocab * vocab, n_t * vocab))
    keep = [y1 * vocab + y2 for y1 in range(vocab) for y2 in range(vocab - 1)]
    constraints = [
        rows_t @ pi1 == prob,
        (cols_y @ pi1)[: vocab - 1] == world.p1[: vocab - 1],
        sum_y2 @ pi2 == pick @ pi1,
        (lhs[keep] @ pi2) == (rhs[keep] @ pi1),
    ]
    problem = cp.Problem(cp.Maximize(gain1 @ pi1 + gain2 @ pi2), constraints)
    return 1.0 + solve_lp(problem, "global_optimum")
