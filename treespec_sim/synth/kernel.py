"""Sparse-boost Markov kernels: exact next-token laws at large vocabularies without a V x V matrix.

A :class:`SparseBoostKernel` is the transition matrix ``Q`` (shape ``(V, V)``) of a first-order
Markov chain whose logits are a shared *base* vector plus a few non-negative *boosts*:

.. math::

    \\ell(b \\mid a) = \\mathrm{base}[b] + \\sum_{j<s} \\mathrm{boost}[a, j]\\,
        [\\, b = \\mathrm{succ}[a, j] \\,],
    \\qquad
    Q_T[a, b] = \\frac{\\exp(\\ell(b \\mid a) / T)}{Z_a},
    \\qquad
    Z_a = \\sum_b \\exp(\\ell(b \\mid a) / T),

with ``succ`` an ``(V, s)`` table of distinct successor tokens per row. ``T = 0`` is the argmax
(greedy) kernel: ``Q_0[a] = e_{argmax_b l(b|a)}`` with ties broken to the smallest token index.

Because each row differs from the shared base row in only ``s`` entries, every row is a
two-component mixture

.. math::

    Q_T[a] = \\pi_a \\, w + \\sum_j c_{aj} \\, e_{\\mathrm{succ}[a, j]},
    \\qquad w = \\mathrm{softmax}(\\mathrm{base} / T),

so all normalisers cost ``O(V + V s)`` together, a single entry costs ``O(s)``, a row costs
``O(V)``, and ``mu @ Q`` costs ``O(V s)`` (dense rank-one part plus a CSR correction).
Everything is computed with per-row shifts, so large ``boost / T`` never overflows.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..numerics import dot
from ..validation import check_temperature, is_int

__all__ = ["SparseBoostKernel", "as_token_array"]


def as_token_array(a: object, vocab_size: int, name: str) -> np.ndarray:
    """Integer token ids as an int64 array (any shape), range-checked against ``vocab_size``."""
    arr = np.asarray(a)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must contain integer token ids; got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= vocab_size):
        bad = arr.ravel()[np.flatnonzero((arr.ravel() < 0) | (arr.ravel() >= vocab_size))[0]]
        raise ValueError(f"{name} contains token {bad}, outside the vocabulary [0, {vocab_size})")
    return arr


_NO_SUCC = np.empty(0, dtype=np.int64)   # row()'s successors of a kernel without any
_NO_CORR = np.empty(0)

class SparseBoostKernel:
    """Transition kernel ``Q_T`` of a sparse-boost Markov chain (see module docstring).

    Parameters
    ----------
    base : ndarray of float64, shape (V,)
        Shared logits of every row (finite).
    succ : ndarray of int64, shape (V, s)
        ``succ[a, j]`` is the ``j``-th boosted successor of token ``a``; entries of a row are
        distinct tokens in ``[0, V)``. ``s`` may be 0.
    boost : ndarray of float64, shape (V, s)
        Non-negative, finite boosts added to the logit of ``succ[a, j]`` in row ``a``.
    temperature : float, default 1.0
        ``T >= 0``; logits are divided by ``T`` (``p_T ∝ p^(1/T)``); ``T == 0`` is argmax.
    validate : bool, default True
        Check the arrays (``O(V s log s)``); internal callers that built valid arrays may skip.
    row_class : ndarray of int64, shape (V,), optional
        A promise that rows ``a`` with equal ``row_class[a]`` (classes ``0..C-1``) have
        identical ``succ`` and ``boost`` rows (a word-class world): the per-row quantities
        (normalisers, corrections, argmax) are then computed once per class and gathered,
        with the same float operations per row, so the values are the same bit for bit.

    Notes
    -----
    Instances are immutable by convention: the arrays are made read-only and all derived
    quantities (normalisers, the CSR correction, the base CDF) are computed lazily once.
    """

    def __init__(self, base: np.ndarray, succ: np.ndarray, boost: np.ndarray,
                 temperature: float = 1.0, *, validate: bool = True,
                 row_class: np.ndarray | None = None) -> None:
        t = check_temperature(temperature)
        base = np.asarray(base, dtype=np.float64)
        succ = np.asarray(succ)
        boost = np.asarray(boost, dtype=np.float64)
        if validate:
            _validate_arrays(base, succ, boost)
        # Read-only views: the caller's arrays keep their flags, the kernel's cannot be mutated.
        self.base = _readonly_view(base)
        self.succ = _readonly_view(succ.astype(np.int64, copy=False))
        self.boost = _readonly_view(boost)
        self.temperature = t
        self._row_class = row_class
        self._reps: np.ndarray | None = None
        if row_class is not None:
            n_cls = int(row_class.max()) + 1 if row_class.size else 0
            reps = np.empty(n_cls, dtype=np.int64)
            reps[row_class[::-1]] = np.arange(row_class.shape[0] - 1, -1, -1)
            self._reps = reps                    # the smallest row of each class
        self._argmax: np.ndarray | None = None
        self._corr_matrix: sp.csr_matrix | None = None
        self._corr_matrix_t: sp.csc_matrix | None = None
        self._base_cdf: np.ndarray | None = None
        if t > 0:
            self._prepare(t)

    # ------------------------------------------------------------------ construction helpers
    def _prepare(self, t: float) -> None:
        """Normalisers and the mixture decomposition in ``O(V + V s)``."""
        succ, boost = self.succ, self.boost
        if self._reps is not None:               # one row per class, gathered at the end
            succ, boost = succ[self._reps], boost[self._reps]
        with np.errstate(over="ignore"):
            ib = self.base / t
            sb = (self.base[succ] + boost) / t                     # boosted logits, (V, s)
            rel = boost / t
        if not (np.all(np.isfinite(ib)) and np.all(np.isfinite(sb))):
            raise ValueError(f"temperature = {t!r} is too small: logits / temperature overflow "
                             f"float64; use temperature = 0 for greedy decoding")
        big_m = float(ib.max())
        w_unnorm = np.exp(ib - big_m)                              # <= 1, max entry 1
        s_base = float(w_unnorm.sum())                             # >= 1
        # Per-row shift m_a = max logit of row a, so every exponent below is <= 0.
        m = np.maximum(big_m, sb.max(axis=1)) if sb.shape[1] else np.full(ib.shape, big_m)
        # exp(sb) - exp(ib[succ]) written as exp(sb) * (1 - exp(-boost/T)): a difference of two
        # positives that never cancels catastrophically and never overflows.
        frac = -np.expm1(-rel)                                     # in [0, 1)
        corr_shifted = np.exp(sb - m[:, None]) * frac
        log_z = m + np.log(np.exp(big_m - m) * s_base + corr_shifted.sum(axis=1))
        self._log_z = log_z
        self._base_law = w_unnorm / s_base                         # softmax(base / T), (V,)
        self._base_mass = np.exp(big_m + math.log(s_base) - log_z)  # pi_a, (V,)
        # c_aj, (V, s); in a word-class kernel one row per class (``_corr_rows``), gathered
        # per token on use (the full (V, s) table only if :attr:`correction` is read).
        self._corr_rows = np.exp(sb - log_z[:, None]) * frac
        self._corr_full: np.ndarray | None = None
        if self._reps is not None:
            rc = self._row_class
            self._log_z, self._base_mass = log_z[rc], self._base_mass[rc]
        else:
            self._corr_full = self._corr_rows
        for arr in (self._log_z, self._base_law, self._base_mass, self._corr_rows):
            arr.flags.writeable = False

    def _c(self, idx):
        """``c[idx]`` (rows of the correction table for token(s) ``idx``)."""
        if self._reps is None:
            return self._corr_rows[idx]
        return self._corr_rows[self._row_class[idx]]

    @property
    def _corr(self) -> np.ndarray:
        """The full ``(V, s)`` correction table (gathered once in a word-class kernel)."""
        if self._corr_full is None:
            full = self._corr_rows[self._row_class]
            full.flags.writeable = False
            self._corr_full = full
        return self._corr_full

    def with_temperature(self, temperature: float) -> SparseBoostKernel:
        """The same chain at another temperature (arrays shared, normalisers recomputed)."""
        out = SparseBoostKernel(self.base, self.succ, self.boost, temperature, validate=False,
                                row_class=self._row_class)
        out._argmax = self._argmax          # argmax does not depend on T
        return out

    # ------------------------------------------------------------------ basic facts
    @property
    def vocab_size(self) -> int:
        """``V``."""
        return int(self.base.shape[0])

    @property
    def n_successors(self) -> int:
        """``s``, the number of boosted successors per row."""
        return int(self.succ.shape[1])

    @property
    def shape(self) -> tuple[int, int]:
        """``(V, V)``, the shape of ``Q``."""
        return (self.vocab_size, self.vocab_size)

    @property
    def greedy(self) -> bool:
        """True for the ``T == 0`` (argmax) kernel."""
        return self.temperature == 0.0

    @property
    def logZ(self) -> np.ndarray:
        """Log-normalisers ``log Z_a`` of the tempered logits, float64 (V,).

        For ``T == 0`` the kernel is one-hot and this is all zeros (``log 1``).
        """
        if self.greedy:
            return np.zeros(self.vocab_size)
        return self._log_z

    @property
    def base_law(self) -> np.ndarray:
        """The shared component ``w = softmax(base / T)``, float64 (V,) (one-hot at T = 0)."""
        if self.greedy:
            out = np.zeros(self.vocab_size)
            out[_first_argmax(self.base)] = 1.0
            return out
        return self._base_law

    @property
    def base_mass(self) -> np.ndarray:
        """``pi_a = exp(logsumexp(base/T) - log Z_a)``, the weight of ``w`` in row ``a`` (V,)."""
        if self.greedy:
            raise ValueError("temperature = 0 kernels have no mixture decomposition")
        return self._base_mass

    @property
    def correction(self) -> np.ndarray:
        """``c_aj = Q[a, succ[a, j]] - pi_a w[succ[a, j]] >= 0``, float64 (V, s)."""
        if self.greedy:
            raise ValueError("temperature = 0 kernels have no mixture decomposition")
        return self._corr

    def correction_row(self, a: int) -> np.ndarray:
        """``correction[a]``, float64 (s,), read-only, without building the ``(V, s)`` table
        in a word-class kernel (the same floats: its class's row)."""
        if self.greedy:
            raise ValueError("temperature = 0 kernels have no mixture decomposition")
        return self._c(a)

    # ------------------------------------------------------------------ rows and entries
    def argmax(self, a: int | np.ndarray) -> int | np.ndarray:
        """Most likely next token after ``a`` (ties to the smallest index); any temperature.

        Parameters
        ----------
        a : int or int array
            Current token(s).

        Returns
        -------
        int or ndarray of int64 with the shape of ``a``.
        """
        idx = as_token_array(a, self.vocab_size, "a")
        out = self._argmax_table()[idx]
        return int(out) if out.ndim == 0 else out

    def _argmax_table(self) -> np.ndarray:
        """``argmax`` of every row, int64 (V,), built on first use."""
        if self._argmax is None:
            if self._reps is None:
                self._argmax = _row_argmax(self.base, self.succ, self.boost)
            else:
                reps = self._reps
                self._argmax = _row_argmax(self.base, self.succ[reps],
                                           self.boost[reps])[self._row_class]
            self._argmax.flags.writeable = False
        return self._argmax

    def row(self, a: int) -> np.ndarray:
        """``Q[a]``, the next-token law after token ``a``: float64 (V,), sums to 1. ``O(V)``."""
        idx = as_token_array(a, self.vocab_size, "a")
        if idx.ndim != 0:
            raise ValueError(f"a must be a single token id; got shape {idx.shape}")
        return self.rows(idx[None])[0]

    def row_factors(self, a: int) -> tuple[np.ndarray, float, np.ndarray, np.ndarray] | None:
        """``(w, pi_a, succ[a], c[a])``: :meth:`row` ``a`` is ``w * pi_a`` with ``c[a]`` added at
        the tokens ``succ[a]`` (the same floats), for a reader that need not build it; None at
        ``T = 0``."""
        if self.greedy:
            return None
        a = int(a)
        if self.n_successors:
            return self._base_law, float(self._base_mass[a]), self.succ[a], self._c(a)
        return self._base_law, float(self._base_mass[a]), _NO_SUCC, _NO_CORR

    def rows(self, a: np.ndarray) -> np.ndarray:
        """``Q[a_i]`` for each token in ``a``: float64 (k, V). ``O(k V)``."""
        idx = as_token_array(a, self.vocab_size, "a")
        if idx.ndim != 1:
            raise ValueError(f"a must be one-dimensional; got shape {idx.shape}")
        k = idx.shape[0]
        if self.greedy:
            out = np.zeros((k, self.vocab_size))
            out[np.arange(k), self.argmax(idx)] = 1.0
            return out
        out = self._base_mass[idx][:, None] * self._base_law[None, :]
        if self.n_successors:
            # Successors of one row are distinct, so a plain fancy-indexed add is exact.
            out[np.arange(k)[:, None], self.succ[idx]] += self._c(idx)
        return out

    def edge_prob(self, a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray | float:
        """``Q[a, b]`` elementwise for broadcastable token arrays. ``O(s)`` per entry.

        Returns
        -------
        float or ndarray of float64 with the broadcast shape of ``a`` and ``b``.
        """
        ai = as_token_array(a, self.vocab_size, "a")
        bi = as_token_array(b, self.vocab_size, "b")
        ai, bi = np.broadcast_arrays(ai, bi)
        out = self.edge_prob_trusted(ai, bi)
        return float(out) if np.ndim(out) == 0 else out

    def edge_prob_trusted(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """:meth:`edge_prob` of int64 arrays of one shape whose tokens are in ``[0, V)``,
        unchecked (a target oracle's edges: its node tokens and the tree's, checked where they
        were made): an array, the same floats."""
        if self.greedy:
            return (self._argmax_table()[a] == b).astype(np.float64)
        out = self._base_mass[a] * self._base_law[b]
        if self.n_successors:
            hit = self.succ[a] == b[..., None]                          # (..., s)
            out = out + np.where(hit, self._c(a), 0.0).sum(axis=-1)
        return out

    def dense(self) -> np.ndarray:
        """The full matrix ``Q``, float64 (V, V); for tests and small vocabularies only."""
        if self.vocab_size > 8192:
            raise ValueError(f"dense() refuses V = {self.vocab_size} > 8192 (V x V floats)")
        return self.rows(np.arange(self.vocab_size))

    # ------------------------------------------------------------------ propagation
    def push(self, mu: np.ndarray) -> np.ndarray:
        """``mu @ Q`` for a row vector (V,) or a stack of row vectors (k, V). ``O(k V s)``.

        ``mu @ Q = (mu . pi) w + mu @ C`` with ``C[a, succ[a, j]] = c_aj`` stored in CSR.
        """
        mu = np.asarray(mu, dtype=np.float64)
        if mu.shape[-1] != self.vocab_size or mu.ndim not in (1, 2):
            raise ValueError(f"mu must have shape (V,) or (k, V) with V = {self.vocab_size}; "
                             f"got {mu.shape}")
        if self.greedy:
            tgt = self.argmax(np.arange(self.vocab_size))
            if mu.ndim == 1:
                return np.bincount(tgt, weights=mu, minlength=self.vocab_size)
            out = np.zeros_like(mu)
            np.add.at(out.T, tgt, mu.T)
            return out
        # C^T @ mu runs scipy's CSC mat-vec over C's CSR arrays: mu is read sequentially and
        # the s writes per source row scatter; measured faster than a destination-row CSR.
        self.correction_matrix()
        ct = self._corr_matrix_t
        if mu.ndim == 1:
            return dot(mu, self._base_mass) * self._base_law + ct @ mu
        # each row's mu . pi as dot(): BLAS's order changes with its threads at V > 10^4
        mass = np.array([dot(row, self._base_mass) for row in mu])
        return np.outer(mass, self._base_law) + (ct @ mu.T).T

    def correction_matrix(self) -> sp.csr_matrix:
        """``C`` with ``C[a, succ[a, j]] = c_aj`` as a CSR (V, V) matrix, built once, ``O(V s)``.

        ``Q = pi w^T + C`` (``T > 0``). Every row has exactly ``s`` stored entries, so the CSR
        arrays are ``succ`` and ``c`` themselves (no sorting or conversion).
        """
        if self.greedy:
            raise ValueError("temperature = 0 kernels have no mixture decomposition")
        if self._corr_matrix is None:
            v, s = self.vocab_size, self.n_successors
            # Fresh, writable int32 arrays: scipy otherwise re-validates/converts read-only or
            # int64 inputs on every product (measured 20x slower).
            idx_t = np.int32 if v * s < 2**31 else np.int64
            indptr = np.arange(v + 1, dtype=idx_t) * s
            self._corr_matrix = sp.csr_matrix(
                (self._corr.ravel().copy(), self.succ.ravel().astype(idx_t), indptr),
                shape=(v, v))
            self._corr_matrix.has_sorted_indices = False
            self._corr_matrix_t = self._corr_matrix.T
        return self._corr_matrix

    # ------------------------------------------------------------------ sampling
    def sample(self, a: int | np.ndarray, rng: np.random.Generator) -> int | np.ndarray:
        """Draw ``b ~ Q[a]`` exactly, for one token or an array of tokens. ``O(s + log V)`` each.

        The row is sampled as its mixture: with probability ``pi_a`` from ``w`` (inverse CDF,
        binary search), otherwise successor ``j`` with probability ``c_aj / (1 - pi_a)``. Each
        draw consumes two uniforms (``rng.random``). ``T == 0`` returns the argmax and consumes
        no randomness.
        """
        if is_int(a) and not self.greedy:
            # Scalar fast path (autoregressive loops): same draws as the vectorised path.
            a = int(a)
            if not 0 <= a < self.vocab_size:
                raise ValueError(f"a contains token {a}, outside the vocabulary "
                                 f"[0, {self.vocab_size})")
            u_comp, u_in = rng.random(), rng.random()
            if u_comp >= self._base_mass[a] and self.n_successors:
                c = np.cumsum(self._c(a))
                if c[-1] > 0:
                    j = int(np.searchsorted(c, u_in * c[-1], side="right"))
                    return int(self.succ[a, min(j, self._last_positive(a))])
            cdf = self._cdf()
            return int(min(np.searchsorted(cdf, u_in * cdf[-1], side="right"),
                           self.vocab_size - 1))
        idx = as_token_array(a, self.vocab_size, "a")
        if self.greedy:
            return self.argmax(idx)
        flat = idx.ravel()
        n = flat.shape[0]
        u_comp = rng.random(n)
        u_in = rng.random(n)
        out = np.empty(n, dtype=np.int64)
        rest = u_comp >= self._base_mass[flat]
        if self.n_successors and rest.any():
            c = np.cumsum(self._c(flat[rest]), axis=1)              # (r, s)
            ok = c[:, -1] > 0          # a row with no successor mass always samples from w
            rest[np.flatnonzero(rest)[~ok]] = False
            c = c[ok]
            r_idx = flat[rest]
            j = (c <= (u_in[rest] * c[:, -1])[:, None]).sum(axis=1)
            j = np.minimum(j, self._last_positive(r_idx))
            out[rest] = self.succ[r_idx, j]
        else:
            rest[:] = False
        from_base = ~rest
        if from_base.any():
            cdf = self._cdf()
            pos = np.searchsorted(cdf, u_in[from_base] * cdf[-1], side="right")
            out[from_base] = np.minimum(pos, self.vocab_size - 1)
        out = out.reshape(idx.shape)
        return int(out) if out.ndim == 0 else out

    def _last_positive(self, a: int | np.ndarray) -> int | np.ndarray:
        """Index of the last successor slot with ``c_aj > 0`` (rounding guard for sampling)."""
        pos = self._c(a) > 0
        return self.n_successors - 1 - np.argmax(pos[..., ::-1], axis=-1)

    def _cdf(self) -> np.ndarray:
        if self._base_cdf is None:
            self._base_cdf = np.cumsum(self._base_law)
        return self._base_cdf

    def __repr__(self) -> str:
        return (f"SparseBoostKernel(V={self.vocab_size}, s={self.n_successors}, "
                f"temperature={self.temperature:g})")


# ---------------------------------------------------------------------- helpers
def _validate_arrays(base: np.ndarray, succ: np.ndarray, boost: np.ndarray) -> None:
    if base.ndim != 1 or base.shape[0] < 1:
        raise ValueError(f"base must be a non-empty vector; got shape {base.shape}")
    if not np.all(np.isfinite(base)):
        raise ValueError("base must be finite")
    v = base.shape[0]
    if succ.ndim != 2 or succ.shape[0] != v:
        raise ValueError(f"succ must have shape (V, s) = ({v}, s); got {succ.shape}")
    if succ.size and (succ.dtype == bool or not np.issubdtype(succ.dtype, np.integer)):
        raise ValueError(f"succ must contain integer token ids; got dtype {succ.dtype}")
    if succ.shape[1] > v:
        raise ValueError(f"succ has {succ.shape[1]} columns but only V = {v} tokens exist")
    if succ.size and (succ.min() < 0 or succ.max() >= v):
        raise ValueError(f"succ entries must lie in [0, {v})")
    if succ.shape[1] > 1:
        srt = np.sort(succ, axis=1)
        dup = np.flatnonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1))
        if dup.size:
            raise ValueError(f"succ[{dup[0]}] repeats a token; successors of a row must be "
                             f"distinct")
    if boost.shape != succ.shape:
        raise ValueError(f"boost must have the shape of succ {succ.shape}; got {boost.shape}")
    if not np.all(np.isfinite(boost)) or (boost.size and boost.min() < 0):
        raise ValueError("boost must be finite and >= 0")


def _readonly_view(a: np.ndarray) -> np.ndarray:
    out = a.view()
    out.flags.writeable = False
    return out


def _first_argmax(x: np.ndarray) -> int:
    """``np.argmax`` already returns the first (smallest-index) maximiser."""
    return int(np.argmax(x))


def _row_argmax(base: np.ndarray, succ: np.ndarray, boost: np.ndarray) -> np.ndarray:
    """Argmax of every row's logits (ties to the smallest index) in ``O(V s^2)``, vectorised.

    The best *non-successor* of row ``a`` is the first token, in the order (base descending,
    index ascending), that is not in ``succ[a]``; it is among the first ``s + 1`` tokens of that
    order. The row maximum is then the best of ``s + 1`` candidates. ``succ`` may hold any
    number of rows (a subset of the kernel's).
    """
    n_rows, s = succ.shape
    v = base.shape[0]
    if s == 0:
        return np.full(n_rows, _first_argmax(base), dtype=np.int64)
    order = np.lexsort((np.arange(v), -base))[: min(s + 1, v)]            # (s+1,) or (v,)
    # Walk down `order`, keeping only the rows whose candidates so far are all successors:
    # O(V s) for the first rank, and almost nothing after it (a row holds order[r] w.p. s/V).
    free_tok = np.full(n_rows, -1, dtype=np.int64)
    open_rows = np.arange(n_rows)
    for tok in order:
        taken = (succ[open_rows] == tok).any(axis=1)
        free_tok[open_rows[~taken]] = tok
        open_rows = open_rows[taken]
        if open_rows.size == 0:
            break
    has_free = free_tok >= 0
    free_tok = np.where(has_free, free_tok, order[0])
    free_val = np.where(has_free, base[free_tok], -np.inf)
    cand_tok = np.concatenate([succ, free_tok[:, None]], axis=1)           # (V, s+1)
    cand_val = np.concatenate([base[succ] + boost, free_val[:, None]], axis=1)
    best = cand_val.max(axis=1, keepdims=True)
    tok = np.where(cand_val == best, cand_tok, np.iinfo(np.int64).max)
    return tok.min(axis=1).astype(np.int64)
