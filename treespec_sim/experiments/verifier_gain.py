r"""How much do Traversal and UniVer gain over RRSw on sampled trees of equal budget?

For each round: draw a context, fill a fixed shape by sequential sampling without replacement
from the drafter's per-depth marginals at temperature ``T`` (Gumbel-top-k), and compute the
*exact* :math:`E[\tau]` of ``rrsw``, ``traversal`` and ``univer`` on that same tree; fill the
shape again with Greedy drafts (top ``k-1`` + one sampled) and compute ``univer`` on it. Only
contexts and drafted tokens are sampled; the verifier's coins are integrated out. Gains are
ratios of means over rounds, with percentile-bootstrap 95% intervals (rounds resampled, paired;
:mod:`treespec_sim.stats`).

Each fill is one :func:`treespec_sim.engine.run_round` with method ``sampled-tree[WxD]`` or
``greedy-tree[WxD]``; this module is the ``verifiers`` family of the sweep
(``python -m treespec_sim.sweep --preset verifiers``).

UniVer (Weng, Hu & Yairi 2026) reports +4.2-8.5% acceptance length over RRSw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine import run_round
from ..policies import k_ary_shape
from ..stats import paired_bootstrap

__all__ = ["ARMS", "GainResult", "measure"]

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
    regime: str
    shape: str
    budget: int
    temperature: float
    rounds: int
    mean: dict[str, float]
    gain: dict[str, tuple[float, float, float]]  # (gain, lo, hi) relative to rrsw


def measure(world, *, regime: str, width: int, depth: int, temperature: float = 1.0,
            rounds: int = 200, seed: int = 0, boot: int = 2000) -> GainResult:
    """Exact per-round :math:`E[\tau]` of every arm on ``rounds`` contexts of ``world``.

    Contexts and draws come from ``default_rng(seed + 1)``; the bootstrap from
    ``default_rng(seed + 2)``.
    """
    if rounds < 2:
        raise ValueError(f"rounds must be >= 2; got {rounds}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for sampled trees; got {temperature}")
    rng = np.random.default_rng(seed + 1)
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
    means = lengths.mean(axis=0)
    boot_means = paired_bootstrap(lengths, rng=np.random.default_rng(seed + 2), n_boot=boot)
    gains = {}
    for j, (label, _, _) in enumerate(ARMS[1:], start=1):
        ratio = boot_means[:, j] / boot_means[:, 0] - 1.0
        gains[label] = (float(means[j] / means[0] - 1.0), float(np.quantile(ratio, 0.025)),
                        float(np.quantile(ratio, 0.975)))
    return GainResult(regime, f"{width}-ary depth {depth}", k_ary_shape(width, depth).size,
                      temperature, rounds, {a[0]: float(m) for a, m in zip(ARMS, means,
                                                                             strict=True)},
                      gains)
