"""Floating-point reductions whose results do not depend on the BLAS library, its thread
count or the CPU.

OpenBLAS splits a dot product of more than 10,000 entries across its threads and adds the
partial sums, so ``np.dot`` of two ``V = 32768`` rows gives last bits that change with
``OPENBLAS_NUM_THREADS``, and every call pays for waking the threads. :func:`dot` adds the
products in one stated order instead (eight lanes, numba-compiled): the same floats on every
machine.

:func:`fixed_log` and :func:`fixed_exp` (and their scalar forms) are treespec's own ``log`` and
``exp``, written as a fixed sequence of IEEE operations (no library call whose last bits a
platform may choose): the synthetic drafter's per-depth normalisers and correction proposal
give the same floats on every CPU. Measured within 2 ulps of numpy's exp and log.

:func:`stable_argsort` is numpy's stable argsort by a numba-compiled radix sort
(:func:`argsort_keys`; ``O(m)`` passes), also the DDTree builder's sort.
"""

from __future__ import annotations

import math

import numpy as np

from .jit import njit

__all__ = ["NORM_CUT", "argsort_keys", "dot", "exp_into", "fixed_exp", "fixed_exp1", "fixed_log",
           "fixed_log1", "log_into", "order_keys", "sort_pairs", "stable_argsort"]

#: The synthetic drafter's normalisers leave out the terms below ``e^-NORM_CUT`` of the
#: largest (``ClassLogMarginals._norms``): at most
#: ``V / m`` of them, each ``<= m e^-64``, together under ``3e-23`` of a sum that is ``>= 1``.
NORM_CUT = 64.0

# The constants of fixed_exp / fixed_log, as module globals (numba freezes them at compile).
# 1 / k!, k = 0..13: exp(r) on |r| <= ln(2) / 2 (truncation < 5e-18)
(_E0, _E1, _E2, _E3, _E4, _E5, _E6, _E7, _E8, _E9, _E10, _E11, _E12,
 _E13) = (1.0 / math.factorial(k) for k in range(14))
# 2 / (2k + 1), k = 1..10: log(1 + f) = 2 atanh(s) = 2 s + s z sum_k c_k z^(k-1), z = s^2
_L0, _L1, _L2, _L3, _L4, _L5, _L6, _L7, _L8, _L9 = (2.0 / (2 * k + 1) for k in range(1, 11))
_LN2_HI = 6.93147180369123816490e-01   # its low 32 bits are zero: n * _LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e+00
_MAGIC = 6755399441055744.0            # 1.5 * 2^52: (t + _MAGIC) - _MAGIC rounds t to an integer
_SQRT_HALF = 0.70710678118654752440
_POW2 = np.ldexp(1.0, np.arange(-1000, 1001))  # 2^-1000..2^1000, each exact


@njit(cache=True)
def dot(a, b):
    """``sum(a * b)`` of float64 ``a``, ``b`` ``(n,)`` in one stated order: the product of entry
    ``i`` added to lane ``i % 8`` (each lane in index order from ``0.0``), the lanes combined
    ``((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))`` -- eight sums in flight, and the same
    floats on every CPU and BLAS.
    """
    n = a.size
    l0 = l1 = l2 = l3 = l4 = l5 = l6 = l7 = 0.0
    i = 0
    while i + 8 <= n:
        l0 += a[i] * b[i]
        l1 += a[i + 1] * b[i + 1]
        l2 += a[i + 2] * b[i + 2]
        l3 += a[i + 3] * b[i + 3]
        l4 += a[i + 4] * b[i + 4]
        l5 += a[i + 5] * b[i + 5]
        l6 += a[i + 6] * b[i + 6]
        l7 += a[i + 7] * b[i + 7]
        i += 8
    rest = n - i                                # the last n % 8 products, lanes 0..
    if rest > 0:
        l0 += a[i] * b[i]
    if rest > 1:
        l1 += a[i + 1] * b[i + 1]
    if rest > 2:
        l2 += a[i + 2] * b[i + 2]
    if rest > 3:
        l3 += a[i + 3] * b[i + 3]
    if rest > 4:
        l4 += a[i + 4] * b[i + 4]
    if rest > 5:
        l5 += a[i + 5] * b[i + 5]
    if rest > 6:
        l6 += a[i + 6] * b[i + 6]
    return ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))


@njit(cache=True)
def fixed_exp1(x: float) -> float:
    """:func:`fixed_exp` of one float64 (``0`` at ``-inf``, NaN for NaN); no branch, so that a
    loop over it can be vectorised."""
    t = x * _INV_LN2
    n = (t + _MAGIC) - _MAGIC
    r = (x - n * _LN2_HI) - n * _LN2_LO
    # exp(r), degree 13, Estrin's scheme (the order of every rounding is this text's)
    r2 = r * r
    r4 = r2 * r2
    r8 = r4 * r4
    a0 = _E0 + r * _E1
    a1 = _E2 + r * _E3
    a2 = _E4 + r * _E5
    a3 = _E6 + r * _E7
    a4 = _E8 + r * _E9
    a5 = _E10 + r * _E11
    a6 = _E12 + r * _E13
    d0 = (a0 + a1 * r2) + (a2 + a3 * r2) * r4
    d1 = (a4 + a5 * r2) + a6 * r4
    p = d0 + d1 * r8
    k = 0 if n != n else int(min(max(n, -2000.0), 2000.0))
    # p 2^k as two exact powers of two: p 2^k1 is exact (|k1| <= 1000 keeps it normal), the
    # second product rounds once -- ldexp's float, with no library call in the loop
    k1 = min(max(k, -1000), 1000)
    p = (p * _POW2[k1 + 1000]) * _POW2[k - k1 + 1000]
    return 0.0 if x == -math.inf else p


@njit(cache=True)
def fixed_log1(v: float) -> float:
    """:func:`fixed_log` of one float64 (``-inf`` at 0)."""
    if v == 0.0:
        return -math.inf
    m, e = math.frexp(v)
    return _log_reduced(m, float(e))


@njit(cache=True, inline="always")
def _log_reduced(m, ef):
    """``log(m 2^ef)`` for ``frexp``'s mantissa ``m`` in ``[1/2, 1)`` and its exponent ``ef``."""
    if m < _SQRT_HALF:
        m = m + m
        ef = ef - 1.0
    f = m - 1.0
    s = f / (f + 2.0)
    z = s * s
    # sum_k 2 z^k / (2k + 3), k = 0..9, Estrin's scheme
    z2 = z * z
    z4 = z2 * z2
    z8 = z4 * z4
    a0 = _L0 + z * _L1
    a1 = _L2 + z * _L3
    a2 = _L4 + z * _L5
    a3 = _L6 + z * _L7
    a4 = _L8 + z * _L9
    q = ((a0 + a1 * z2) + (a2 + a3 * z2) * z4) + a4 * z8
    return ef * _LN2_HI + ((s + s) + s * (z * q) + ef * _LN2_LO)


# A normal float64's fraction bits, and the exponent field of frexp's mantissa (2^-1).
_FRACTION = np.int64(0x000FFFFFFFFFFFFF)
_HALF_EXPONENT = np.int64(0x3FE0000000000000)


@njit(cache=True, error_model="numpy")
def log_into(v, out):
    """:func:`fixed_log1` of every entry of float64 ``v`` ``(n,)`` into ``out`` ``(n,)`` (not
    ``v``): the same floats, in loops that vectorise.

    A positive normal ``v`` is split into ``frexp``'s ``(m, e)`` by its bits (exact, no call);
    every other entry (zero, subnormal, negative, ``inf``, NaN) goes through
    :func:`fixed_log1` itself. ``error_model="numpy"``: no zero-division branch in the loop
    (a divisor ``m + 1`` of a positive ``m`` is never zero).
    """
    bits = v.view(np.int64)
    mant = out.view(np.int64)
    for i in range(v.size):
        mant[i] = (bits[i] & _FRACTION) | _HALF_EXPONENT
    for i in range(v.size):
        e = np.int32(bits[i] >> np.int64(52)) - np.int32(1022)
        out[i] = _log_reduced(out[i], np.float64(e))
    for i in range(v.size):
        field = bits[i] >> np.int64(52)           # negative for a set sign bit
        if field <= 0 or field >= 0x7FF:
            out[i] = fixed_log1(v[i])


@njit(cache=True)
def exp_into(x, out):
    """:func:`fixed_exp1` of every entry of float64 ``x`` ``(n,)`` into ``out`` ``(n,)``: a loop
    that vectorises when ``out`` is not ``x`` (in place, it runs one entry at a time)."""
    for i in range(x.size):
        out[i] = fixed_exp1(x[i])


def fixed_exp(x: np.ndarray) -> np.ndarray:
    """``exp(x)`` for float64 ``x <= 709`` (or ``-inf``), within 2 ulps of ``np.exp``: a new array.

    ``n = round(x / ln 2)``, ``r = x - n ln 2`` in two parts (Cody-Waite), ``exp(r)`` by its
    degree-13 Taylor polynomial (Estrin's scheme), then ``ldexp(p, n)``, exact
    (:func:`fixed_exp1`, numba-compiled, no fused multiply-add).
    """
    x = np.asarray(x, dtype=np.float64)
    out = np.empty(x.shape)
    exp_into(np.ascontiguousarray(x).reshape(-1), out.reshape(-1))
    return out


def fixed_log(v: np.ndarray) -> np.ndarray:
    """``log(v)`` for finite float64 ``v >= 0`` (``-inf`` at 0), within 2 ulps of ``np.log``: a new
    array.

    ``v = m 2^e`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` (``frexp``, exact), ``s = (m - 1) / (m +
    1)``, ``log m = 2 atanh(s)`` by ten terms of its series, plus ``e ln 2`` in two parts
    (:func:`fixed_log1`).
    """
    v = np.asarray(v, dtype=np.float64)
    out = np.empty(v.shape)
    log_into(np.ascontiguousarray(v).reshape(-1), out.reshape(-1))
    return out


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
