"""The block-diffusion-like drafter: exact per-depth marginals of its own belief process.

A DFlash-style drafter emits, in one pass, a distribution ``q_d`` for every draft position
``d = 1..L`` -- the *marginal* law of the token at depth ``d``, not a conditional one. This
module models it as a Markov belief process over the drafter's own (mismatched) sparse-boost
kernel ``Q_draft``, degraded with depth and mixed with junk:

.. math::

    Q_d &= (1 - \\eta_d)\\, Q_{\\mathrm{draft}} + \\eta_d\\, \\mathbf{1} u^\\top,
        \\qquad \\eta_d = \\mathrm{degradation} \\cdot \\frac{d - 1}{L - 1}, \\\\
    \\mu_0 &= e_{x_0}, \\qquad \\mu_d = \\mu_{d-1} Q_d, \\\\
    q_d &= (1 - j_d)\\, \\mu_d + j_d / V, \\qquad j_d = \\mathrm{junk} \\cdot d / L,

where ``u = softmax(base_draft / calibration)`` is the drafter's (topic-aware, calibrated)
background unigram -- the shared component of its kernel rows -- and ``x_0`` the last committed
token. Junk is added to the *output* only; it does not propagate (``mu_d`` uses ``mu_{d-1}``).
``eta_1 = 0``, so ``q_1 = (1 - j_1) Q_draft[x_0] + j_1 / V``. The drafter ignores the target's
sampling temperature, as DFlash does.

The optional *conditional-correction* proposal for depth ``d`` given the drafted parent token
``x_{d-1}`` interpolates between the marginal and the drafter's true conditional:

.. math::

    \\hat q_d(\\cdot \\mid x_{d-1}) = (1 - \\kappa)\\, q_d
        + \\kappa \\left[(1 - j_d)\\, Q_d[x_{d-1}] + j_d / V\\right],
    \\qquad \\kappa = \\mathrm{correction\\_quality}.

At depth 1 the parent must be ``x_0``; then ``Q_1[x_0] = mu_1`` and ``q̂_1 = q_1`` exactly for
every ``kappa`` (the first marginal already *is* the conditional).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .kernel import SparseBoostKernel

__all__ = ["BlockDiffusionDrafter"]

_KERNEL_CACHE = 64      # drafter kernels (one per topic), O(V s) floats each
_MARGINAL_CACHE = 8     # (L, V) marginal stacks; a round asks for the same context repeatedly


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
    """

    def __init__(self, background: np.ndarray, topic_term: np.ndarray, succ: np.ndarray,
                 boost: np.ndarray, *, calibration: float, depth: int, degradation: float,
                 junk: float, correction_quality: float) -> None:
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
        self.eta.flags.writeable = False
        self.junk.flags.writeable = False
        self._kernels: OrderedDict[int, SparseBoostKernel] = OrderedDict()
        self._marginals: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()

    @property
    def vocab_size(self) -> int:
        return int(self.background.shape[0])

    def kernel(self, topic: int) -> SparseBoostKernel:
        """``Q_draft`` for ``topic`` (at temperature ``calibration``), cached."""
        k = self._kernels.get(topic)
        if k is None:
            base = self.background + self.topic_term[topic]
            k = SparseBoostKernel(base, self.succ, self.boost, self.calibration, validate=False)
            self._kernels[topic] = k
            if len(self._kernels) > _KERNEL_CACHE:
                self._kernels.popitem(last=False)
        else:
            self._kernels.move_to_end(topic)
        return k

    def unigram(self, topic: int) -> np.ndarray:
        """``u``, the drafter's background unigram for ``topic``, float64 (V,)."""
        return self.kernel(topic).base_law

    def marginals(self, topic: int, last_token: int) -> np.ndarray:
        """``mu_1..mu_L`` (before junk), float64 (L, V), read-only; cached per context.

        Cost ``O(L V s)``: one CSR product and two axpys per depth.
        """
        key = (int(topic), int(last_token))
        mu = self._marginals.get(key)
        if mu is not None:
            self._marginals.move_to_end(key)
            return mu
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

    def log_marginals(self, topic: int, last_token: int) -> np.ndarray:
        """``log q_d`` for ``d = 1..L``, float64 (L, V), a fresh array.

        Entries are ``<= 0`` and finite when ``junk > 0``; exact zeros give ``-inf``.
        """
        mu = self.marginals(topic, last_token)
        q = mu * (1.0 - self.junk)[:, None]
        q += (self.junk / self.vocab_size)[:, None]
        with np.errstate(divide="ignore"):
            return np.log(q, out=q)

    def conditional(self, topic: int, last_token: int, depth: int, parent_token: int
                    ) -> np.ndarray:
        """The correction proposal ``q̂_d(. | parent_token)``, float64 (V,), sums to 1."""
        d = depth - 1
        j = self.junk[d]
        eta = self.eta[d]
        k = self.kernel(topic)
        q = self.marginals(topic, last_token)[d] * (1.0 - j) + j / self.vocab_size
        cond = k.row(parent_token)
        if eta:
            cond *= 1.0 - eta
            cond += eta * k.base_law
        cond *= 1.0 - j
        cond += j / self.vocab_size
        kappa = self.correction_quality
        return (1.0 - kappa) * q + kappa * cond
