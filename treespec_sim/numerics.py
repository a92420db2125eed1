"""Floating-point reductions whose results do not depend on the BLAS library, its thread
count or the CPU.

OpenBLAS splits a dot product of more than 10,000 entries across its threads and adds the
partial sums, so ``np.dot`` of two ``V = 32768`` rows gives last bits that change with
``OPENBLAS_NUM_THREADS`` (measured: 1 thread against 2 differ by an ulp), and every call pays
for waking the threads -- on a busy machine up to milliseconds (``docs/performance.md``, "BLAS
threads"). :func:`dot` is numpy's own pairwise sum of the products instead: one
single-threaded order, the same floats on every machine.
"""

from __future__ import annotations

import numpy as np

__all__ = ["dot"]


def dot(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> float:
    """``sum(a * b)`` as a float: the products, then numpy's pairwise sum.

    Parameters
    ----------
    a, b : ndarray of float64, shape (n,)
    out : ndarray of float64, shape (n,), optional
        Scratch for the products (overwritten).

    Returns
    -------
    float
    """
    return float(np.add.reduce(np.multiply(a, b, out=out)))
