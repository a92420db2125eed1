"""The word-class drafter's loops over the ``V / m`` classes, compiled by numba: the chain's
sparse product and the sharpened rows' normalisers (:mod:`treespec_sim.synth.drafter`).

Each loop states its order of additions, so its floats are the same on every CPU (numba keeps a
loop's order and contracts no multiply-add without ``fastmath``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..numerics import NORM_CUT, fixed_exp1, fixed_log1

__all__ = ["class_norms", "norm_row", "rows_times"]


@njit(cache=True)
def rows_times(indptr, indices, data, x, out):
    """``out = A x`` for ``A`` in CSR form (int ``indptr``, ``indices``, float64 ``data``): each
    entry sums its terms in the row's stored order from ``0.0`` -- for column-sorted rows,
    scipy's ``csc_matvec`` order for ``A``'s CSC form, term by term."""
    for i in range(out.size):
        acc = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            acc += data[k] * x[indices[k]]
        out[i] = acc


@njit(cache=True)
def norm_row(h, w_max, beta, sums):
    """``(m, Z)`` of one sharpened row (``ClassLogMarginals._norms``) from its class chain row
    ``h`` (float64 ``(n,)``), the class maxima of ``w``, ``beta != 1`` and the class sums
    ``S``: with ``v = h * w_max``, ``m = beta log max v`` and
    ``Z = sum_c exp(beta log v[c] - m) S[c]`` over the classes ``v[c] >= max v e^(-64 / beta)``.

    ``log``/``exp`` are :func:`~treespec_sim.numerics.fixed_log1`/``fixed_exp1``; the sum runs
    in eight lanes (class ``c`` to lane ``c % 8``, each in class order, combined
    ``((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))``): one order, every CPU's floats.
    """
    n = h.size
    v_max = -math.inf
    nan = False
    for c in range(n):
        v = h[c] * w_max[c]
        if v != v:
            nan = True
        elif v > v_max:
            v_max = v
    if nan:                                       # as numpy's max: m NaN, no class kept
        return math.nan, 0.0
    m = beta * fixed_log1(v_max)
    cut = v_max * fixed_exp1(-(NORM_CUT / beta))
    lanes = np.zeros(8)
    for c in range(n):
        v = h[c] * w_max[c]
        if v >= cut:
            lanes[c % 8] += fixed_exp1(fixed_log1(v) * beta - m) * sums[c]
    z = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5])
                                                           + (lanes[6] + lanes[7]))
    return m, z


@njit(cache=True)
def class_norms(h, w_max, beta, sums, m_out, z_out):
    """:func:`norm_row` of every row ``d`` of ``h`` (float64 ``(L, n)``) with ``beta[d] != 1``
    into ``m_out[d]``, ``z_out[d]`` (the others are left as they are)."""
    for d in range(h.shape[0]):
        if beta[d] != 1.0:
            m_out[d], z_out[d] = norm_row(h[d], w_max, beta[d], sums[d])
