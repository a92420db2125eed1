r"""How much do Traversal and UniVer gain over RRSw on sampled trees of equal budget?

For each round: draw a context, draft a tree by sampling without replacement at temperature
``T`` -- a full ``W``-ary shape filled from the drafter's per-depth marginals (``"WxD"``), or
Tsubame's ``B``-node DDTree-shaped tree (``"tsubameB"``, :class:`TreeSpec`) -- and compute the
*exact* :math:`E[\tau]` of ``rrsw``, ``traversal`` and every ``univer`` rule on that same tree;
for ``W``-ary shapes fill the shape again with Greedy drafts (top ``k-1`` + one sampled) and
compute ``univer-fixed`` on it. Only
contexts and drafted tokens are sampled; the verifier's coins are integrated out. Gains are
ratios of means over rounds, with percentile-bootstrap 95% intervals (rounds resampled, paired;
:mod:`treespec_sim.stats`). Over several worlds the rounds are pooled for those intervals, and
the per-world means give the between-world ones (:meth:`GainResult.world_ratios`).

Each fill is one :func:`treespec_sim.engine.run_round` with method ``sampled-tree[WxD]``,
``greedy-tree[WxD]`` or ``tsubame-rrsw``; this module is the ``verifiers`` family of the sweep
(``python -m treespec_sim.sweep --preset verifiers``).

UniVer (Weng, Hu & Yairi 2026) reports +4.2-8.5% acceptance length over RRSw. Gains of the UniVer
rules over Traversal on the same trees are reported too (``GainResult.gain_vs_traversal``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..engine import run_round
from ..policies import k_ary_shape
from ..stats import mean_ci, paired_bootstrap

__all__ = ["ARMS", "GainResult", "TreeSpec", "arm_lengths", "measure", "parse_tree"]

#: (label, method family, rule); the first arm is the baseline. Arms of the same method share
#: one drafted tree per round.
ARMS = (("rrsw", "sampled-tree", "rrsw"),
        ("traversal", "sampled-tree", "traversal"),
        ("univer", "sampled-tree", "univer"),
        ("univer-guided", "sampled-tree", "univer-guided"),
        ("univer-fixed", "sampled-tree", "univer-fixed"),
        ("univer+greedy drafts", "greedy-tree", "univer-fixed"))


@dataclass(frozen=True)
class TreeSpec:
    """Which trees a verifier cell drafts.

    ``"WxD"``: the full ``W``-ary tree of depth ``D`` (the UniVer paper's balanced trees, e.g.
    ``"2x5"``, binary depth 5), filled from the drafter's per-depth marginals
    (``sampled-tree[WxD]``; its Greedy-draft arm: ``greedy-tree[WxD]``). ``"tsubameB"``:
    Tsubame's ``B``-node tree (DDTree's shape on the drafter's marginals, each node's children
    drawn without replacement from the correction proposal, method ``tsubame-rrsw``): the
    deep-first, DDTree-shaped trees a tree drafter actually builds. No Greedy-draft arm there.
    """

    text: str
    kind: str            # "k-ary" or "tsubame"
    width: int = 0
    depth: int = 0
    budget: int = 0

    def method(self, family: str) -> str | None:
        """The registry method of an arm's method family (``None``: no such arm here)."""
        if self.kind == "k-ary":
            return f"{family}[{self.width}x{self.depth}]"
        return "tsubame-rrsw" if family == "sampled-tree" else None

    @property
    def nodes(self) -> int:
        """Nodes of the planned tree (root excluded)."""
        return k_ary_shape(self.width, self.depth).size if self.kind == "k-ary" else self.budget

    @property
    def label(self) -> str:
        return (f"{self.width}-ary depth {self.depth}" if self.kind == "k-ary"
                else f"Tsubame B={self.budget}")


def parse_tree(text: str) -> TreeSpec:
    """``"WxD"`` or ``"tsubameB"`` as a :class:`TreeSpec`; ``ValueError`` naming the format."""
    t = str(text)
    if t.startswith("tsubame") and t[7:].isdigit() and int(t[7:]) >= 1:
        return TreeSpec(t, "tsubame", budget=int(t[7:]))
    parts = t.split("x")
    if len(parts) == 2 and all(p.isdigit() and int(p) >= 1 for p in parts):
        return TreeSpec(t, "k-ary", width=int(parts[0]), depth=int(parts[1]))
    raise ValueError(f"{text!r} is not a verifier tree: WIDTHxDEPTH (e.g. '2x5') or tsubameB "
                     f"(e.g. 'tsubame64')")


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
    gain_vs_traversal : dict
        The same relative to ``traversal``, for every UniVer arm.
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
    gain_vs_traversal: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    def world_ratios(self, label: str) -> tuple[float, ...]:
        """Each world's ratio of ``label``'s mean to the baseline's (``rrsw``) mean."""
        base = self.world_means[ARMS[0][0]]
        return tuple(a / b for a, b in zip(self.world_means[label], base, strict=True))


def arm_lengths(world, *, tree: TreeSpec, temperature: float, rounds: int,
                rng: np.random.Generator) -> np.ndarray:
    r"""Exact per-round :math:`E[\tau]` of every arm on ``rounds`` fresh contexts of ``world``.

    Returns
    -------
    ndarray (rounds, len(ARMS))
        Contexts and drafted tokens draw from ``rng``, in round order; NaN in the columns of
        arms the tree spec has no method for.
    """
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1; got {rounds!r}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for sampled trees; got {temperature}")
    lengths = np.full((rounds, len(ARMS)), np.nan)
    budget = tree.budget if tree.kind == "tsubame" else None
    for i in range(rounds):
        ctx = world.sample_context(rng)
        drafted = {}
        for j, (_, family, rule) in enumerate(ARMS):
            method = tree.method(family)
            if method is None:
                continue
            if method not in drafted:
                drafted[method] = run_round(world, ctx, method=method, budget=budget,
                                            rule=rule, temperature=temperature, rng=rng,
                                            sample=False)
            lengths[i, j] = drafted[method].expected_tau_under(rule)
    return lengths


def measure(worlds: Sequence, *, regime: str, tree: str | TreeSpec, rounds: Sequence[int],
            seeds: Sequence[int], temperature: float = 1.0, boot: int = 2000) -> GainResult:
    """Every arm on ``rounds[i]`` contexts of ``worlds[i]``, pooled over the worlds.

    ``tree`` is a :class:`TreeSpec` or its text (``"2x5"``, ``"tsubame64"``); arms without a
    method for it (the Greedy-draft arm on Tsubame trees) are left out of the result.

    World ``i``'s contexts and draws come from ``default_rng(seeds[i] + 1)`` (so a world is
    the same as a one-world measurement with its seed); the bootstrap, over the pooled
    contexts, from ``default_rng(seeds[0] + 2)``.
    """
    if not (len(worlds) == len(rounds) == len(seeds) >= 1):
        raise ValueError(f"worlds, rounds and seeds must have the same length >= 1; got "
                         f"{len(worlds)}, {len(rounds)}, {len(seeds)}")
    if sum(rounds) < 2:
        raise ValueError(f"rounds must add up to >= 2; got {list(rounds)}")
    spec = tree if isinstance(tree, TreeSpec) else parse_tree(tree)
    parts = [arm_lengths(w, tree=spec, temperature=temperature, rounds=n,
                         rng=np.random.default_rng(s + 1))
             for w, n, s in zip(worlds, rounds, seeds, strict=True)]
    lengths = np.concatenate(parts)
    keep = [j for j in range(len(ARMS)) if not np.isnan(lengths[:, j]).any()]
    labels = [ARMS[j][0] for j in keep]
    lengths = lengths[:, keep]
    parts = [p[:, keep] for p in parts]
    means = lengths.mean(axis=0)
    boot_means = paired_bootstrap(lengths, rng=np.random.default_rng(seeds[0] + 2), n_boot=boot)

    def gains_over(base: int, arms) -> dict[str, tuple[float, float, float]]:
        out = {}
        for j in arms:
            ratio = boot_means[:, j] / boot_means[:, base] - 1.0
            out[labels[j]] = (float(means[j] / means[base] - 1.0),
                              float(np.quantile(ratio, 0.025)), float(np.quantile(ratio, 0.975)))
        return out

    trav = labels.index("traversal")
    cis = [mean_ci(lengths[:, j]) for j in range(len(labels))]
    return GainResult(regime, spec.label, spec.nodes, temperature, int(lengths.shape[0]),
                      {a: float(m) for a, m in zip(labels, means, strict=True)},
                      gains_over(0, range(1, len(labels))),
                      {a: (c.low, c.high) for a, c in zip(labels, cis, strict=True)},
                      {a: tuple(float(p[:, j].mean()) for p in parts)
                       for j, a in enumerate(labels)},
                      gains_over(trav, [j for j, a in enumerate(labels)
                                        if a.startswith("univer")]))
