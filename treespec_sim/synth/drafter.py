"""The block-diffusion-like drafter: exact per-depth marginals of its own belief process.

A DFlash-style drafter emits, in one pass, a distribution ``q_d`` for every draft position
``d = 1..L`` -- the *marginal* law of the token at depth ``d``, not a conditional one. This
module models it as a Markov belief process over the drafter's own (mismatched) sparse-boost
kernel ``Q_draft``, degraded with depth and mixed with junk:

.. math::

    Q_d &= (1 - \\eta_d)\\, Q_{\\mathrm{draft}} + \\eta_d\\, \\mathbf{1} u^\\top,
        \\qquad \\eta_d = \\mathrm{degradation} \\cdot \\frac{d - 1}{L - 1}, \\\\
    \\mu_0 &= e_{x_0}, \\qquad \\mu_d = \\mu_{d-1} Q_d, \\\\
    q_d &= (1 - j_d)\\, \\mathrm{sharpen}_{\\beta_d}(\\mu_d) + j_d / V,
        \\qquad j_d = \\mathrm{junk} \\cdot d / L,
        \\qquad \\mathrm{sharpen}_\\beta(\\mu) = \\mu^\\beta / \\textstyle\\sum_b \\mu_b^\\beta,
        \\qquad \\beta_d = 1 + \\mathrm{depth\\_sharpening} \\cdot \\frac{d - 1}{L - 1},

where ``u = softmax(base_draft / calibration)`` is the drafter's (topic-aware, calibrated)
background unigram -- the shared component of its kernel rows -- and ``x_0`` the last committed
token. Junk and sharpening act on the *output* only; they do not propagate (``mu_d`` uses
``mu_{d-1}``). ``depth_sharpening`` (default 0, i.e. ``beta_d = 1``: no effect) is a per-depth
output calibration: ``beta_d > 1`` makes deep marginals more confident than the belief process
(whose mass spreads over many paths), ``beta_d < 1`` flatter. It never changes a row's argmax,
so the argmax chain is unaffected; it moves only how a tree spends its budget across depths.
``eta_1 = 0`` and ``beta_1 = 1``, so ``q_1 = (1 - j_1) Q_draft[x_0] + j_1 / V``. The drafter
ignores the target's sampling temperature, as DFlash does.

The optional *conditional-correction* proposal for depth ``d`` given the drafted parent token
``x_{d-1}`` interpolates between the marginal and the drafter's true conditional:

.. math::

    \\hat q_d(\\cdot \\mid x_{d-1}) = (1 - \\kappa)\\, q_d
        + \\kappa \\left[(1 - j_d)\\, Q_d[x_{d-1}] + j_d / V\\right],
    \\qquad \\kappa = \\mathrm{correction\\_quality}.

At depth 1 the parent must be ``x_0``; then ``Q_1[x_0] = mu_1`` and ``q̂_1 = q_1`` exactly for
every ``kappa`` (the first marginal already *is* the conditional).

Word-class fast path
--------------------
In a world with surface variants (``variants = m > 1``) every row of ``Q_draft`` has the form
``Q[a, b] = w[b] pi_c(a) (1 + sum_j gamma_c(a),j [c(b) = sc_c(a),j])`` with
``gamma = expm1(boost / calibration)`` and ``sc`` the drafter's successor *classes*: the row
depends on ``a`` only through its class, and inside a successor class it is proportional to
``w``. So ``mu_d = w * h_d[c(.)]`` for a per-class vector ``h_d`` that follows a chain over the
``V / m`` classes with ``s`` (not ``s m``) successors, and :meth:`BlockDiffusionDrafter.marginals`
propagates that chain (``O(V / m * s)`` per depth) and expands it to tokens (``O(V)``). The
result is the same law as the token-level product, up to rounding.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..marginals import DenseLogMarginals, LazyLogMarginals, kth_largest, ranked_candidates
from .class_kernels import (
    Slices,
    candidates,
    chain,
    conditional_row,
    rank_top,
    shared_law,
    slices,
    top_classes,
)
from .kernel import SparseBoostKernel

__all__ = ["BlockDiffusionDrafter", "ClassLogMarginals"]


@dataclass(frozen=True)
class _ClassTable:
    """The class-level chain of a word-class drafter for one topic (see ``_class_table``)."""

    pi: np.ndarray          # (V/m,) weight of w in a row of each class
    w: np.ndarray           # (V,) softmax(base / calibration)
    w_cls: np.ndarray       # (V/m,) class sums of w
    g: sp.csr_matrix        # G[c, sc_cj] = pi_c gamma_cj
    gt: sp.csr_matrix       # G^T, each row in column order
    gt_slices: Slices       # G^T's rows in slices (the chain's product reads these)
    g_indptr: np.ndarray    # G's indptr and indices as int64 (the chain's first depth)
    g_indices: np.ndarray
    w_max: np.ndarray       # (V/m,) largest w in each class
    log_w: np.ndarray       # (V,) log softmax(base / calibration), no underflow

_KERNEL_CACHE = 64      # drafter kernels (one per topic), O(V s) floats each
_MARGINAL_CACHE = 8     # (L, V) marginal stacks; a round asks for the same context repeatedly
#: ClassLogMarginals, O(L V / m) floats each (2 MB at V = 32768 with the class maxima): a round
#: reuses its context's, and a sampled fill's correction proposal asks for it again after the
#: draft is built. Few: a fresh context's arrays then reuse memory still in cache (32 entries,
#: 64 MB, made fresh ddtree rounds 9% slower).
_LAZY_CACHE = 4
#: Parent-independent parts of the correction proposal, (topic, last token, depth) -> (V,): at
#: least one context's depths (``max(16, L + 1)`` entries, see ``conditional``).
_CONDITIONAL_CACHE = 16
_SHARPEN_CACHE = 32     # per-topic class sums of w^beta_d, O(L V / m) floats each
#: ClassLogMarginals.top: an outside token provably ranks below the k-th value when its upper
#: bound is this many ulps below it (margin for ulp-level non-monotone rounding of exp/log).
_TIE_ULPS = 16
_NO_LAW = np.empty(0)   # shared_law's u when there is none
_NO_SUCC = np.empty(0, dtype=np.int64)


class BlockDiffusionDrafter:
    """Exact marginals ``q_1..q_L`` of a degraded, mismatched Markov belief process.

    Parameters
    ----------
    background : ndarray of float64, shape (V,)
        The drafter's background logits (shared with the target: the unigram is easy to learn).
    topic_term : ndarray of float64, shape (n_topics, V)
        The topic term the drafter knows (already scaled by ``topic_awareness``).
    succ, boost : ndarray, shape (V, s)
        The drafter's successor table and boosts (a mismatched copy of the target's).
    calibration : float
        Temperature of the drafter's logits (``> 0``).
    depth : int
        ``L``.
    degradation, junk, correction_quality : float
        See the module docstring.
    depth_sharpening : float, default 0.0
        ``beta_d = 1 + depth_sharpening (d - 1) / (L - 1)``, the exponent applied to ``mu_d``
        (``> -1`` so that every ``beta_d > 0``; see the module docstring).
    classes : tuple of ndarray, optional
        ``(members, class_succ, class_boost)`` for a word-class world: ``members`` int64
        ``(V / m, m)`` lists each class's tokens, ``class_succ`` int64 ``(V / m, s)`` and
        ``class_boost`` float64 ``(V / m, s)`` are the class-level table that ``succ`` and
        ``boost`` expand (``succ[a] = members[class_succ[c(a)]].ravel()``). Enables the
        class-level fast path of :meth:`marginals`; the caller guarantees the consistency.
    """

    def __init__(self, background: np.ndarray, topic_term: np.ndarray, succ: np.ndarray,
                 boost: np.ndarray, *, calibration: float, depth: int, degradation: float,
                 junk: float, correction_quality: float, depth_sharpening: float = 0.0,
                 classes: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> None:
        self.background = background
        self.topic_term = topic_term
        self.succ = succ
        self.boost = boost
        self.calibration = float(calibration)
        self.depth = int(depth)
        self.correction_quality = float(correction_quality)
        d = np.arange(1, self.depth + 1, dtype=np.float64)
        #: eta_d, float64 (L,): weight of the unigram in the depth-d transition.
        self.eta = degradation * (d - 1) / max(self.depth - 1, 1)
        #: j_d, float64 (L,): junk (uniform) weight in the depth-d output.
        self.junk = junk * d / self.depth
        if not depth_sharpening > -1.0:
            raise ValueError(f"depth_sharpening must be > -1; got {depth_sharpening!r}")
        #: beta_d, float64 (L,): exponent of the depth-d output marginal (1 = unchanged).
        self.beta = 1.0 + float(depth_sharpening) * (d - 1) / max(self.depth - 1, 1)
        self.eta.flags.writeable = False
        self.junk.flags.writeable = False
        self.beta.flags.writeable = False
        self._classes = classes
        if classes is not None:
            members = classes[0]
            self._cls_of = np.empty(members.size, dtype=np.int64)
            self._cls_of[members] = np.arange(members.shape[0])[:, None]
        self._class_tables: OrderedDict[int, _ClassTable] = OrderedDict()
        self._kernels: OrderedDict[int, SparseBoostKernel] = OrderedDict()
        self._marginals: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self._lazy: OrderedDict[tuple[int, int], ClassLogMarginals] = OrderedDict()
        self._sharpen_sums: OrderedDict[int, np.ndarray] = OrderedDict()
        self._conditional_shared: OrderedDict[tuple[int, int, int], np.ndarray] = OrderedDict()

    @property
    def vocab_size(self) -> int:
        return int(self.background.shape[0])

    def kernel(self, topic: int) -> SparseBoostKernel:
        """``Q_draft`` for ``topic`` (at temperature ``calibration``), cached."""
        k = self._kernels.get(topic)
        if k is None:
            base = self.background + self.topic_term[topic]
            k = SparseBoostKernel(base, self.succ, self.boost, self.calibration, validate=False,
                                  row_class=self._cls_of if self._classes is not None else None)
            self._kernels[topic] = k
            if len(self._kernels) > _KERNEL_CACHE:
                self._kernels.popitem(last=False)
        else:
            self._kernels.move_to_end(topic)
        return k

    def warm(self, topic: int) -> None:
        """Build ``topic``'s tables (the token-level kernel, which the correction proposal
        reads, and in a word-class world the class chain and sharpening sums) so that the next
        round does not pay for them."""
        self.kernel(topic)
        if self._classes is not None:
            self._beta_class_sums(topic, self._class_table(topic))

    def unigram(self, topic: int) -> np.ndarray:
        """``u``, the drafter's background unigram for ``topic``, float64 (V,)."""
        return self.kernel(topic).base_law

    def marginals(self, topic: int, last_token: int) -> np.ndarray:
        """``mu_1..mu_L`` (before junk), float64 (L, V), read-only; cached per context.

        Cost ``O(L V s)``: one CSR product and two axpys per depth (``O(L (V / m) s + L V)``
        in a word-class world).
        """
        key = (int(topic), int(last_token))
        mu = self._marginals.get(key)
        if mu is not None:
            self._marginals.move_to_end(key)
            return mu
        if self._classes is not None:
            tab = self._class_table(int(topic))
            mu = np.empty((self.depth, self.vocab_size))
            for d, h in enumerate(self._chain(tab, int(last_token))[0]):
                np.multiply(tab.w, h[self._cls_of], out=mu[d])
        else:
            k = self.kernel(topic)
            u = k.base_law
            mu = np.empty((self.depth, self.vocab_size))
            mu[0] = k.row(last_token)                         # eta_1 = 0
            for d in range(1, self.depth):
                eta = self.eta[d]
                # mu_{d-1} sums to 1, so mu_{d-1} (1 u^T) = u.
                mu[d] = k.push(mu[d - 1])
                if eta:
                    mu[d] *= 1.0 - eta
                    mu[d] += eta * u
        mu.flags.writeable = False
        self._marginals[key] = mu
        if len(self._marginals) > _MARGINAL_CACHE:
            self._marginals.popitem(last=False)
        return mu

    def argmax_marginals(self, topic: int, last_token: int) -> np.ndarray:
        """``argmax_b mu_d(b)`` for ``d = 1..L``: int64 (L,), ties to the smallest token.

        Equal to ``np.argmax(self.marginals(topic, last_token), axis=1)`` (also after junk and
        depth sharpening, which are monotone per row), but in a word-class world it never
        expands the classes to tokens: ``O(L (V / m) s)``.
        """
        if self._classes is None:
            return np.argmax(self.marginals(topic, last_token), axis=1)
        tab = self._class_table(int(topic))
        members = self._classes[0]
        out = np.empty(self.depth, dtype=np.int64)
        for d, h in enumerate(self._chain(tab, int(last_token))[0]):
            # mu_d[b] = w[b] h[c(b)]; rounding is monotone, so a row maximum is w_max[c] h[c].
            v = h * tab.w_max
            top = np.flatnonzero(v == v.max())
            toks = members[top].ravel()
            vals = tab.w[toks] * np.repeat(h[top], members.shape[1])
            out[d] = toks[vals == vals.max()].min()
        return out

    def _chain(self, tab: _ClassTable, last_token: int, sums: np.ndarray | None = None
               ) -> tuple[np.ndarray, tuple]:
        """``h_1..h_L`` float64 (L, V / m) with ``mu_d = w * h_d[c(.)]`` (module docstring), and
        the sharpened rows' normalisers ``(m_d, Z_d, kept, n_kept)`` (ClassLogMarginals'
        ``norms``; NaN where ``beta_d = 1``, or for every row without the class sums ``sums``).

        ``h_d[c] = (1 - eta_d) (nu . pi + sum_c' nu[c'] pi_c' gamma_c'->c) + eta_d`` with
        ``nu = w_cls * h_{d-1}`` (``nu_0 = e_{c(x_0)}``): one sparse product ``G^T nu`` and one
        dot per depth (:func:`~treespec_sim.synth.class_kernels.chain`, one compiled call). The
        chain comes first, then the rows' norms and top lists (ClassLogMarginals).
        """
        n = tab.pi.shape[0]
        h = np.empty((self.depth, n))
        norm_m, norm_z = np.full(self.depth, np.nan), np.full(self.depth, np.nan)
        kept, n_kept = np.empty((self.depth, n), dtype=np.int32), np.zeros(self.depth, np.int64)
        beta = self.beta if sums is not None else np.ones(self.depth)
        sums = sums if sums is not None else np.empty((self.depth, n))
        sl = tab.gt_slices
        chain(int(self._cls_of[last_token]), tab.g_indptr, tab.g_indices, tab.g.data, sl.rows,
              sl.offsets, sl.columns, sl.values, tab.pi, tab.w_cls, tab.w_max, self.eta, beta,
              sums, h, norm_m, norm_z, kept, n_kept)
        return h, (norm_m, norm_z, kept, n_kept)

    def _class_table(self, topic: int) -> _ClassTable:
        """The class-level chain of ``Q_draft`` for ``topic``, cached (no token-level kernel).

        ``w = softmax(base / t)``; ``W[c]`` its class sums; ``pi_c = 1 / (1 + sum_j gamma_cj
        W[sc_cj])`` (the weight of ``w`` in a class-``c`` row); ``G[c, sc_cj] = pi_c gamma_cj``,
        all in log space so that large ``boost / t`` never overflows.
        """
        tab = self._class_tables.get(topic)
        if tab is not None:
            self._class_tables.move_to_end(topic)
            return tab
        members, class_succ, class_boost = self._classes
        ib = (self.background + self.topic_term[topic]) / self.calibration
        w = np.exp(ib - ib.max())
        log_w = ib - ib.max() - math.log(w.sum())
        w /= w.sum()
        n_cls, s = class_succ.shape
        w_cls = np.bincount(self._cls_of, weights=w, minlength=n_cls)
        rel = class_boost / self.calibration
        with np.errstate(divide="ignore"):
            log_gamma = rel + np.log(-np.expm1(-rel))                  # -inf where boost = 0
            terms = log_gamma + np.log(w_cls)[class_succ]
        log_pi = -np.logaddexp.reduce(np.concatenate([np.zeros((n_cls, 1)), terms], axis=1),
                                      axis=1)
        vals = np.exp(log_pi[:, None] + log_gamma)
        idx_t = np.int32 if n_cls * s < 2**31 else np.int64
        g = sp.csr_matrix((vals.ravel(), class_succ.ravel().astype(idx_t),
                           np.arange(n_cls + 1, dtype=idx_t) * s), shape=(n_cls, n_cls))
        # Slots with boost 0 store gamma = 0; a product adds +0.0 for them, which never
        # changes a sum of non-negative terms, so dropping them is exact (and saves ~7%).
        g.eliminate_zeros()
        gt = g.T.tocsr()
        gt.sort_indices()
        tab = _ClassTable(pi=np.exp(log_pi), w=w, w_cls=w_cls, g=g, gt=gt,
                          gt_slices=slices(gt.indptr, gt.indices, gt.data, n_cls),
                          g_indptr=g.indptr.astype(np.int64), g_indices=g.indices.astype(np.int64),
                          w_max=w[members].max(axis=1), log_w=log_w)
        self._class_tables[topic] = tab
        if len(self._class_tables) > _KERNEL_CACHE:
            self._class_tables.popitem(last=False)
        return tab

    def log_marginals(self, topic: int, last_token: int) -> np.ndarray:
        """``log q_d`` for ``d = 1..L``, float64 (L, V), a fresh array.

        Entries are ``<= 0`` and finite when ``junk > 0``; exact zeros give ``-inf``. In a
        word-class world this is ``lazy_log_marginals(...).dense()``, bit for bit.
        """
        if self._classes is not None:
            return self.lazy_log_marginals(topic, last_token).dense().copy()
        q = self._sharpened(self.marginals(topic, last_token))
        q *= (1.0 - self.junk)[:, None]
        q += (self.junk / self.vocab_size)[:, None]
        with np.errstate(divide="ignore"):
            return np.log(q, out=q)

    def lazy_log_marginals(self, topic: int, last_token: int) -> LazyLogMarginals:
        """``log q_1..q_L`` as a :class:`~treespec_sim.marginals.LazyLogMarginals` (cached).

        In a word-class world: a :class:`ClassLogMarginals` holding only the class chain
        ``h_1..h_L`` (``O(L (V / m) s)`` to build); its top-``k`` lists cost ``O(V / m + k m)``
        per depth (``O(V)`` for a row whose ``k``-th value is tied with tokens outside the ``k``
        best classes, or when ``2 k > V / m``) and its dense form equals :meth:`log_marginals`
        exactly. Otherwise the dense array wrapped in
        :class:`~treespec_sim.marginals.DenseLogMarginals`.
        """
        if self._classes is None:
            return DenseLogMarginals(self.log_marginals(topic, last_token))
        key = (int(topic), int(last_token))
        lazy = self._lazy.get(key)
        if lazy is not None:
            self._lazy.move_to_end(key)
            return lazy
        tab = self._class_table(key[0])
        sums = self._beta_class_sums(key[0], tab)
        h, norms = self._chain(tab, key[1], sums)
        lazy = ClassLogMarginals(tab, h, norms, self._classes[0], self._cls_of,
                                 beta=self.beta, junk=self.junk)
        self._lazy[key] = lazy
        if len(self._lazy) > _LAZY_CACHE:
            self._lazy.popitem(last=False)
        return lazy

    def _beta_class_sums(self, topic: int, tab: _ClassTable) -> np.ndarray:
        """``S[d, c] = sum_{b in c} (w[b] / w_max[c])^beta_d`` for rows with ``beta_d != 1``.

        Scaled by the class maximum so that every term is in ``(0, 1]`` and ``S`` in
        ``[1, m]``: unscaled, ``w^beta`` underflows to 0 for large ``beta`` while the class
        factor of ``Z_d`` overflows (inf * 0 = NaN). Rows with ``beta_d = 1`` hold NaN (unused).
        """
        sums = self._sharpen_sums.get(topic)
        if sums is not None:
            self._sharpen_sums.move_to_end(topic)
            return sums
        sums = np.full((self.depth, tab.pi.shape[0]), np.nan)
        log_ratio = None
        for d in np.flatnonzero(self.beta != 1.0):
            if log_ratio is None:
                with np.errstate(divide="ignore", invalid="ignore"):
                    log_ratio = np.log(tab.w) - np.log(tab.w_max)[self._cls_of]  # <= 0
            sums[d] = np.bincount(self._cls_of, weights=np.exp(self.beta[d] * log_ratio),
                                  minlength=tab.pi.shape[0])
        sums.flags.writeable = False
        self._sharpen_sums[topic] = sums
        if len(self._sharpen_sums) > _SHARPEN_CACHE:
            self._sharpen_sums.popitem(last=False)
        return sums

    def _sharpened(self, mu: np.ndarray, depth: int | None = None) -> np.ndarray:
        """``sharpen_{beta_d}(mu_d)`` for every depth (``mu`` (L, V)) or one ``depth``: a copy."""
        if depth is not None:
            return _sharpen_row(mu[depth - 1], self.beta[depth - 1])
        return np.stack([_sharpen_row(row, beta) for row, beta in zip(mu, self.beta,
                                                                       strict=True)])

    def conditional(self, topic: int, last_token: int, depth: int, parent_token: int
                    ) -> np.ndarray:
        """The correction proposal ``q̂_d(. | parent_token)``, float64 (V,), sums to 1."""
        # q̂ = (1 - kappa) q_d + kappa ((1 - j) ((1 - eta) Q[a] + eta u) + j / V) with
        # Q[a] = pi_a u + sum_j c_aj e_succ[a, j]: everything but the parent's share of u and
        # its s sparse corrections is the same for every parent of a (context, depth), so it is
        # computed once (a Tsubame fill asks for ~20 parents per context) and cached.
        d = depth - 1
        j = self.junk[d]
        eta = self.eta[d]
        kappa = self.correction_quality
        k = self.kernel(topic)
        key = (int(topic), int(last_token), int(depth))
        shared = self._conditional_shared.get(key)
        if shared is None:
            if self._classes is None:
                q = _sharpen_row(self.marginals(topic, last_token)[d], self.beta[d])
                q *= 1.0 - j
                q += j / self.vocab_size
                q *= 1.0 - kappa                  # written over q: the floats of (1 - kappa) q
                shared = q
                if eta:                           # else the term is +0.0: adds nothing
                    shared += kappa * (1.0 - j) * eta * k.base_law
                shared += kappa * j / self.vocab_size
            else:
                shared = self._shared_law(topic, last_token, d,
                                          k.base_law if eta else None, kappa * (1.0 - j) * eta)
            shared.flags.writeable = False
            self._conditional_shared[key] = shared
            if len(self._conditional_shared) > max(_CONDITIONAL_CACHE, self.depth + 1):
                self._conditional_shared.popitem(last=False)
        else:
            self._conditional_shared.move_to_end(key)
        scale = kappa * (1.0 - j) * (1.0 - eta)
        a = int(parent_token)
        out = np.empty(self.vocab_size)
        if k.n_successors:
            # a row's successors are distinct; its class's corrections, no (V, s) table
            conditional_row(k.base_law, scale * float(k.base_mass[a]), shared, k.succ[a],
                            scale * k.correction_row(a), out)
        else:
            conditional_row(k.base_law, scale * float(k.base_mass[a]), shared, _NO_SUCC,
                            _NO_LAW, out)
        return out


    def _shared_law(self, topic: int, last_token: int, d: int, u: np.ndarray | None,
                    c1: float) -> np.ndarray:
        """The parent-independent part of :meth:`conditional` at row ``d`` in a word-class
        world, float64 (V,): ``(1 - kappa) (1 - j) s_d + j / V`` (plus ``c1 u`` where ``u`` is
        given), with ``s_d`` the sharpened marginal from the class chain and the row's norms:

        ``s_d(b) = exp(beta_d (log h_d[c(b)] + log w[b]) - m_d) / Z_d`` (``beta_d != 1``),
        ``s_d(b) = w[b] h_d[c(b)]`` (``beta_d = 1``).

        ``log``/``exp`` are treespec's own (:func:`~treespec_sim.synth.class_kernels.shared_law`,
        which forms only the tokens that can differ from the floor), ``(1 - kappa) (1 - j) / Z_d``
        is one factor,
        and ``m_d``, ``Z_d`` are :class:`ClassLogMarginals`' norms, so no pass over the
        vocabulary looks for a maximum or a sum. ``s_d`` sums to 1 up to rounding; the sampled fill
        normalises every law it draws from.
        """
        lazy = self.lazy_log_marginals(topic, last_token)
        tab = self._class_table(int(topic))
        h = lazy._h[d]
        beta = float(self.beta[d])
        j = float(self.junk[d])
        a = (1.0 - self.correction_quality) * (1.0 - j)
        m = 0.0
        if beta != 1.0:
            norm_m, norm_z = lazy._norms()
            m = float(norm_m[d])
            a = a / float(norm_z[d])
        floor = j / self.vocab_size
        out = np.empty(self.vocab_size)
        if beta != 1.0:
            shared_law(h, self._classes[0], tab.log_w, beta, m, a, floor,
                       _NO_LAW if u is None else u, c1, lazy._kept[d, :lazy._n_kept[d]], out)
            return out
        np.multiply(tab.w, h[self._cls_of], out=out)
        out *= a
        out += floor
        if u is not None:
            out += c1 * u
        return out

def _sharpen_row(row: np.ndarray, beta: float) -> np.ndarray:
    """``row ** beta`` renormalised (log domain), a fresh float64 array; a copy if beta == 1."""
    r = np.array(row, dtype=np.float64)
    if beta != 1.0:
        with np.errstate(divide="ignore"):
            np.log(r, out=r)
        r *= beta
        r -= r.max()
        np.exp(r, out=r)
        r /= r.sum()
    return r


class ClassLogMarginals(LazyLogMarginals):
    r"""The drafter's ``log q_d`` in a word-class world, from the class chain alone.

    With ``mu_d(b) = w[b] h_d[c(b)]`` (module docstring) the output is

    .. math::

        \log q_d(b) = \log\Big((1 - j_d)\,
            \frac{\exp(\beta_d \log \mu_d(b) - m_d)}{Z_d} + \frac{j_d}{V}\Big),
        \quad m_d = \beta_d \log \max_b \mu_d(b),
        \quad Z_d = \sum_c e^{\beta_d \log v_d[c] - m_d}
            \sum_{b \in c} (w[b] / w_{\max}[c])^{\beta_d},

    with ``v_d[c] = h_d[c] w_max[c]`` the class maximum of ``mu_d`` (both factors of ``Z_d`` stay
    in range for any ``beta_d``; for ``beta_d = 1`` the sharpening is skipped: ``mu_d`` is
    already normalised). Every
    per-token operation is the same float operation in :meth:`values`, :meth:`top` and
    :meth:`dense`, so the three agree bit for bit. ``q_d`` is a non-decreasing function of
    ``mu_d``, so a row's ``k`` best tokens lie in the classes whose best member
    ``w_max[c] h_d[c]`` is among the ``k`` best class maxima: :meth:`top` ranks those ``k m``
    tokens. When a token outside them could tie the ``k``-th value (junk-floor rows with fewer
    than ``k`` tokens above ``j_d / V``), an exact tie is filled with the smallest tied token
    ids, scanning the vocabulary in id order; a near tie (a few ulps) just above the floor is
    ranked from the classes that can lift a token above the floor at all
    (:meth:`_top_above_floor`), any other near tie from the whole row.

    Parameters
    ----------
    table : _ClassTable
        The topic's class table (``w``, ``w_max``, ...).
    h : ndarray of float64, shape (L, V / m)
        ``h_1..h_L``.
    norms : tuple
        ``(m_d, Z_d)`` of :meth:`_norms` (float64 ``(L,)`` each) and the classes each row's sum
        kept (int32 ``(L, V / m)``, the first ``n_kept[d]`` of row ``d``; int64 ``(L,)``),
        computed with the chain (:func:`~treespec_sim.synth.class_kernels.chain`).
    members : ndarray of int64, shape (V / m, m)
        Tokens of each class.
    cls_of : ndarray of int64, shape (V,)
        Class of each token.
    beta, junk : ndarray of float64, shape (L,)
        ``beta_d`` and ``j_d``.
    """

    def __init__(self, table: _ClassTable, h: np.ndarray, norms: tuple,
                 members: np.ndarray, cls_of: np.ndarray, *, beta: np.ndarray,
                 junk: np.ndarray) -> None:
        super().__init__(h.shape[0], table.w.shape[0])
        self._w = table.w
        self._w_max = table.w_max
        self._h = h
        self._members = members
        self._cls_of = cls_of
        self._beta = beta
        self._keep = 1.0 - junk                 # the same floats as log_marginals' dense path
        self._floor = junk / table.w.shape[0]
        self._sharp = beta != 1.0
        self._vmax: np.ndarray | None = None    # (L, V / m) class maxima, on first use
        self._norm_m, self._norm_z, self._kept, self._n_kept = norms
        self._factors: dict[tuple[str, bytes], tuple] = {}  # _row_factors, per row set

    # -------------------------------------------------------------- per-row quantities
    def _class_max(self) -> np.ndarray:
        """``w_max[c] h_d[c]`` for every row: the largest ``mu`` of every class (rounding is
        monotone), float64 (L, V / m), computed once."""
        if self._vmax is None:
            self._vmax = self._h * self._w_max
        return self._vmax

    def _norms(self) -> tuple[np.ndarray, np.ndarray]:
        """``(m_d, Z_d)`` of every row with ``beta_d != 1`` (NaN elsewhere), computed with the
        chain:

        ``m_d = beta_d log v_max``, ``Z_d = sum_c exp(beta_d log v_d[c] - m_d) S[d, c]``

        with ``v_d[c] = h_d[c] w_max[c]`` the class maxima and ``v_max`` the largest (every
        exponent is ``<= 0`` up to rounding and ``S`` is in ``[1, m]``, so neither factor
        overflows whatever ``beta_d``). The sum runs over the classes with
        ``v >= v_max exp(-64 / beta_d)`` (:data:`~treespec_sim.numerics.NORM_CUT`; a few
        percent of a row): each term left out is below ``m e^-64``, all of them together under
        ``3e-23`` of ``Z_d >= 1`` -- far below its rounding. ``log``, ``exp`` and the sum are
        treespec's own (:func:`~treespec_sim.numerics.fixed_log`,
        :func:`~treespec_sim.numerics.fixed_exp`, eight lanes:
        :func:`~treespec_sim.synth.class_kernels.norm_row`): fixed sequences of IEEE
        operations, the same floats on every CPU.
        """
        return self._norm_m, self._norm_z

    def _from_mu(self, row: int, mu: np.ndarray) -> np.ndarray:
        """``log q_row`` from ``mu_row`` values, float64 (n,): :meth:`_from_mu_rows` of one row."""
        return self._from_mu_rows(mu[None, :], np.array([row]), inplace=False)[0]

    def _mu(self, row: int, tokens: np.ndarray) -> np.ndarray:
        return np.multiply(self._w[tokens], self._h[row][self._cls_of[tokens]])

    # -------------------------------------------------------------- interface
    def values(self, row: int, tokens: np.ndarray) -> np.ndarray:
        row = self._check_row(row)
        tokens = np.asarray(tokens, dtype=np.int64)
        mu = self._mu(row, tokens.ravel())
        return self._from_mu_rows(mu[None, :], np.array([row]))[0].reshape(tokens.shape)

    def top(self, row: int, k: int) -> tuple[np.ndarray, np.ndarray]:

        row = self._check_row(row)
        n_cls, m = self._members.shape
        k = min(int(k), n_cls * m)
        if k < 1:
            raise ValueError(f"k must be >= 1; got {k}")
        if 2 * k <= n_cls:
            toks, vals = np.empty((1, k), dtype=np.int64), np.empty((1, k))
            if self._top_rows(np.array([row]), k, toks, vals)[0]:
                return toks[0], vals[0]
        return self._top_slow(row, k)

    def _top_slow(self, row: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`top` of one row without :meth:`_top_rows`: ties at the class threshold
        (more than ``k`` classes tied at the ``k``-th class maximum) and near ties with a
        token outside the best classes; the whole row when ``2 k > V / m``."""
        n_cls = self._members.shape[0]
        if 2 * k <= n_cls:
            v = self._class_max()[row]
            thr = kth_largest(v, k)
            inside = v >= thr
            cls = np.flatnonzero(inside)
            toks = self._members[cls].ravel()
            vals = self._from_mu(row, self._mu(row, toks))
            order = np.lexsort((toks, -vals))[:k]
            toks, vals = toks[order], vals[order]
            outside = v[~inside]
            if outside.size == 0:
                return toks, vals
            # Every outside token has q <= q(best outside mu); it cannot reach the k-th value
            # unless the two are (nearly) equal.
            best_out = self._from_mu(row, np.array([outside.max()]))[0]
            kth = vals[-1]
            if kth - best_out > _TIE_ULPS * np.spacing(abs(kth)):
                return toks, vals
            if best_out == kth:
                # An exact tie at the k-th value (typically the junk floor j / V, shared by
                # most of the row): the tokens above it are all inside; the tied ones are
                # filled in id order, scanning the vocabulary from token 0.
                return self._fill_ties(row, toks, vals, k)
        return ranked_candidates(self.values(row, np.arange(self.shape[1])), -np.inf, k)

    def _fill_ties(self, row: int, toks: np.ndarray, vals: np.ndarray, k: int
                   ) -> tuple[np.ndarray, np.ndarray]:
        """``toks``/``vals`` (ranked, ``vals[-1]`` the ``k``-th value) with the entries tied at
        the ``k``-th value replaced by the smallest token ids of the row at that value."""
        kth = vals[-1]
        above = vals > kth
        need = k - int(above.sum())
        V = self.shape[1]
        chunk = max(256, 4 * need)      # floor tokens are most of a row: a short first read
        hits: list[np.ndarray] = []
        found = 0
        h_row, one = self._h[row], np.array([row])
        for start in range(0, V, chunk):
            stop = min(start + chunk, V)
            # :meth:`values` of the ids start..stop-1 (slices instead of gathers: same floats)
            mu = np.multiply(self._w[start:stop], h_row[self._cls_of[start:stop]])
            tied = np.flatnonzero(self._from_mu_rows(mu[None, :], one)[0] == kth) + start
            hits.append(tied)
            found += tied.size
            if found >= need:
                break
        tied = np.concatenate(hits)[:need]
        return (np.concatenate([toks[above], tied]),
                np.concatenate([vals[above], np.full(tied.size, kth)]))

    def top_all(self, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`top` of every row, vectorised across rows (:meth:`top_block`'s rows)."""
        return list(zip(*self.top_block(k), strict=True))

    def top_block(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`top` of every row as two ``(L, k)`` arrays, vectorised across rows (one
        selection, one sort).

        Rows where the fast path is not certain (a tie at the class threshold, or an outside
        token that could tie the ``k``-th value) are redone one by one.
        """
        L = self.shape[0]
        n_cls, m = self._members.shape
        k = min(int(k), n_cls * m)
        if k < 1:
            raise ValueError(f"k must be >= 1; got {k}")
        toks, vals = np.empty((L, k), dtype=np.int64), np.empty((L, k))
        done = (self._top_rows(None, k, toks, vals) if 2 * k <= n_cls
                else np.zeros(L, dtype=bool))
        if not done.all():
            for r in np.flatnonzero(~done).tolist():
                toks[r], vals[r] = self._top_slow(r, k)
        return toks, vals

    def row_max(self) -> np.ndarray:
        """``max_a log q_d(a)`` per row (:meth:`top_all` with ``k = 1``)."""
        return np.array([v[0] for _, v in self.top_all(1)])

    def argmax(self) -> np.ndarray:
        """The argmax token of every row, ties to the smaller id (:meth:`top_all`, ``k = 1``)."""
        return np.array([t[0] for t, _ in self.top_all(1)], dtype=np.int64)

    def _top_rows(self, rows: np.ndarray | None, k: int, toks_out: np.ndarray,
                  vals_out: np.ndarray) -> np.ndarray:
        """:meth:`top` of each of ``rows`` (None: every row; ``2 k <= V / m``) at once, into
        row ``i`` of ``toks_out`` int64 and ``vals_out`` float64 (``(len(rows), k)``); returns
        which rows it wrote (bool): the others need :meth:`_top_slow` (a tie at the class
        threshold; a near tie with an outside token that :meth:`_top_above_floor` cannot
        decide).

        The ``k`` best classes of a row are those whose maximum is above its ``(k + 1)``-th
        best (:func:`~treespec_sim.synth.class_kernels.top_classes`, ties excluded); their
        ``k m`` tokens are ranked (:func:`~treespec_sim.synth.class_kernels.rank_top`), and a
        row is certain when the best outside class maximum maps to a value provably below the
        ``k``-th (or, an exact tie, is filled in id order by :meth:`_fill_ties`).
        """
        m = self._members.shape[1]
        rows = (np.arange(self.shape[0]) if rows is None
                else np.ascontiguousarray(rows, dtype=np.int64))
        done = np.zeros(rows.size, dtype=bool)
        classes = np.empty((rows.size, k), dtype=np.int64)
        outside = np.empty(rows.size)
        exact = top_classes(self._h, self._w_max, rows, k, self._kept, self._n_kept, classes,
                            outside)
        if not exact.any():
            return done
        pos = np.flatnonzero(exact)
        v_out = outside[pos]                      # the best class maximum outside the k best
        sub = rows[pos]
        n = sub.size
        # the candidates' mu and, in the last column, v_out: one pass of the (element-wise)
        # map to log q for both
        toks, mu = np.empty((n, k * m), dtype=np.int64), np.empty((n, k * m + 1))
        candidates(self._members, self._h, self._w, rows, classes, outside, exact, toks, mu)
        both = self._from_mu_rows(mu, sub)
        best_out = both[:, -1]
        toks_k, vals = np.empty((n, k), dtype=np.int64), np.empty((n, k))
        ranked = rank_top(toks, np.ascontiguousarray(both[:, :-1]), toks_k, vals)
        toks = toks_k
        kth = vals[:, -1]
        with np.errstate(invalid="ignore"):
            sure = (kth - best_out > _TIE_ULPS * np.spacing(np.abs(kth))) | np.isneginf(v_out)
        sure &= ranked
        toks_out[pos[sure]], vals_out[pos[sure]] = toks[sure], vals[sure]
        done[pos[sure]] = True
        if not sure.all():
            for i in np.flatnonzero(~sure & ranked).tolist():
                if best_out[i] == kth[i]:
                    got = self._fill_ties(int(sub[i]), toks[i], vals[i], k)
                else:
                    got = self._top_above_floor(int(sub[i]), k)
                if got is not None:
                    toks_out[pos[i]], vals_out[pos[i]] = got
                    done[pos[i]] = True
        return done

    def _top_above_floor(self, row: int, k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`top` of a row whose ``k``-th value is within a few ulps of an outside class
        maximum (typically a token a few ulps above the junk floor); None if it cannot tell.

        A token whose sharpened mass satisfies ``keep S(b) < spacing(j / V) / 4`` has
        ``keep S(b) + j / V == j / V`` exactly, hence the floor value ``F = q(mu = 0)`` bit for
        bit; ``S(b) <= S(v_c)`` up to a relative ``1e-12`` (rounding of ``log``/``exp``), so a
        class whose maximum passes that test holds only floor tokens. The other classes (the
        candidates, a few dozen) are ranked exactly; if fewer than ``k`` of their tokens are
        above ``F``, the rest are the tokens at ``F`` in id order (:meth:`_fill_ties`).
        """
        m = self._members.shape[1]
        floor = self._floor[row]
        bar = 0.25 * np.spacing(floor)
        if self._sharp[row]:
            norm_m, norm_z = self._norms()
            v = self._h[row] * self._w_max      # _class_max's floats
            with np.errstate(divide="ignore"):
                mass = np.log(v)
            mass *= self._beta[row]
            mass -= norm_m[row]
            np.exp(mass, out=mass)
            mass /= norm_z[row]
        else:
            mass = self._h[row] * self._w_max
        cls = np.flatnonzero(self._keep[row] * mass >= bar)
        if not floor > 0.0 or cls.size * m > self.shape[1] // 8:
            return None
        toks = self._members[cls].ravel()
        vals = self._from_mu_rows(self._mu(row, toks)[None, :], np.array([row]))[0]
        order = np.lexsort((toks, -vals))
        toks, vals = toks[order], vals[order]
        at_floor = self._from_mu_rows(np.zeros((1, 1)), np.array([row]))[0, 0]
        n_above = int(np.count_nonzero(vals > at_floor))
        if n_above >= k:
            return toks[:k], vals[:k]
        return self._fill_ties(row, np.append(toks[:n_above], -1),
                               np.append(vals[:n_above], at_floor), k)

    def _from_mu_rows(self, mu: np.ndarray, rows: np.ndarray, inplace: bool = True
                      ) -> np.ndarray:
        """:meth:`_from_mu` for rows ``rows`` of ``mu`` ``(n, .)`` at once (the same float ops).

        ``inplace`` (default): ``mu`` is a scratch array the caller gives up, written over.
        """
        r = mu if inplace else mu.copy()
        lo, hi, pos, beta, m, z, keep, floor = self._row_factors(rows)
        with np.errstate(divide="ignore"):
            if pos is not None:
                # Contiguous sharp rows (all of them, or every row but depth 1): a view,
                # written in place; otherwise a gathered copy, written back.
                sub = r[lo:hi] if hi - lo == pos.size else r[pos]
                np.log(sub, out=sub)
                sub *= beta
                sub -= m
                np.exp(sub, out=sub)
                sub /= z
                if hi - lo != pos.size:
                    r[pos] = sub
            r *= keep
            r += floor
            np.log(r, out=r)
        return r

    def _row_factors(self, rows: np.ndarray) -> tuple:
        """:meth:`_from_mu_rows`' per-row factors of ``rows``, as columns: ``(lo, hi, pos,
        beta_d, m_d, Z_d, 1 - j_d, j_d / V)`` (the sharpened rows' positions ``pos`` in
        ``rows``, None if none, spanning ``lo:hi``; their ``beta``, ``m``, ``Z``; every row's
        keep and floor). Cached per ``rows``: the top lists read the same rows once per
        context, a tie fill or a floor check a row again."""
        key = (rows.dtype.char, rows.tobytes())
        got = self._factors.get(key)
        if got is None:
            pos = np.flatnonzero(self._sharp[rows])
            if pos.size:
                norm_m, norm_z = self._norms()
                sel = rows[pos]
                got = (int(pos[0]), int(pos[-1]) + 1, pos, self._beta[sel][:, None],
                       norm_m[sel][:, None], norm_z[sel][:, None])
            else:
                got = (0, 0, None, None, None, None)
            got += (self._keep[rows][:, None], self._floor[rows][:, None])
            if len(self._factors) < 64:     # a context asks for a few row sets
                self._factors[key] = got
        return got

    def _dense(self) -> np.ndarray:
        out = np.empty(self.shape)
        for row in range(self.shape[0]):
            np.multiply(self._w, self._h[row][self._cls_of], out=out[row])
            self._from_mu_rows(out[row][None, :], np.array([row]))
        return out
