r"""How much do Traversal and UniVer gain over RRSw on sampled trees of equal budget?

For each round: draw a context, fill a fixed shape by sequential sampling without replacement
from the drafter's per-depth marginals at temperature ``T`` (Gumbel-top-k), and compute the
*exact* :math:`E[\tau]` of ``rrsw``, ``traversal`` and ``univer`` on that same tree; fill the
shape again with Greedy drafts (top ``k-1`` + one sampled) and compute ``univer`` on it. Only
contexts and drafted tokens are sampled; the verifier's coins are integrated out. Gains are
ratios of means over rounds, with percentile-bootstrap 95% intervals (rounds resampled, paired;
:mod:`treespec_sim.stats`). Over several worlds the rounds are pooled for those intervals, and
the per-world means give the between-world ones (:meth:`GainResult.world_ratios`).

Each fill is one :func:`treespec_sim.engine.run_round` with method ``sampled-tree[WxD]`` or
``greedy-tree[WxD]``; this module is the ``verifiers`` family of the sweep
(``python -m treespec_sim.sweep --preset verifiers``).

UniVer (Weng, Hu & Yairi 2026) reports +4.2-8.5% acceptance length over RRSw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..engine import run_round
from ..policies import k_ary_shape
from ..stats import mean_ci, paired_bootstrap

__all__ = ["ARMS", "GainResult", "arm_lengths", "measure"]

#: (label, method family, rule); the first arm is the baseline. Arms of the same method share
#: one drafted tree per round.
ARMS = (("rrsw", "sampled-tree", "rrsw"),
        ("traversal", "sampled-tree", "traversal"),
        ("univer", "sampled-tree", "univer"),
        ("univer-guided", "sampled-tree", "univer-guided"),
        ("univer-fixed", "sampled-tree", "univer-fixed"),
        ("univer+greedy drafts", "greedy-tree", "univer-fixed"))


@dataclass(frozen=True)
class GainResult:
    """Every arm's exact E[tau] on the same trees, pooled over worlds and per world.

    Attributes
    ----------
    mean, tau_ci : dict
        Per arm label: the mean over every context of every world and its t-interval over
        those contexts (pooled).
    gain : dict
        Per arm but the baseline: ``(gain, lo, hi)`` relative to ``rrsw``, the ratio of pooled
        means minus 1 with its paired percentile-bootstrap interval (contexts resampled).
    world_means : dict
        Per arm label: the mean of each world, in world order.
    """

    regime: str
    shape: str
    budget: int
    temperature: float
    rounds: int
    mean: dict[str, float]
    gain: dict[str, tuple[float, float, float]]  # (gain, lo, hi) relative to rrsw
    tau_ci: dict[str, tuple[float, float]] = field(default_factory=dict)
    world_means: dict[str, tuple[float, ...]] = field(default_factory=dict)

    def world_ratios(self, label: str) -> tuple[float, ...]:
        """Each world's ratio of ``label``'s mean to the baseline's (``rrsw``) mean."""
        base = self.world_means[ARMS[0][0]]
        return tuple(a / b for a, b in zip(self.world_means[label], base, strict=True))


def arm_lengths(world, *, width: int, depth: int, temperature: float, rounds: int,
                rng: np.random.Generator) -> np.ndarray:
    r"""Exact per-round :math:`E[\tau]` of every arm on ``rounds`` fresh contexts of ``world``.

    Returns
    -------
    ndarray (rounds, len(ARMS))
        Contexts and drafted tokens draw from ``rng``, in round order.
    """
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1; got {rounds!r}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for sampled trees; got {temperature}")
    lengths = np.zeros((rounds, len(ARMS)))
    shape = f"[{width}x{depth}]"
    for i in range(rounds):
        ctx = world.sample_context(rng)
        drafted = {}
        for j, (_, method, rule) in enumerate(ARMS):
            if method not in drafted:
                drafted[method] = run_round(world, ctx, method=method + shape, rule=rule,
                                            temperature=temperature, rng=rng, sample=False)
            lengths[i, j] = drafted[method].expected_tau_under(rule)
    return lengths


def measure(worlds: Sequence, *, regime: str, width: int, depth: int, rounds: Sequence[int],
            seeds: Sequence[int], temperature: float = 1.0, boot: int = 2000) -> GainResult:
    """Every arm on ``rounds[i]`` contexts of ``worlds[i]``, pooled over the worlds.

    World ``i``'s contexts and draws come from ``default_rng(seeds[i] + 1)`` (so a world is
    the same as a one-world measurement with its seed); the bootstrap, over the pooled
    contexts, from ``default_rng(seeds[0] + 2)``.
    """
    if not (len(worlds) == len(rounds) == len(seeds) >= 1):
        raise ValueError(f"worlds, rounds and seeds must have the same length >= 1; got "
                         f"{len(worlds)}, {len(rounds)}, {len(seeds)}")
    if sum(rounds) < 2:
        raise ValueError(f"rounds must add up to >= 2; got {list(rounds)}")
    parts = [arm_lengths(w, width=width, depth=depth, temperature=temperature, rounds=n,
                         rng=np.random.default_rng(s + 1))
             for w, n, s in zip(worlds, rounds, seeds, strict=True)]
    lengths = np.concatenate(parts)
    means = lengths.mean(axis=0)
    boot_means = paired_bootstrap(lengths, rng=np.random.default_rng(seeds[0] + 2), n_boot=boot)
    gains = {}
    for j, (label, _, _) in enumerate(ARMS[1:], start=1):
        ratio = boot_means[:, j] / boot_means[:, 0] - 1.0
        gains[label] = (float(means[j] / means[0] - 1.0), float(np.quantile(ratio, 0.025)),
                        float(np.quantile(ratio, 0.975)))
    labels = [a[0] for a in ARMS]
    cis = [mean_ci(lengths[:, j]) for j in range(len(ARMS))]
    return GainResult(regime, f"{width}-ary depth {depth}", k_ary_shape(width, depth).size,
                      temperature, int(lengths.shape[0]),
                      {a: float(m) for a, m in zip(labels, means, strict=True)}, gains,
                      {a: (c.low, c.high) for a, c in zip(labels, cis, strict=True)},
                      {a: tuple(float(p[:, j].mean()) for p in parts)
                       for j, a in enumerate(labels)})
