r"""Block verification of a drafted chain (Sun et al., ICLR 2025, arXiv 2403.10444).

What vLLM ships for chains at ``T > 0`` (vLLM PR #46781). For a chain :math:`X_1..X_\gamma`
drawn autoregressively, :math:`X_i \sim q_i = q(\cdot \mid X_{<i})`, with target rows
:math:`P_i = p(\cdot \mid X_{<i})` and independent uniforms :math:`\eta_i`:

.. math::
    w_0 = 1,\quad w_i = \min(1, w_{i-1} P_i(X_i)/q_i(X_i)),\quad
    Z_i = \textstyle\sum_x (w_{i-1}P_i(x) - q_i(x))_+,\\
    h_i = Z_{i+1}/(Z_{i+1} + 1 - w_i)\ (i < \gamma),\quad h_\gamma = w_\gamma,

:math:`\tau = \max\{i : \eta_i \le h_i\}` (0 if none) -- the *largest* passing index, not the
first failure -- then :math:`X_{1..\tau}` and a bonus from :math:`P_{\gamma+1}` if
:math:`\tau = \gamma`, else from :math:`\mathrm{norm}((w_\tau P_{\tau+1} - q_{\tau+1})_+)`.
Lossless and optimal among single-chain verifiers, hence never below token-wise verification
(``"rrs"`` on a chain). Written from the formulas alone, sharing no code with
:mod:`.traversal`, whose recursion reduces to it on a chain: ``proofs_check`` row
``traversal=block_on_chains`` compares the two. ``docs/theory/verification.md``, "Block
verification on a chain".

In the rule table as ``"block"``: exact for chains only (every node has at most one child);
a branching tree is refused.
"""

from __future__ import annotations

import numpy as np

from .._sampling import sample_categorical
from ..rows import TargetOracle
from ..tree import DraftTree
from .outcome import Outcome

__all__ = ["block_chain_law", "block_expected_length", "block_round_law", "block_sample",
           "block_weights", "chain_arrays", "check_chain"]

#: A denominator or bonus mass at most this is rounding of zero.
_TINY = 1e-15
#: A probability of stopping at ``tau`` at most this whose bonus law has no mass is rounding.
_ROUNDING = 1e-9


def check_chain(tree: DraftTree) -> None:
    """Raise ``ValueError`` unless every node of ``tree`` has at most one child."""
    if tree.size and not np.array_equal(tree.parent[1:], np.arange(tree.size)):
        v = int(np.flatnonzero(np.bincount(tree.parent[1:], minlength=tree.n_nodes) > 1)[0])
        raise ValueError(f"rule 'block' verifies chains (every node at most one child); node "
                         f"{v} has {tree.children(v).size} children")


def chain_arrays(tree: DraftTree, oracle: TargetOracle, proposal
                 ) -> tuple[list[int], np.ndarray, np.ndarray]:
    """``(tokens, target rows (gamma + 1, V), proposal rows (gamma, V))`` of a chain."""
    check_chain(tree)
    gamma = tree.size
    tokens = [int(t) for t in tree.token[1:]]
    big_p = np.stack([np.asarray(oracle.row(v), dtype=np.float64) for v in range(gamma + 1)])
    q = (np.stack([np.asarray(proposal[v], dtype=np.float64) for v in range(gamma)])
         if gamma else np.zeros((0, big_p.shape[1])))
    return tokens, big_p, q


def block_weights(tokens, target_rows, proposal_rows
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""The prefix weights :math:`w_{0..\gamma}`, masses :math:`Z_{1..\gamma}` (index 0 unused)
    and pass probabilities :math:`h_{1..\gamma}` (index 0 unused), float64 (gamma + 1,) each."""
    x = [int(t) for t in tokens]
    big_p = np.asarray(target_rows, dtype=np.float64)
    q = np.asarray(proposal_rows, dtype=np.float64)
    gamma = len(x)
    w = np.ones(gamma + 1)
    for i in range(gamma):
        w[i + 1] = min(1.0, w[i] * big_p[i, x[i]] / q[i, x[i]])
    z = np.zeros(gamma + 1)
    for i in range(gamma):
        z[i + 1] = float(np.maximum(w[i] * big_p[i] - q[i], 0.0).sum())
    h = np.zeros(gamma + 1)
    for i in range(1, gamma):
        denom = z[i + 1] + 1.0 - w[i]
        h[i] = 1.0 if denom <= _TINY else z[i + 1] / denom
    if gamma:
        h[gamma] = w[gamma]
    return w, z, h


def _stops(tokens, target_rows, proposal_rows):
    """``(tau, probability, bonus law or None)`` for every ``tau`` in ``0..gamma``."""
    big_p = np.asarray(target_rows, dtype=np.float64)
    q = np.asarray(proposal_rows, dtype=np.float64)
    gamma = len(tokens)
    w, _, h = block_weights(tokens, big_p, q)
    after = np.ones(gamma + 2)  # after[t] = prod_{j >= t} (1 - h_j), j in 1..gamma
    for j in range(gamma, 0, -1):
        after[j] = after[j + 1] * (1.0 - h[j])
    after[0] = after[1]
    out = []
    for tau in range(gamma + 1):
        prob = (h[tau] if tau > 0 else 1.0) * after[tau + 1]
        if prob <= 0.0:
            continue
        weights = big_p[gamma] if tau == gamma else np.maximum(w[tau] * big_p[tau] - q[tau], 0.0)
        mass = float(weights.sum())
        if mass <= _TINY:
            if prob > _ROUNDING:
                raise ValueError(f"block verification stops at tau = {tau} with probability "
                                 f"{prob!r} but its bonus law has no mass")
            continue
        out.append((tau, prob, weights / mass))
    return out


def block_round_law(tokens, target_rows, proposal_rows) -> dict[tuple[int, ...], float]:
    """Exact law of block verification's emitted tokens for a fixed chain.

    Parameters
    ----------
    tokens : sequence of int, length gamma
        The drafted chain :math:`X_1..X_\\gamma`.
    target_rows : ndarray (gamma + 1, V)
        Row ``i`` = :math:`P_{i+1}`, the target after :math:`X_{\\le i}`.
    proposal_rows : ndarray (gamma, V)
        Row ``i`` = :math:`q_{i+1}`, the law :math:`X_{i+1}` was drawn from.
    """
    x = [int(t) for t in tokens]
    law: dict[tuple[int, ...], float] = {}
    for tau, prob, bonus in _stops(x, target_rows, proposal_rows):
        for y in np.flatnonzero(bonus > 0).tolist():
            key = (*x[:tau], y)
            law[key] = law.get(key, 0.0) + prob * float(bonus[y])
    return law


def block_sample(tree: DraftTree, oracle: TargetOracle, rng: np.random.Generator,
                 proposal) -> Outcome:
    """One round: ``gamma`` uniforms, the largest passing index, then the bonus draw."""
    x, big_p, q = chain_arrays(tree, oracle, proposal)
    gamma = len(x)
    w, _, h = block_weights(x, big_p, q)
    passed = np.flatnonzero(rng.random(gamma) <= h[1:])
    tau = int(passed[-1]) + 1 if passed.size else 0
    weights = big_p[gamma] if tau == gamma else np.maximum(w[tau] * big_p[tau] - q[tau], 0.0)
    return Outcome.from_path(tree, tuple(range(1, tau + 1)), sample_categorical(weights, rng))


def block_expected_length(tree: DraftTree, oracle: TargetOracle, proposal) -> float:
    r"""Exact :math:`E[\tau + 1]` (bonus included)."""
    x, big_p, q = chain_arrays(tree, oracle, proposal)
    return float(sum(prob * (tau + 1) for tau, prob, _ in _stops(x, big_p, q)))


def block_chain_law(tree: DraftTree, oracle: TargetOracle, proposal
                    ) -> dict[tuple[int, ...], float]:
    """:func:`block_round_law` of a chain given as a tree (the rule table's round law)."""
    x, big_p, q = chain_arrays(tree, oracle, proposal)
    return block_round_law(x, big_p, q)
