"""Argument checks written once: drafter log-probabilities, budgets, root tokens.

Validation must not dominate the cost of a builder, so the log-probability check reads the
array once (one row-wise maximum, which also propagates NaN) instead of scanning it several times.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["LOGPROB_POSITIVE_TOL", "check_budget", "check_log_q", "check_root_token"]

#: Largest log-probability accepted as "not positive" (absorbs log-softmax rounding).
LOGPROB_POSITIVE_TOL = 1e-12


def check_log_q(log_q, name: str = "log_q") -> tuple[np.ndarray, np.ndarray]:
    """Validate drafter log-probabilities; return ``(array, row_max)``.

    Parameters
    ----------
    log_q : array_like of float, shape (L, V)
        Log-probabilities at depths ``1..L``. ``-inf`` (probability 0) is allowed.

    Returns
    -------
    lp : ndarray, shape (L, V)
        float32 or float64 (other dtypes are converted to float64; no copy otherwise).
    row_max : ndarray of float64, shape (L,)

    Raises
    ------
    ValueError
        Wrong shape, NaN, positive (or ``+inf``) entries, or a depth with no finite entry;
        the message names ``name`` and the offending ``[depth_index, token]``.
    """
    lp = np.asarray(log_q)
    if lp.dtype not in (np.float32, np.float64):
        if not (np.issubdtype(lp.dtype, np.floating) or np.issubdtype(lp.dtype, np.integer)):
            raise ValueError(f"{name} must be a float array; got dtype {lp.dtype}")
        lp = lp.astype(np.float64)
    if lp.ndim != 2 or lp.shape[0] < 1 or lp.shape[1] < 1:
        raise ValueError(f"{name} must have shape (L, V) with L, V >= 1; got {lp.shape}")
    row_max = lp.max(axis=1).astype(np.float64)
    bad = np.flatnonzero(~(row_max <= LOGPROB_POSITIVE_TOL))  # catches NaN and > tol
    if bad.size:
        d = int(bad[0])
        row = lp[d]
        if np.isnan(row_max[d]):
            t = int(np.flatnonzero(np.isnan(row))[0])
            raise ValueError(f"{name}[{d}, {t}] is NaN")
        t = int(np.argmax(row))
        raise ValueError(f"{name}[{d}, {t}] = {float(row[t])!r} is a positive log-probability")
    if (row_max > 0).any():
        # Tiny positive rounding (within the tolerance) would let a child outscore its
        # parent; clamp it so path scores never increase with depth.
        lp = np.minimum(lp, 0.0)
        row_max = np.minimum(row_max, 0.0)
    dead = np.flatnonzero(np.isneginf(row_max))
    if dead.size:
        raise ValueError(f"{name}[{int(dead[0])}] has no finite entry (zero total probability)")
    return lp, row_max


def check_budget(budget, name: str = "budget") -> int:
    """A non-negative integer budget (number of non-root nodes)."""
    if isinstance(budget, bool) or not isinstance(budget, numbers.Integral):
        raise ValueError(f"{name} must be a non-negative integer; got {budget!r}")
    if budget < 0:
        raise ValueError(f"{name} must be >= 0; got {budget}")
    return int(budget)


def check_root_token(root_token, name: str = "root_token") -> int:
    if isinstance(root_token, bool) or not isinstance(root_token, numbers.Integral):
        raise ValueError(f"{name} must be an integer >= -1; got {root_token!r}")
    if root_token < -1:
        raise ValueError(f"{name} must be >= -1 (-1 = unknown); got {root_token}")
    return int(root_token)
