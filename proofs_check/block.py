r"""Block verification of a draft chain (Sun et al., arXiv 2403.10444), an independent reference.

Written from the formulas of ``docs/theory/verification.md`` "Block verification on a chain" (as
in vLLM PR #46781), sharing no code with :mod:`treespec_sim.verify.traversal`, so that "Traversal
reduces to block verification on a chain" is a real cross-check. For a chain
:math:`X_1..X_\gamma` with target rows :math:`P_i = p(\cdot \mid X_{<i})` and proposals
:math:`q_i`:

.. math::
    w_0 = 1,\quad w_i = \min(1, w_{i-1} P_i(X_i)/q_i(X_i)),\quad
    Z_i = \textstyle\sum_x (w_{i-1}P_i(x) - q_i(x))_+,\\
    h_i = Z_{i+1}/(Z_{i+1} + 1 - w_i)\ (i < \gamma),\quad h_\gamma = w_\gamma,

:math:`\tau = \max\{i : \eta_i \le h_i\}` (0 if none) with independent uniforms :math:`\eta_i`,
then :math:`X_{1..\tau}` and a bonus from :math:`P_{\gamma+1}` if :math:`\tau = \gamma`, else from
:math:`\mathrm{norm}((w_\tau P_{\tau+1} - q_{\tau+1})_+)`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["block_round_law"]

_TINY = 1e-15


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
    big_p = np.asarray(target_rows, dtype=np.float64)
    q = np.asarray(proposal_rows, dtype=np.float64)
    gamma = len(x)
    w = [1.0]
    for i in range(gamma):
        w.append(min(1.0, w[-1] * big_p[i, x[i]] / q[i, x[i]]))
    z = [None] + [float(np.clip(w[i] * big_p[i] - q[i], 0, None).sum()) for i in range(gamma)]
    h = [None]
    for i in range(1, gamma):
        denom = z[i + 1] + 1.0 - w[i]
        h.append(1.0 if denom <= _TINY else z[i + 1] / denom)
    if gamma:
        h.append(w[gamma])
    law: dict[tuple[int, ...], float] = {}
    for tau in range(gamma + 1):
        prob = h[tau] if tau > 0 else 1.0
        for j in range(tau + 1, gamma + 1):
            prob *= 1.0 - h[j]
        if prob <= 0.0:
            continue
        if tau == gamma:
            bonus = big_p[gamma]
        else:
            bonus = np.clip(w[tau] * big_p[tau] - q[tau], 0, None)
            bonus = bonus / bonus.sum()
        for y in np.flatnonzero(bonus > 0):
            key = (*x[:tau], int(y))
            law[key] = law.get(key, 0.0) + prob * float(bonus[y])
    return law
