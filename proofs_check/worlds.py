"""Small random worlds: target and drafter next-token laws after every prefix, drawn lazily.

:class:`RandomWorld` draws each prefix's rows from one shared generator when first asked (so a
world depends on the order its prefixes are visited); :class:`SeededWorld` draws each prefix's
rows from a generator of its own, seeded by the world's seed and the prefix, so the same seed is
the same world whatever is visited first (what ``proofs_check.check_verifier`` needs: every
verifier checked at a seed meets the same cases).
"""

from __future__ import annotations

import numpy as np

__all__ = ["RandomWorld", "SeededWorld", "SmallSupportWorld"]


class RandomWorld:
    """Target and draft next-token laws after every prefix, drawn lazily and cached.

    ``p ~ Dirichlet(alpha)``; ``q = (1 - mix) p + mix * Dirichlet(alpha)``, so the drafter is
    informative but wrong; with ``zeros`` some target entries are exactly 0.
    """

    def __init__(self, rng: np.random.Generator, vocab: int, alpha: float = 1.0,
                 mix: float = 0.5, zeros: bool = False):
        self.rng, self.vocab, self.alpha, self.mix, self.zeros = rng, vocab, alpha, mix, zeros
        self._p: dict[tuple[int, ...], np.ndarray] = {}
        self._q: dict[tuple[int, ...], np.ndarray] = {}

    def p(self, path: tuple[int, ...]) -> np.ndarray:
        if path not in self._p:
            row = self.rng.dirichlet(np.full(self.vocab, self.alpha))
            if self.zeros and self.vocab > 2 and self.rng.random() < 0.5:
                row[self.rng.integers(self.vocab)] = 0.0
                row = row / row.sum()
            self._p[path] = row
        return self._p[path]

    def q(self, path: tuple[int, ...]) -> np.ndarray:
        if path not in self._q:
            noise = self.rng.dirichlet(np.full(self.vocab, self.alpha))
            self._q[path] = (1 - self.mix) * self.p(path) + self.mix * noise
        return self._q[path]


class SmallSupportWorld(RandomWorld):
    """A :class:`RandomWorld` whose draft rows below the root put mass on ``support`` tokens
    only, so that deep binary shapes can be enumerated tree by tree."""

    def __init__(self, rng: np.random.Generator, vocab: int, support: int = 2, **kw):
        super().__init__(rng, vocab, **kw)
        self.support = support

    def q(self, path: tuple[int, ...]) -> np.ndarray:
        if path and path not in self._q:
            row = super().q(path).copy()
            drop = self.rng.choice(self.vocab, size=self.vocab - self.support, replace=False)
            row[drop] = 0.0
            self._q[path] = row / row.sum()
        return super().q(path)


class SeededWorld(RandomWorld):
    """A :class:`RandomWorld` whose rows after each prefix come from a generator seeded by
    ``(seed, prefix)``: a pure function of the seed and the prefix.

    Parameters
    ----------
    seed : int
        Non-negative.
    vocab, alpha, mix, zeros
        As :class:`RandomWorld`.
    """

    def __init__(self, seed: int, vocab: int, alpha: float = 1.0, mix: float = 0.5,
                 zeros: bool = False):
        if int(seed) < 0:
            raise ValueError(f"seed must be >= 0; got {seed!r}")
        super().__init__(np.random.default_rng(0), vocab, alpha=alpha, mix=mix, zeros=zeros)
        self.seed = int(seed)

    def _rng_for(self, kind: int, path: tuple[int, ...]) -> np.random.Generator:
        return np.random.default_rng([self.seed, kind, len(path), *(int(t) for t in path)])

    def p(self, path: tuple[int, ...]) -> np.ndarray:
        if path not in self._p:
            self.rng = self._rng_for(0, path)
        return super().p(path)

    def q(self, path: tuple[int, ...]) -> np.ndarray:
        if path not in self._q:
            self.p(path)
            self.rng = self._rng_for(1, path)
        return super().q(path)
