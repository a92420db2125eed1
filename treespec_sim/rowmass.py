r"""The total mass ``sum(exp(x))`` of each row of a log-probability array, fast and with a stated
error bound: the input check of :func:`treespec_sim.validation.check_log_q` and of the DDTree
builder's one pass over a raw array (:mod:`treespec_sim.policies._dense`).

The check only needs a verdict (is ``|sum - 1|`` within the tolerance?), so the mass is summed
in float32 ``exp``, eight times numpy's float64 ``exp`` throughput: every entry is rounded to
float32 (an entry ``x >= -87`` moves by at most ``|x| 2^-24``, its ``exp`` by ``< 5.2e-6``
relative), clamped below at ``-87`` (each clamped entry adds ``< 2e-38``), and ``exp(v) = 2^k
p(r)`` with ``k`` the nearest integer to ``v / ln 2``, ``r = v - k ln2`` (``ln 2`` rounded to
float32: ``< 2.5e-7`` relative at ``k = -126``) and ``p`` a degree-5 polynomial, minimax in
relative error on ``[-ln 2 / 2, ln 2 / 2]`` (``7.5e-8`` before its coefficients are rounded to
float32). Evaluated in float32 and multiplied by ``2^k`` in float32, the terms are within
``4.6e-7`` of the exact ``exp`` of every float32 in ``[-87, 0]`` (all of them checked;
``tests/sim/test_dense_builder.py`` checks a sample; uncompiled, without the fused multiply-add
in ``r``, a sample's worst is ``4.3e-6``, still inside the margin). The terms are added in
float32 partial sums of 128 (in any order, within ``127 * 2^-24 < 7.6e-6`` relative of their
exact sum: the terms are positive), and those in float64. So a row's computed mass is within
``1.33e-5`` relative of the exact one, :data:`MASS_ERROR` with a 3x margin, and the caller
decides rows within that of the tolerance by numpy's exact float64 sum.

The terms are formed in blocks of :data:`BLOCK` by a loop that numba vectorises (no branch, no
call), compiled with ``fastmath={"contract"}`` (a fused multiply-add only makes a step more
accurate), and summed by a separate reduction compiled with ``fastmath={"reassoc"}``: the
order of the sum is free because its result is a verdict inside the bound above, not a number
anyone reads; the terms' loop keeps its order (``reassoc`` would fold away the rounding of
``k``). The polynomial is evaluated in Estrin's scheme: the loop's speed is set by the length
of its dependency chain, which Horner's rule makes twice as long.
"""

from __future__ import annotations

import numpy as np

from .jit import njit

__all__ = ["BLOCK", "MASS_ERROR", "block_mass", "row_masses"]

#: Relative error bound on a computed row mass, with a 3x margin (module docstring).
MASS_ERROR = 4e-5
#: Entries per block of the mass loop (the buffers' length; a block stays in L1).
BLOCK = 2048
# Terms per float32 partial sum: any order of 128 adds errs by at most 127 * 2^-24 relative.
_CHUNK = 128

_LOG2E = np.float32(1.44269504088896341)
_MAGIC = np.float32(12582912.0)         # 1.5 * 2^23: (t + _MAGIC) - _MAGIC rounds t to an integer
_MAGIC_BITS = np.int32(0x4B400000)      # _MAGIC's bits: those of t + _MAGIC minus these are k
_LN2 = np.float32(0.6931471805599453)
_FLOOR = np.float32(-87.0)              # 2^k stays normal
# p(r) = sum(_P[j] r^j): degree-5 minimax relative-error fit of exp on [-ln2/2, ln2/2] (Lawson)
_P0, _P1, _P2 = np.float32(1.00000007), np.float32(0.99999969), np.float32(0.499988949)
_P3, _P4, _P5 = np.float32(0.166675747), np.float32(0.0419153820), np.float32(0.00829765509)


@njit(cache=True, fastmath={"contract"})
def _exp_terms(x, terms):
    """``terms[i] = exp(x[i])`` in float32 for every ``i`` (NaN and ``+inf`` give NaN)."""
    for i in range(x.size):
        v = np.float32(x[i])
        if v < _FLOOR:
            v = _FLOOR
        m = np.float32(v * _LOG2E + _MAGIC)
        k = m - _MAGIC
        r = v - k * _LN2
        r2 = r * r
        lo, mid, hi = r * _P1 + _P0, r * _P3 + _P2, r * _P5 + _P4   # Estrin's scheme
        # 2^k from m's low bits (k + 127 in the exponent field): a product keeps NaN a NaN
        e = np.int32(np.int32(np.float32(m).view(np.int32)) - _MAGIC_BITS + np.int32(127))
        terms[i] = (r2 * (r2 * hi + mid) + lo) * np.int32(e << np.int32(23)).view(np.float32)


@njit(cache=True, fastmath={"reassoc"})
def _chunked_sum(terms, n):
    """``sum(terms[:n])``: float32 sums of :data:`_CHUNK` terms in any order, added in float64."""
    s = 0.0
    whole = n - n % _CHUNK
    for lo in range(0, whole, _CHUNK):
        c = np.float32(0.0)
        for i in range(_CHUNK):               # a fixed count: one vector loop, no remainder
            c += terms[lo + i]
        s += np.float64(c)
    c = np.float32(0.0)
    for i in range(whole, n):
        c += terms[i]
    return s + np.float64(c)


@njit(cache=True)
def block_mass(x, terms):
    """``sum(exp(x))`` of a block of at most :data:`BLOCK` entries (a contiguous slice), within
    :data:`MASS_ERROR` (NaN if an entry is NaN or ``+inf``); ``terms``: float32 scratch of
    :data:`BLOCK` entries."""
    _exp_terms(x, terms)
    return _chunked_sum(terms, x.size)


@njit(cache=True)
def row_masses(lp):
    """``sum(exp(lp[d]))`` for every row of a C-contiguous float32/float64 ``(L, V)`` array,
    float64 ``(L,)``, each within :data:`MASS_ERROR` relative."""
    L, V = lp.shape
    out = np.empty(L)
    terms = np.empty(BLOCK, np.float32)
    for d in range(L):
        row = lp[d]
        s = 0.0
        for lo in range(0, V, BLOCK):
            s += block_mass(row[lo:lo + BLOCK], terms)
        out[d] = s
    return out
