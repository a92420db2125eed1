r"""The ``verifiers`` family: how much do Traversal and UniVer gain over RRSw on the same trees?

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
``greedy-tree[WxD]`` or ``tsubame-rrsw`` (``python -m treespec_sim.sweep --preset verifiers``).

The trees an engine's DDTree port verifies (``"ddtreeB"``, ``"chain"``; ``--preset
verifiers-engines``) add the engines' rules: DDTree's own deterministic tree under every rule
for deterministic trees, lossless (``follow``, ``tev``, SGLang's ``sample-match``) and lossy
(SGLang's thresholds below 1, the sibling-order ratio rule: apparent E[τ] and first-token
bias, never in a claim), DDTree's shape filled by draws, and the drafter's chain under
token-wise RRS and block verification. The arms of every tree are read off the rule table
(:func:`arms_for`).

UniVer (Weng, Hu & Yairi 2026) reports +4.2-8.5% acceptance length over RRSw. Gains of the UniVer
rules over Traversal on the same trees are reported too (``GainResult.gain_vs_traversal``).
Its claims: UniVer's published gain, and Traversal ≥ RRSw (``docs/theory/univer.md``): stated
here (a cell's second stage decides them, :data:`CLAIMS`), read off its rows
(:class:`VerifierRow`) by :mod:`.verifiers_report`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

import numpy as np

from ..engine import run_round
from ..methods import METHODS, get_method, lossless_rules, rules_for
from ..policies import k_ary_shape
from ..seeds import cell_rng
from ..stats import mean_ci, paired_bootstrap, percentile_ci, world_columns
from ..validation import check_positive_int, check_temperature
from ..verify import SCHEME_FOR_RULE, lossy_rules
from .base import (
    Cell,
    ClaimedRange,
    Row,
    RunSettings,
    as_tuple,
    check_max_rounds,
    check_regimes,
    check_rounds,
    check_temperatures,
    check_worlds,
    is_trace,
    judge,
    paper_regimes,
    pick_regimes,
    second_stage,
    shares,
    throughput_columns,
    unit_ci,
    world_for,
)

__all__ = ["ARMS", "CLAIMS", "CLAIM_RANGE", "ENGINE_SHAPES", "RECORDED", "SIDE_STREAM",
           "TRAVERSAL_CLAIMED", "UNIVER_CLAIMED", "Arm", "GainResult", "TreeSpec", "VerifierGrid",
           "VerifierRow", "arm_facts", "arm_lengths", "arms_for", "check_trace",
           "claim_judgements", "engines_preset", "grid", "measure", "measure_trace", "name",
           "parse_tree", "preset", "preset_note", "presets", "row", "run", "trace_preset"]

#: The family's name (its ``[verifiers]`` table in a config, the rows' ``family``).
name = "verifiers"
#: What ``--preset verifiers`` runs.
preset_note = "RRSw vs Traversal vs UniVer on sampled k-ary trees at T = 1"
#: UniVer's published gain in acceptance length over RRSw, percent (Weng, Hu & Yairi 2026).
CLAIM_RANGE = (4.2, 8.5)

@dataclass(frozen=True)
class VerifierGrid:
    """RRSw vs Traversal vs UniVer on the same sampled trees at ``T > 0``.

    ``shapes``: ``"WxD"`` (full ``W``-ary trees of depth ``D``, e.g. ``"2x5"``: binary depth 5,
    as in the UniVer paper) or ``"tsubameB"`` (Tsubame's ``B``-node DDTree-shaped trees); see
    :func:`treespec_sim.experiments.parse_tree`.
    """

    family: ClassVar[str] = "verifiers"
    #: The lists each cell takes one value of (a resumed run may gain values of these).
    cell_axes: ClassVar[tuple[str, ...]] = ("regimes", "temperatures", "shapes")
    #: What one of ``rounds`` is (the unit behind the intervals: see :mod:`treespec_sim.stats`).
    unit: ClassVar[str] = "contexts"
    regimes: tuple[str, ...]
    shapes: tuple[str, ...] = ("2x4", "3x3")
    temperatures: tuple[float, ...] = (1.0,)
    rounds: int = 48
    #: Worlds per regime (seeds ``seed + i``; :func:`world_shares`).
    worlds: int = 3
    #: Cap on a cell's contexts for deciding its claims (``0``: exactly ``rounds``). With a
    #: cap, ``rounds`` is the pilot and one second stage adds what deciding the cell's
    #: undecided claims takes, where that fits under the cap (:func:`measure`).
    max_rounds: int = 0

    def __post_init__(self) -> None:
        for name, cast in (("regimes", str), ("shapes", str), ("temperatures", check_temperature)):
            object.__setattr__(self, name, as_tuple(getattr(self, name), cast,
                                                    f"{self.family}.{name}"))
        check_regimes(self.regimes, self.family)
        check_temperatures(self.temperatures, self.family, positive=True)
        check_rounds(self.rounds, self.family)
        check_worlds(self.worlds, self.rounds, self.family)
        check_max_rounds(self.max_rounds, self.rounds, self.family)
        for s in self.shapes:
            try:
                parse_tree(s)
            except ValueError as exc:
                raise ValueError(f"verifiers.shapes: {exc}") from None
        traces = any(is_trace(r) for r in self.regimes)
        if RECORDED in self.shapes and not traces:
            raise ValueError(f"verifiers.shapes: {RECORDED!r} is a trace's recorded sampled "
                             "tree; it needs a trace among the regimes (--trace FILE)")
        if traces and RECORDED not in self.shapes:
            raise ValueError(f"verifiers.shapes: a trace replays only its recorded sampled tree "
                             f"(a fresh draw is not recorded); add {RECORDED!r} to the shapes")
        if traces and all(is_trace(r) for r in self.regimes) and set(self.shapes) != {RECORDED}:
            other = [x for x in self.shapes if x != RECORDED]
            raise ValueError(f"verifiers.shapes: {', '.join(map(repr, other))} draw fresh "
                             "sampled trees, which a trace cannot replay; on a trace use "
                             f"{RECORDED!r} (its recorded sampled tree)")

    def cells(self) -> list[Cell]:
        """One cell per (regime, T, shape); a trace only with its recorded tree, a synthetic
        regime only with drawn shapes."""
        out = []
        for r in self.regimes:
            for t in self.temperatures:
                for s in self.shapes:
                    if (s == RECORDED) == is_trace(r):
                        out.append(Cell(self, r, t, parse_tree(s).nodes, s))
        return out


#: The family's grid class (the registry's ``grid``).
grid = VerifierGrid


@dataclass(frozen=True, kw_only=True)
class VerifierRow(Row):
    """One arm (a rule on the tree a method drafts) of a verifiers cell, on the same trees as
    the cell's other arms: exact E[τ] (apparent for a lossy rule: ``lossless`` False, its
    first-token bias in ``first_token_tv*``), modelled throughput, the ratio to the cell's
    baseline arm (RRSw; RRS on chains) pooled (``rel_*``, a paired bootstrap) and between
    worlds (``rel_world_*``), and for the UniVer rules to Traversal (``rel_traversal*``);
    ``trace_units``: a trace's recorded prompts, the units of its intervals."""

    family: str = "verifiers"
    regime: str
    method: str
    verifier: str
    temperature: float
    budget: int
    cost_model: str | None = None
    rounds: int
    seed: int | None = None
    tau_mean: float
    tau_ci_low: float
    tau_ci_high: float
    worlds: int | None = None
    tau_world_means: list[float] | None = None
    tau_world_ci_low: float | None = None
    tau_world_ci_high: float | None = None
    tree_size_mean: float | None = None
    round_time_s: float | None = None
    throughput_tok_s: float | None = None
    speedup_vs_ar: float | None = None
    rel_to_baseline: float | None = None
    rel_ci_low: float | None = None
    rel_ci_high: float | None = None
    rel_world_means: list[float] | None = None
    rel_world_ci_low: float | None = None
    rel_world_ci_high: float | None = None
    baseline: str | None = None
    rel_traversal: float | None = None
    rel_traversal_ci_low: float | None = None
    rel_traversal_ci_high: float | None = None
    lossless: bool | None = None
    first_token_tv: float | None = None
    first_token_tv_ci_low: float | None = None
    first_token_tv_ci_high: float | None = None
    wall_s: float | None = None
    trace_units: int | None = None
    cell: str | None = None
    extrapolated: list[dict] | None = None


#: The family's row schema (the registry's ``row``).
row = VerifierRow


#: (label, method family, rule): every rule lossless for sampled trees drawn without replacement
#: (``sampled-tree``'s rules, read off the rule table; the first, RRSw, is the baseline), then
#: the Greedy drafts' rule. Arms of the same method share one drafted tree per round. (The arms
#: of every kind of tree, read off the table when a cell runs: :func:`arms_for`.)
ARMS = (*((rule, "sampled-tree", rule) for rule in METHODS["sampled-tree"].rules),
        ("univer+greedy drafts", "greedy-tree", METHODS["greedy-tree"].rules[0]))


class Arm(NamedTuple):
    """One verifier arm of a cell: a rule on the tree a method drafts.

    ``label`` is unique in the cell; ``lossless`` False marks a lossy rule of the table
    (``VerifierRule.lossless``): its E[τ] is apparent and its bias is measured
    (:meth:`treespec_sim.engine.Round.lossy_facts`), and it is never in a claim.
    """

    label: str
    method: str
    rule: str
    lossless: bool = True


@dataclass(frozen=True)
class TreeSpec:
    """Which trees a verifier cell drafts.

    ``"WxD"``: the full ``W``-ary tree of depth ``D`` (the UniVer paper's balanced trees, e.g.
    ``"2x5"``, binary depth 5), filled from the drafter's per-depth marginals
    (``sampled-tree[WxD]``; its Greedy-draft arm: ``greedy-tree[WxD]``). ``"tsubameB"``:
    Tsubame's ``B``-node tree (DDTree's shape on the drafter's marginals, each node's children
    drawn without replacement from the correction proposal, method ``tsubame-rrsw``; its
    i.i.d. fill ``tsubame-rrs`` for RRS): the deep-first, DDTree-shaped trees a tree drafter
    actually builds. No Greedy-draft arm there. ``"ddtreeB"``: what a DDTree port verifies at
    ``T > 0`` -- DDTree's own deterministic ``B``-node tree with every rule for deterministic
    trees, lossless (``follow``, ``tev``, SGLang's ``sample-match``) and lossy (SGLang's
    thresholds below 1, the sibling-order ratio rule), and DDTree's shape filled by draws
    (``sampled-ddtree``) with every rule for sampled trees (RRS on the i.i.d. fill, RRSw,
    Traversal, UniVer on the fill without replacement). ``"chain"``: the drafter's chain of
    ``L`` tokens -- drawn, each given the sampled parent (``sampled-chain-corrected``), with
    token-wise RRS and block verification (what vLLM ships), and the argmax chain with the
    deterministic rules.
    """

    text: str
    kind: str            # "k-ary", "tsubame", "ddtree", "chain" or "recorded"
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
        """Nodes of the planned tree (root excluded; 0 for a recorded tree or a chain: the
        trace's, the drafter's depth)."""
        return k_ary_shape(self.width, self.depth).size if self.kind == "k-ary" else self.budget

    @property
    def label(self) -> str:
        if self.kind == "recorded":
            return "recorded sampled tree"
        if self.kind == "chain":
            return "chain"
        return (f"{self.width}-ary depth {self.depth}" if self.kind == "k-ary"
                else f"Tsubame B={self.budget}" if self.kind == "tsubame"
                else f"DDTree B={self.budget}")


def arms_for(tree: TreeSpec) -> tuple[Arm, ...]:
    """The arms of a cell, read off the rule table and the method registry (so a rule added
    with ``register_rule`` -- after ``proofs_check.register_checked_rule`` -- is an arm of
    every tree whose methods list it); the first arm is the baseline (RRSw; on a chain,
    token-wise RRS)."""
    if tree.kind == "k-ary":
        return (*(Arm(rule, "sampled-tree", rule) for rule in METHODS["sampled-tree"].rules),
                Arm("univer+greedy drafts", "greedy-tree", METHODS["greedy-tree"].rules[0]))
    if tree.kind == "tsubame":
        return (*(Arm(rule, "tsubame-rrsw", rule) for rule in METHODS["tsubame-rrsw"].rules),
                *(Arm(rule, "tsubame-rrs", rule) for rule in METHODS["tsubame-rrs"].rules))
    if tree.kind == "ddtree":
        sampled = METHODS["sampled-ddtree"].rules  # rrsw first: the baseline
        det = (*(Arm(f"{rule} (DDTree tree)", "ddtree", rule) for rule in METHODS["ddtree"].rules),
               *(Arm(f"{rule} (DDTree tree)", "ddtree", rule, False)
                 for rule in lossy_rules("deterministic")))
        return (*(Arm(rule, "sampled-ddtree", rule) for rule in sampled), *det)
    if tree.kind == "chain":
        drawn = METHODS["sampled-chain-corrected"].rules  # rrs first: the baseline
        return (*(Arm(rule, "sampled-chain-corrected", rule) for rule in drawn),
                *(Arm(f"{rule} (argmax chain)", "chain", rule) for rule in METHODS["chain"].rules),
                *(Arm(f"{rule} (argmax chain)", "chain", rule, False)
                  for rule in lossy_rules("deterministic")))
    raise ValueError(f"no arms for a {tree.kind!r} tree")


#: The shape of a trace's recorded sampled tree (``docs/traces.md``, "The sweep on a trace").
RECORDED = "recorded"


def parse_tree(text: str) -> TreeSpec:
    """``"WxD"``, ``"tsubameB"``, ``"ddtreeB"``, ``"chain"`` or ``"recorded"`` (a trace's
    recorded sampled tree) as a :class:`TreeSpec`; ``ValueError`` naming the format."""
    t = str(text)
    if t == RECORDED:
        return TreeSpec(t, "recorded")
    if t.startswith("tsubame") and t[7:].isdigit() and int(t[7:]) >= 1:
        return TreeSpec(t, "tsubame", budget=int(t[7:]))
    if t.startswith("ddtree") and t[6:].isdigit() and int(t[6:]) >= 1:
        return TreeSpec(t, "ddtree", budget=int(t[6:]))
    if t == "chain":
        return TreeSpec(t, "chain")
    parts = t.split("x")
    if len(parts) == 2 and all(p.isdigit() and int(p) >= 1 for p in parts):
        return TreeSpec(t, "k-ary", width=int(parts[0]), depth=int(parts[1]))
    raise ValueError(f"{text!r} is not a verifier tree: WIDTHxDEPTH (e.g. '2x5'), tsubameB "
                     f"(e.g. 'tsubame64'), ddtreeB (e.g. 'ddtree64'), 'chain' or 'recorded' (a "
                     f"trace's recorded sampled tree)")


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
    baseline : str
        The arm the gains are relative to (``rrsw``; on a chain, ``rrs``).
    bias : dict
        Per lossy arm: ``(mean, lo, hi)`` of the round's first-token total-variation distance
        from the target (:meth:`~treespec_sim.engine.Round.lossy_facts`), t-interval over
        contexts.
    lossless : dict
        Per arm label: whether its rule is lossless.
    """

    regime: str
    shape: str
    budget: int
    temperature: float
    rounds: int
    mean: dict[str, float]
    gain: dict[str, tuple[float, float, float]]  # (gain, lo, hi) relative to the baseline
    tau_ci: dict[str, tuple[float, float]] = field(default_factory=dict)
    world_means: dict[str, tuple[float, ...]] = field(default_factory=dict)
    gain_vs_traversal: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    baseline: str = "rrsw"
    bias: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    lossless: dict[str, bool] = field(default_factory=dict)

    def world_ratios(self, label: str) -> tuple[float, ...]:
        """Each world's ratio of ``label``'s mean to the baseline's mean."""
        base = self.world_means[self.baseline]
        return tuple(a / b for a, b in zip(self.world_means[label], base, strict=True))


def _method_of(tree: TreeSpec, arm: Arm) -> str:
    """The registry name an arm's tree is drafted with (``sampled-tree[2x4]``, ...)."""
    return f"{arm.method}[{tree.width}x{tree.depth}]" if tree.kind == "k-ary" else arm.method


#: Methods whose trees draw from a child stream of a cell's generator (``rng.spawn``), not
#: the generator itself: arms added to a kind of tree that had results before them.
SIDE_STREAM = ("tsubame-rrs",)


def arm_facts(world, *, tree: TreeSpec, temperature: float, rounds: int,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Per-round exact :math:`E[\tau]`, first-token bias and tree size of every arm of
    :func:`arms_for` on ``rounds`` fresh contexts of ``world``.

    Arms of one method share one drafted tree per round (a rule-driven fill, one per drawing
    scheme; the methods of :data:`SIDE_STREAM` draw from a child stream of ``rng``); a lossy
    arm is measured on the tree its method drafts for its first lossless rule
    (:meth:`~treespec_sim.engine.Round.lossy_facts`: apparent E[τ], first-token TV).

    Returns
    -------
    lengths, bias, sizes : ndarray (rounds, len(arms)) each
        Contexts and drafted tokens draw from ``rng``, in round order; bias 0 for lossless arms.
    """
    check_positive_int(rounds, "rounds")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for sampled trees; got {temperature}")
    arms = arms_for(tree)
    lengths = np.full((rounds, len(arms)), np.nan)
    bias = np.zeros((rounds, len(arms)))
    sizes = np.zeros((rounds, len(arms)))
    budget = tree.budget if tree.kind in ("tsubame", "ddtree") else None
    # Tsubame's i.i.d. fill draws from a stream of its own, so that adding its arm left the
    # contexts and trees of the other arms (and their numbers) as they were
    side = rng.spawn(1)[0]
    for i in range(rounds):
        ctx = world.sample_context(rng)
        drafted = {}
        for j, arm in enumerate(arms):
            method = _method_of(tree, arm)
            rule = arm.rule if arm.lossless else lossless_rules(method, temperature)[0]
            # one tree per drawing scheme: a by-rule method draws by its rule's scheme, any
            # other draws one tree for all its rules (block shares RRS's chain: paired)
            scheme = get_method(method)[0].scheme
            key = (method, SCHEME_FOR_RULE[rule] if scheme == "by-rule" else scheme)
            if key not in drafted:
                draws = side if method in SIDE_STREAM else rng
                drafted[key] = run_round(world, ctx, method=method, budget=budget, rule=rule,
                                         temperature=temperature, rng=draws, sample=False)
            rnd = drafted[key]
            sizes[i, j] = rnd.tree.size
            if arm.lossless:
                lengths[i, j] = rnd.expected_tau_under(arm.rule)
            else:
                facts = rnd.lossy_facts(arm.rule)
                lengths[i, j], bias[i, j] = facts.tau, facts.first_token_tv
    return lengths, bias, sizes


def arm_lengths(world, *, tree: TreeSpec, temperature: float, rounds: int,
                rng: np.random.Generator) -> np.ndarray:
    r"""Exact per-round :math:`E[\tau]` of every arm (:func:`arm_facts`' first array).

    Returns
    -------
    ndarray (rounds, len(arms_for(tree)))
    """
    return arm_facts(world, tree=tree, temperature=temperature, rounds=rounds, rng=rng)[0]


def measure(worlds: Sequence, *, regime: str, tree: str | TreeSpec, rounds: Sequence[int],
            seeds: Sequence[int], temperature: float = 1.0, boot: int = 2000,
            max_rounds: int = 0) -> GainResult:
    """Every arm on ``rounds[i]`` contexts of ``worlds[i]``, pooled over the worlds.

    ``tree`` is a :class:`TreeSpec` or its text (``"2x5"``, ``"tsubame64"``); arms without a
    method for it (the Greedy-draft arm on Tsubame trees) are left out of the result.

    World ``i``'s contexts and draws come from ``default_rng(seeds[i] + 1)`` (so a world is
    the same as a one-world measurement with its seed); the bootstrap, over the pooled
    contexts, from ``default_rng(seeds[0] + 2)``.

    With ``max_rounds`` (``0``: the ``rounds`` alone) the ``rounds`` are a pilot: where it
    leaves the family's claims (:data:`CLAIMS`) undecided, one second stage adds contexts to
    every world (its streams continued, the same number each) up to what deciding them takes,
    at most ``max_rounds`` in all (:func:`~treespec_sim.verdicts.second_stage`); the
    result is over every context.
    """
    if not (len(worlds) == len(rounds) == len(seeds) >= 1):
        raise ValueError(f"worlds, rounds and seeds must have the same length >= 1; got "
                         f"{len(worlds)}, {len(rounds)}, {len(seeds)}")
    if sum(rounds) < 2:
        raise ValueError(f"rounds must add up to >= 2; got {list(rounds)}")
    spec = tree if isinstance(tree, TreeSpec) else parse_tree(tree)
    arms = arms_for(spec)
    streams = [cell_rng(s + 1) for s in seeds]  # continued by a second stage
    facts = [arm_facts(w, tree=spec, temperature=temperature, rounds=n, rng=r)
             for w, n, r in zip(worlds, rounds, streams, strict=True)]

    def result() -> GainResult:
        bias = np.concatenate([f[1] for f in facts])
        sizes = np.concatenate([f[2] for f in facts])
        return _gain_result([f[0] for f in facts], [a.label for a in arms], regime=regime,
                            shape=spec.label, budget=round(float(sizes.mean())),
                            temperature=temperature, seed=seeds[0], boot=boot,
                            bias={a.label: bias[:, j] for j, a in enumerate(arms)
                                  if not a.lossless},
                            lossless={a.label: a.lossless for a in arms})

    res = result()
    more = second_stage(claim_judgements(res), res.rounds, max_rounds) if max_rounds else 0
    if more:
        each = math.ceil(more / len(worlds))
        facts = [tuple(np.concatenate([old, new]) for old, new in
                       zip(f, arm_facts(w, tree=spec, temperature=temperature, rounds=each,
                                        rng=r), strict=True))
                 for f, w, r in zip(facts, worlds, streams, strict=True)]
        res = result()
    return res


def claim_judgements(res: GainResult) -> list:
    """:func:`judge` of each claim of :data:`CLAIMS` on a cell's pooled gains (percent, the
    interval widened to hold its estimate, as the claims read it)."""
    out = []
    for verifier, (_, claimed) in CLAIMS.items():
        if verifier in res.gain and res.lossless.get(verifier, True):
            est, lo, hi = (100 * x for x in res.gain[verifier])
            out.append(judge(est, min(lo, est), max(hi, est), claimed, units=res.rounds))
    return out


def _gain_result(parts: Sequence[np.ndarray], arm_labels: Sequence[str], *, regime: str,
                 shape: str, budget: int, temperature: float, seed: int, boot: int,
                 units: np.ndarray | None = None,
                 bias: dict[str, np.ndarray] | None = None,
                 lossless: dict[str, bool] | None = None) -> GainResult:
    """A :class:`GainResult` from per-world ``(rounds, arms)`` lengths (NaN columns: arms the
    tree has no method for); ``units`` (one label per pooled round, a trace's prompts) are the
    units the intervals resample (None: every round is one)."""
    lengths = np.concatenate(parts)
    keep = [j for j in range(len(arm_labels)) if not np.isnan(lengths[:, j]).any()]
    labels = [arm_labels[j] for j in keep]
    lengths = lengths[:, keep]
    parts = [p[:, keep] for p in parts]
    means = lengths.mean(axis=0)
    if units is None:
        boot_means = paired_bootstrap(lengths, rng=cell_rng(seed + 2), n_boot=boot)
    else:
        boot_means = paired_bootstrap(lengths, units=units, rng=cell_rng(seed + 2),
                                      n_boot=boot)

    def gains_over(base: int, arms) -> dict[str, tuple[float, float, float]]:
        out = {}
        for j in arms:
            ratio = boot_means[:, j] / boot_means[:, base] - 1.0
            out[labels[j]] = (float(means[j] / means[base] - 1.0), *percentile_ci(ratio))
        return out

    cis = [mean_ci(lengths[:, j]) if units is None else unit_ci(lengths[:, j], units)
           for j in range(len(labels))]
    vs_trav = ({} if "traversal" not in labels else
               gains_over(labels.index("traversal"),
                          [j for j, a in enumerate(labels) if a.startswith("univer")]))
    biases = {}
    for a, b in (bias or {}).items():
        ci = mean_ci(b)
        biases[a] = (ci.mean, ci.low, ci.high)
    return GainResult(regime, shape, budget, temperature, int(lengths.shape[0]),
                      {a: float(m) for a, m in zip(labels, means, strict=True)},
                      gains_over(0, range(1, len(labels))),
                      {a: (c.low, c.high) for a, c in zip(labels, cis, strict=True)},
                      {a: tuple(float(p[:, j].mean()) for p in parts)
                       for j, a in enumerate(labels)},
                      vs_trav, labels[0], biases,
                      {a: (lossless or {}).get(a, True) for a in labels})


def run(cell: Cell, settings: RunSettings) -> list[VerifierRow]:
    """Every arm of :func:`arms_for` on the same trees of every world (:func:`measure`); one
    row per arm, gains relative to the tree's baseline (RRSw; RRS on chains), and to Traversal
    for the UniVer rules; lossy arms with their first-token bias. On a trace, the
    recorded sampled tree of every recorded round under every rule lossless for its draws
    (:func:`measure_trace`)."""
    tree = parse_tree(cell.option)
    if is_trace(cell.regime):
        tr = settings.trace_backend(cell.regime)
        res = measure_trace(tr, regime=cell.regime, seed=settings.seed)
        sp = tr.sampled_spec
        name = f"recorded {sp['method']}[B={sp['budget']}]"
        arms = [Arm(rule, "recorded", rule) for rule in res.mean]
        names = dict.fromkeys(res.mean, name)
        extra = {"trace_units": len({c.prompt for c in tr.contexts})}
        sizes = np.array([float(np.mean([tr.recorded_draft(c).tree.size for c in tr.contexts]))])
    else:
        parts = shares(cell, settings)
        res = measure([world_for(cell.regime, s.seed) for s in parts],
                      regime=cell.regime, tree=tree,
                      temperature=cell.temperature, rounds=[s.rounds for s in parts],
                      seeds=[s.seed for s in parts], max_rounds=cell.grid.max_rounds)
        arms = arms_for(tree)
        names = {a.label: _row_method(tree, a) for a in arms}
        sizes = np.array([res.budget])
        extra = {}
    rows = []
    # every rule verifies a tree of one size: modelled tokens/s = E[tau] / D(size)
    cost = settings.cost(settings.cost_model)
    for label, _method, rule, lossless in arms:
        if label not in res.mean:           # no such arm on this tree (Greedy drafts)
            continue
        gain = res.gain.get(label, (0.0, 0.0, 0.0))
        trav = res.gain_vs_traversal.get(label)
        bias = res.bias.get(label, (0.0, 0.0, 0.0))
        rows.append(VerifierRow(**{
            "regime": cell.regime, "method": names[label], "verifier": rule,
            "lossless": bool(lossless), "first_token_tv": bias[0],
            "first_token_tv_ci_low": bias[1], "first_token_tv_ci_high": bias[2],
            "temperature": cell.temperature, "budget": res.budget, "rounds": res.rounds,
            "tau_mean": res.mean[label], "tau_ci_low": res.tau_ci[label][0],
            "tau_ci_high": res.tau_ci[label][1], **world_columns(res.world_means[label]),
            "tree_size_mean": float(sizes[0]),
            **throughput_columns(np.array([res.mean[label]]), sizes, cost, settings.cost_model),
            "rel_to_baseline": 1.0 + gain[0], "rel_ci_low": 1.0 + gain[1],
            "rel_ci_high": 1.0 + gain[2],
            **world_columns(res.world_ratios(label), prefix="rel"), "baseline": res.baseline,
            **({"rel_traversal": 1.0 + trav[0], "rel_traversal_ci_low": 1.0 + trav[1],
                "rel_traversal_ci_high": 1.0 + trav[2]} if trav else {}),
            **extra,
        }))
    return rows


def _row_method(tree: TreeSpec, arm: Arm) -> str:
    """A row's ``method``: ``sampled-tree[2x5]`` (``+greedy`` for the Greedy-draft arm),
    ``tsubame-rrsw[B=64]``, ``ddtree[B=64]``, ``sampled-chain-corrected``, ..."""
    if tree.kind == "k-ary":
        return f"sampled-tree[{tree.text}]" + ("+greedy" if arm.method == "greedy-tree" else "")
    if tree.kind in ("tsubame", "ddtree"):
        return f"{arm.method}[B={tree.budget}]"
    return arm.method


# ----------------------------------------------------------------------------------- traces
def measure_trace(tr, *, regime: str, seed: int = 0, boot: int = 2000) -> GainResult:
    """Every rule lossless for the recorded sampled tree's draws (RRSw first), on that tree of
    every recorded round of the trace ``tr`` (exact E[tau], ``sample=False``); intervals
    resample the recorded prompts (``docs/traces.md``, "The sweep on a trace")."""
    sp = tr.sampled_spec
    if sp is None:
        raise ValueError(f"the trace {regime!r} has no recorded sampled tree (record with "
                         "--sampled-tree SPEC)")
    rules = rules_for(str(sp["scheme"]))  # the recorded tree branches: no chain-only rule
    t = float(sp["temperature"])
    lengths = np.empty((len(tr.contexts), len(rules)))
    rng = cell_rng(seed)  # run_round's argument; sample=False draws nothing
    for i, ctx in enumerate(tr.contexts):
        rnd = run_round(tr, ctx, method="recorded", rule=rules[0], temperature=t, rng=rng,
                        sample=False)
        lengths[i] = [rnd.expected_tau_under(r) for r in rules]
    units = np.array([c.prompt for c in tr.contexts])
    return _gain_result([lengths], list(rules), regime=regime, shape=RECORDED,
                        budget=int(sp["budget"]), temperature=t, seed=seed, boot=boot,
                        units=units)


def check_trace(g: VerifierGrid, tr, regime: str) -> None:
    """Refuse, naming the key, a trace without a recorded sampled tree or a temperature other
    than the one its sampled tree was recorded at."""
    sp = tr.sampled_spec
    if sp is None:
        raise ValueError(f"{name}: the trace {regime!r} has no recorded sampled tree (record "
                         "with --sampled-tree SPEC), so the verifiers cannot run on it")
    other = [t for t in g.temperatures if float(t) != float(sp["temperature"])]
    if other:
        raise ValueError(f"{name}.temperatures: T = {', '.join(f'{t:g}' for t in other)} not "
                         f"recorded for the trace {regime!r}'s sampled tree (recorded at "
                         f"T = {float(sp['temperature']):g} only)")


def trace_preset(tr, regime: str) -> VerifierGrid | None:
    """The family's grid for ``--trace FILE``: the recorded sampled tree at its temperature
    (None if the trace has none)."""
    sp = tr.sampled_spec
    if sp is None:
        return None
    return VerifierGrid((regime,), shapes=(RECORDED,), temperatures=(float(sp["temperature"]),),
                        rounds=max(2, len(tr)), worlds=1)


# ----------------------------------------------------------------------------------- claims
#: UniVer's published range (percent over RRSw) and Traversal >= RRSw, as claimed ranges.
UNIVER_CLAIMED = ClaimedRange(*CLAIM_RANGE)
TRAVERSAL_CLAIMED = ClaimedRange(0.0)
#: The claims of the family: verifier -> (statement, claimed range of its % gain over RRSw).
CLAIMS = {
    "univer": (f"UniVer gains +{CLAIM_RANGE[0]:g}–{CLAIM_RANGE[1]:g}% E[τ] over RRSw (Weng, Hu & "
               "Yairi 2026)", UNIVER_CLAIMED),
    "traversal": ("Traversal ≥ RRSw on the same sampled trees", TRAVERSAL_CLAIMED),
}


def preset(which: str) -> VerifierGrid | None:
    """The family's grid in sweep preset ``which`` (``"paper"``, ``"quick"``,
    ``"verifiers"``)."""
    regimes = paper_regimes()
    if which == "paper":
        # UniVer where its paper measured it (balanced binary depth 5) and on the trees a
        # tree drafter builds (Tsubame at B = 64), at T = 0.6 and 1
        # a pilot of 36 contexts, then one second stage where deciding a claim takes more,
        # up to 300 (sized for `make sweep` near 5 minutes on 2 workers)
        return VerifierGrid(pick_regimes(regimes, ("math500", "mt-bench", "alpaca")),
                            shapes=("2x5", "tsubame64"), temperatures=(0.6, 1.0), rounds=36,
                            worlds=3, max_rounds=300)
    if which == "quick":
        return VerifierGrid(("small",), shapes=("2x2", "tsubame8"), rounds=9, worlds=3)
    if which == name:
        return VerifierGrid(regimes, shapes=("2x4", "3x3"), rounds=100)
    return None


#: The trees a DDTree port at ``T > 0`` chooses between, on every calibrated regime.
ENGINE_SHAPES = ("ddtree64", "tsubame64", "chain")


def engines_preset() -> VerifierGrid:
    """``--preset verifiers-engines``: every rule, the engines' included, on DDTree, Tsubame
    and chain trees of every calibrated regime at ``T = 1``."""
    return VerifierGrid(paper_regimes(), shapes=ENGINE_SHAPES, temperatures=(1.0,), rounds=300,
                        worlds=3)


#: The further presets of the family (``python -m treespec_sim.sweep --preset NAME``).
presets = {"verifiers-engines": ("which rule a DDTree port should use at T = 1: every rule "
                                 "(the engines' lossy ones measured) on DDTree, Tsubame and "
                                 "chain trees, every calibrated regime", engines_preset)}


