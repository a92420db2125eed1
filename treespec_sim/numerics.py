"""Floating-point reductions whose results do not depend on the BLAS library, its thread
count or the CPU.

OpenBLAS splits a dot product of more than 10,000 entries across its threads and adds the
partial sums, so ``np.dot`` of two ``V = 32768`` rows gives last bits that change with
``OPENBLAS_NUM_THREADS`` (measured: 1 thread against 2 differ by an ulp), and every call pays
for waking the threads -- on a busy machine up to milliseconds (``docs/performance.md``, "BLAS
threads"). :func:`dot` is numpy's own pairwise sum of the products instead: one
single-threaded order, the same floats on every machine.

:func:`fixed_log`, :func:`fixed_exp` and :func:`lane_sum8` are treespec's own ``log``, ``exp``
and sum, written as a fixed sequence of IEEE operations (no library call whose last bits a
platform may choose): the synthetic drafter's per-depth normalisers and correction proposal
give the same floats on every CPU. Measured within 2 ulps of numpy's exp and log.

:func:`stable_argsort` is numpy's stable argsort by a numba-compiled radix sort
(:func:`argsort_keys`; ``O(m)`` passes), also the DDTree builder's sort.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["NORM_CUT", "argsort_keys", "dot", "fixed_exp", "fixed_log", "lane_sum8", "order_keys",
           "sort_pairs", "stable_argsort"]

#: The synthetic drafter's normalisers leave out the terms below ``e^-NORM_CUT`` of the
#: largest (``ClassLogMarginals._norms``): at most
#: ``V / m`` of them, each ``<= m e^-64``, together under ``3e-23`` of a sum that is ``>= 1``.
NORM_CUT = 64.0

# The constants of fixed_exp / fixed_log.
#: 1 / k!, k = 0..13: exp(r) on |r| <= ln(2) / 2 (truncation < 5e-18)
_EXP_C = tuple(1.0 / math.factorial(k) for k in range(14))
#: 2 / (2k + 1), k = 1..10: log(1 + f) = 2 atanh(s) = 2 s + s z sum_k c_k z^(k-1), z = s^2
_LOG_C = tuple(2.0 / (2 * k + 1) for k in range(1, 11))
_LN2_HI = 6.93147180369123816490e-01   # its low 32 bits are zero: n * _LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e+00
_MAGIC = 6755399441055744.0            # 1.5 * 2^52: (t + _MAGIC) - _MAGIC rounds t to an integer
_SQRT_HALF = 0.70710678118654752440


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


def _estrin(x: np.ndarray, c: tuple[float, ...]) -> np.ndarray:
    """``sum_k c[k] x^k`` in Estrin's scheme: pairs ``c[2i] + c[2i+1] x``, then pairs of those
    with ``x^2``, ``x^4``, ``x^8`` (one fixed order of roundings). ``len(c)`` must be 10 or
    14."""
    x2 = x * x
    x4 = x2 * x2
    x8 = x4 * x4
    a = [c[2 * i] + x * c[2 * i + 1] for i in range(len(c) // 2)]
    b0 = a[0] + a[1] * x2
    b1 = a[2] + a[3] * x2
    d0 = b0 + b1 * x4
    if len(c) == 10:
        return d0 + a[4] * x8
    b2 = a[4] + a[5] * x2
    d1 = b2 + a[6] * x4
    return d0 + d1 * x8


def fixed_exp(x: np.ndarray) -> np.ndarray:
    """``exp(x)`` for float64 ``x <= 709`` (or ``-inf``), within 2 ulps of ``np.exp``: a new array.

    ``n = round(x / ln 2)``, ``r = x - n ln 2`` in two parts (Cody-Waite), ``exp(r)`` by its
    degree-13 Taylor polynomial (Estrin's scheme), then ``ldexp(p, n)``.
    """
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore"):   # x = -inf: r is NaN, the result 0 (set below)
        t = x * _INV_LN2
        n = (t + _MAGIC) - _MAGIC
        r = (x - n * _LN2_HI) - n * _LN2_LO
        p = _estrin(r, _EXP_C)
        k = np.clip(np.nan_to_num(n, nan=0.0), -2000.0, 2000.0).astype(np.int64)
    out = np.ldexp(p, k)
    out[x == -np.inf] = 0.0
    return out


def fixed_log(v: np.ndarray) -> np.ndarray:
    """``log(v)`` for finite float64 ``v >= 0`` (``-inf`` at 0), within 2 ulps of ``np.log``: a new
    array.

    ``v = m 2^e`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` (``frexp``, exact), ``s = (m - 1) / (m +
    1)``, ``log m = 2 atanh(s)`` by ten terms of its series, plus ``e ln 2`` in two parts.
    """
    v = np.asarray(v, dtype=np.float64)
    m, e = np.frexp(v)
    low = m < _SQRT_HALF
    m = np.where(low, m + m, m)
    ef = (e - low).astype(np.float64)
    f = m - 1.0
    s = f / (f + 2.0)
    z = s * s
    q = _estrin(z, _LOG_C)
    out = ef * _LN2_HI + ((s + s) + s * (z * q) + ef * _LN2_LO)
    out[v == 0.0] = -np.inf
    return out


def lane_sum8(x: np.ndarray) -> np.ndarray:
    """Sums of the last axis of ``x`` (float64 ``(..., n)``) in eight lanes: entry ``c`` goes to
    lane ``c % 8``, each lane adds in index order, and the lanes combine as
    ``((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))``: one fixed order of roundings."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    pad = (-n) % 8
    if pad:
        x = np.concatenate([x, np.zeros((*x.shape[:-1], pad))], axis=-1)
    if x.shape[-1] == 0:
        return np.zeros(x.shape[:-1])
    lanes = np.cumsum(x.reshape(*x.shape[:-1], -1, 8), axis=-2)[..., -1, :]
    return (((lanes[..., 0] + lanes[..., 1]) + (lanes[..., 2] + lanes[..., 3]))
            + ((lanes[..., 4] + lanes[..., 5]) + (lanes[..., 6] + lanes[..., 7])))


# ----------------------------------------------------------------------------- sorting
@njit(cache=True)
def order_keys(values, out):
    """uint64 keys in the order of float64 ``values`` (m,) into ``out`` (the two zeros equal):
    positive values set the sign bit, negative ones are complemented."""
    as_float = out.view(np.float64)
    sign = np.uint64(0x8000000000000000)
    for i in range(values.size):
        as_float[i] = values[i] + 0.0           # -0.0 -> +0.0, as numpy's sorts treat them
        b = out[i]
        out[i] = ~b if b & sign else b | sign


@njit(cache=True)
def _insertion_sort(key, pay, lo, hi):
    """Stable insertion sort of ``(key, pay)[lo:hi]`` by increasing key."""
    for i in range(lo + 1, hi):
        k = key[i]
        p = pay[i]
        j = i
        while j > lo and key[j - 1] > k:
            key[j] = key[j - 1]
            pay[j] = pay[j - 1]
            j -= 1
        key[j] = k
        pay[j] = p


@njit(cache=True)
def _lsd_bytes(key, pay, lo, hi, tk, tp, first, last):
    """Stable LSD radix sort of ``(key, pay)[lo:hi]`` by the key's bytes ``first..last - 1``
    (a byte every key shares is skipped); ``tk``, ``tp``: scratch of at least ``hi - lo``."""
    n = hi - lo
    cnt = np.zeros(256, np.int64)
    src_k, src_p, dst_k, dst_p = key[lo:hi], pay[lo:hi], tk[:n], tp[:n]
    moved = False
    for d in range(first, last):
        shift = np.uint64(8 * d)
        cnt[:] = 0
        for i in range(n):
            cnt[(src_k[i] >> shift) & np.uint64(255)] += 1
        if cnt[(src_k[0] >> shift) & np.uint64(255)] == n:
            continue
        total = 0
        for b in range(256):
            c = cnt[b]
            cnt[b] = total
            total += c
        for i in range(n):
            b = (src_k[i] >> shift) & np.uint64(255)
            at = cnt[b]
            cnt[b] = at + 1
            dst_k[at] = src_k[i]
            dst_p[at] = src_p[i]
        src_k, dst_k = dst_k, src_k
        src_p, dst_p = dst_p, src_p
        moved = not moved
    if moved:
        key[lo:hi] = src_k
        pay[lo:hi] = src_p


@njit(cache=True)
def sort_pairs(key, pay, tk, tp):
    """Sort ``(key[i], pay[i])`` in place by increasing uint64 key, stably (equal keys keep their
    order): by the high 32 bits first (for a double's bits: sign, exponent and 20 bits of
    mantissa, which few keys share), then each run sharing them by the low 32 bits. ``tk``,
    ``tp``: scratch of at least as many pairs."""
    n = key.size
    if n < 64:
        _insertion_sort(key, pay, 0, n)
        return
    _lsd_bytes(key, pay, 0, n, tk, tp, 4, 8)
    i = 0
    high = np.uint64(32)
    while i < n:
        j = i + 1
        while j < n and key[j] >> high == key[i] >> high:
            j += 1
        if j - i > 16:
            _lsd_bytes(key, pay, i, j, tk, tp, 0, 4)
        elif j - i > 1:
            _insertion_sort(key, pay, i, j)
        i = j


@njit(cache=True)
def argsort_keys(keys):
    """``np.argsort(keys, kind="stable")`` of float64 ``keys`` without NaN: int64 (m,)."""
    key = np.empty(keys.size, np.uint64)
    order_keys(keys, key)
    perm = np.arange(keys.size)
    sort_pairs(key, perm, np.empty_like(key), np.empty_like(perm))
    return perm


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` of float64 ``keys`` (m,) without NaN, int64 (m,).

    A stable sort's permutation is unique, so the radix sort (:func:`argsort_keys`) gives numpy's.

    Raises
    ------
    ValueError
        A NaN key (no order), naming its index.
    """
    keys = np.ascontiguousarray(keys, dtype=np.float64).ravel()
    nan = np.flatnonzero(np.isnan(keys))
    if nan.size:
        raise ValueError(f"keys[{int(nan[0])}] is NaN (no order)")
    return argsort_keys(keys)
