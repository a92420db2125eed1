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

UniVer (Weng, Hu & Yairi 2026) reports +4.2-8.5% acceptance length over RRSw. Gains of the UniVer
rules over Traversal on the same trees are reported too (``GainResult.gain_vs_traversal``).
Its claims: UniVer's published gain, and Traversal ≥ RRSw (``docs/theory/univer.md``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from ..engine import run_round
from ..methods import METHODS
from ..policies import k_ary_shape
from ..stats import mean_ci, paired_bootstrap, percentile_ci, world_columns
from ..validation import check_temperature
from ..verify import MATCHING_RULES
from .base import (
    Cell,
    Claim,
    ClaimedRange,
    FigureSpec,
    RunSettings,
    as_tuple,
    check_max_rounds,
    check_regimes,
    check_rounds,
    check_temperatures,
    check_worlds,
    headline,
    interval_units,
    is_trace,
    judge,
    paper_regimes,
    pick_regimes,
    second_stage,
    seconds_per_unit,
    shares,
    throughput_columns,
    unit_ci,
    world_for,
)
from .render import (
    UNIVER_PAGE,
    between_worlds,
    figure_legend,
    missing,
    notes,
    pct,
    save_figure,
    verdict_cell,
    worlds_label,
)
from .render import interval_label as render_interval

__all__ = [
    "ARMS",
    "CLAIM_RANGE",
    "GainResult",
    "TreeSpec",
    "VerifierGrid",
    "arm_lengths",
    "claims",
    "console_rows",
    "figures",
    "grid",
    "interval_label",
    "measure",
    "name",
    "parse_tree",
    "plot_verifier_gains",
    "preset",
    "preset_note",
    "run",
    "tables",
]

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


#: (label, method family, rule): every rule lossless for sampled trees drawn without replacement
#: (``sampled-tree``'s rules, read off the rule table; the first, RRSw, is the baseline), then
#: the Greedy drafts' rule. Arms of the same method share one drafted tree per round.
ARMS = (*((rule, "sampled-tree", rule) for rule in METHODS["sampled-tree"].rules),
        ("univer+greedy drafts", "greedy-tree", METHODS["greedy-tree"].rules[0]))


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
        """Nodes of the planned tree (root excluded; 0 for a recorded tree: the trace's)."""
        return k_ary_shape(self.width, self.depth).size if self.kind == "k-ary" else self.budget

    @property
    def label(self) -> str:
        if self.kind == "recorded":
            return "recorded sampled tree"
        return (f"{self.width}-ary depth {self.depth}" if self.kind == "k-ary"
                else f"Tsubame B={self.budget}")


#: The shape of a trace's recorded sampled tree (``docs/traces.md``, "The sweep on a trace").
RECORDED = "recorded"


def parse_tree(text: str) -> TreeSpec:
    """``"WxD"``, ``"tsubameB"`` or ``"recorded"`` (a trace's recorded sampled tree) as a
    :class:`TreeSpec`; ``ValueError`` naming the format."""
    t = str(text)
    if t == RECORDED:
        return TreeSpec(t, "recorded")
    if t.startswith("tsubame") and t[7:].isdigit() and int(t[7:]) >= 1:
        return TreeSpec(t, "tsubame", budget=int(t[7:]))
    parts = t.split("x")
    if len(parts) == 2 and all(p.isdigit() and int(p) >= 1 for p in parts):
        return TreeSpec(t, "k-ary", width=int(parts[0]), depth=int(parts[1]))
    raise ValueError(f"{text!r} is not a verifier tree: WIDTHxDEPTH (e.g. '2x5'), tsubameB "
                     f"(e.g. 'tsubame64') or 'recorded' (a trace's recorded sampled tree)")


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
    streams = [np.random.default_rng(s + 1) for s in seeds]  # continued by a second stage
    parts = [arm_lengths(w, tree=spec, temperature=temperature, rounds=n, rng=r)
             for w, n, r in zip(worlds, rounds, streams, strict=True)]

    def result() -> GainResult:
        return _gain_result(parts, [a for a, _, _ in ARMS], regime=regime, shape=spec.label,
                            budget=spec.nodes, temperature=temperature, seed=seeds[0],
                            boot=boot)

    res = result()
    more = second_stage(claim_judgements(res), res.rounds, max_rounds) if max_rounds else 0
    if more:
        each = math.ceil(more / len(worlds))
        parts = [np.concatenate([p, arm_lengths(w, tree=spec, temperature=temperature,
                                                rounds=each, rng=r)])
                 for p, w, r in zip(parts, worlds, streams, strict=True)]
        res = result()
    return res


def claim_judgements(res: GainResult) -> list:
    """:func:`judge` of each claim of :data:`CLAIMS` on a cell's pooled gains (percent, the
    interval widened to hold its estimate, as the claims read it)."""
    out = []
    for verifier, (_, claimed) in CLAIMS.items():
        if verifier in res.gain:
            est, lo, hi = (100 * x for x in res.gain[verifier])
            out.append(judge(est, min(lo, est), max(hi, est), claimed, units=res.rounds))
    return out


def _gain_result(parts: Sequence[np.ndarray], arm_labels: Sequence[str], *, regime: str,
                 shape: str, budget: int, temperature: float, seed: int, boot: int,
                 units: np.ndarray | None = None) -> GainResult:
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
        boot_means = paired_bootstrap(lengths, rng=np.random.default_rng(seed + 2), n_boot=boot)
    else:
        boot_means = paired_bootstrap(lengths, units=units, rng=np.random.default_rng(seed + 2),
                                      n_boot=boot)

    def gains_over(base: int, arms) -> dict[str, tuple[float, float, float]]:
        out = {}
        for j in arms:
            ratio = boot_means[:, j] / boot_means[:, base] - 1.0
            out[labels[j]] = (float(means[j] / means[base] - 1.0), *percentile_ci(ratio))
        return out

    trav = labels.index("traversal")
    cis = [mean_ci(lengths[:, j]) if units is None else unit_ci(lengths[:, j], units)
           for j in range(len(labels))]
    return GainResult(regime, shape, budget, temperature, int(lengths.shape[0]),
                      {a: float(m) for a, m in zip(labels, means, strict=True)},
                      gains_over(0, range(1, len(labels))),
                      {a: (c.low, c.high) for a, c in zip(labels, cis, strict=True)},
                      {a: tuple(float(p[:, j].mean()) for p in parts)
                       for j, a in enumerate(labels)},
                      gains_over(trav, [j for j, a in enumerate(labels)
                                        if a.startswith("univer")]))


def run(cell: Cell, settings: RunSettings) -> list[dict]:
    """Every arm of :data:`ARMS` on the same trees of every world (:func:`measure`); one row
    per arm, gains relative to RRSw (and to Traversal for the UniVer rules). On a trace, the
    recorded sampled tree of every recorded round under every rule lossless for its draws
    (:func:`measure_trace`)."""
    tree = parse_tree(cell.option)
    if is_trace(cell.regime):
        tr = settings.trace_backend(cell.regime)
        res = measure_trace(tr, regime=cell.regime, seed=settings.seed)
        sp = tr.sampled_spec
        name = f"recorded {sp['method']}[B={sp['budget']}]"
        arms = [(rule, "recorded", rule) for rule in res.mean]
        extra = {"trace_units": len({c.prompt for c in tr.contexts})}
        sizes = np.array([float(np.mean([tr.sampled_draft(c).tree.size for c in tr.contexts]))])
    else:
        parts = shares(cell, settings)
        res = measure([world_for(cell.regime, s.seed) for s in parts],
                      regime=cell.regime, tree=tree,
                      temperature=cell.temperature, rounds=[s.rounds for s in parts],
                      seeds=[s.seed for s in parts], max_rounds=cell.grid.max_rounds)
        name = (f"sampled-tree[{cell.option}]" if tree.kind == "k-ary"
                else f"tsubame-rrsw[B={tree.budget}]")
        arms = ARMS
        sizes = np.array([res.budget])
        extra = {}
    rows = []
    # every rule verifies the same tree (one size): modelled tokens/s = E[tau] / D(size)
    cost = settings.cost(settings.cost_model)
    for label, method, rule in arms:
        if label not in res.mean:           # no such arm on this tree (Greedy drafts)
            continue
        gain = res.gain.get(label, (0.0, 0.0, 0.0))
        trav = res.gain_vs_traversal.get(label)
        rows.append({
            "regime": cell.regime, "method": name + ("+greedy" if method == "greedy-tree"
                                                      else ""), "verifier": rule,
            "temperature": cell.temperature, "budget": res.budget, "rounds": res.rounds,
            "tau_mean": res.mean[label], "tau_ci_low": res.tau_ci[label][0],
            "tau_ci_high": res.tau_ci[label][1], **world_columns(res.world_means[label]),
            "tree_size_mean": float(sizes[0]),
            **throughput_columns(np.array([res.mean[label]]), sizes, cost, settings.cost_model),
            "rel_to_baseline": 1.0 + gain[0], "rel_ci_low": 1.0 + gain[1],
            "rel_ci_high": 1.0 + gain[2],
            **world_columns(res.world_ratios(label), prefix="rel"), "baseline": "rrsw",
            **({"rel_traversal": 1.0 + trav[0], "rel_traversal_ci_low": 1.0 + trav[1],
                "rel_traversal_ci_high": 1.0 + trav[2]} if trav else {}),
            **extra,
        })
    return rows


# ----------------------------------------------------------------------------------- traces
def measure_trace(tr, *, regime: str, seed: int = 0, boot: int = 2000) -> GainResult:
    """Every rule lossless for the recorded sampled tree's draws (RRSw first), on that tree of
    every recorded round of the trace ``tr`` (exact E[tau], ``sample=False``); intervals
    resample the recorded prompts (``docs/traces.md``, "The sweep on a trace")."""
    sp = tr.sampled_spec
    if sp is None:
        raise ValueError(f"the trace {regime!r} has no recorded sampled tree (record with "
                         "--sampled-tree SPEC)")
    rules = MATCHING_RULES[str(sp["scheme"])]
    t = float(sp["temperature"])
    method = tr.sampled_method
    lengths = np.empty((len(tr.contexts), len(rules)))
    rng = np.random.default_rng(seed)  # run_round's argument; sample=False draws nothing
    for i, ctx in enumerate(tr.contexts):
        rnd = run_round(tr, ctx, method=method, rule=rules[0], temperature=t, rng=rng,
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


def tables(rows: list[dict]) -> list[str]:
    """The family's section of ``summary.md``: every rule against RRSw (pooled, between
    worlds) and the UniVer rules against Traversal, each row read against the claims."""
    out = ["## UniVer's and Traversal's gain over RRSw (same sampled trees)", "",
           "UniVer reports +4.2–8.5% over RRSw. Here `univer` is the safe per-node step choice "
           "(≥ Traversal in expectation), `univer-guided` the value-guided one (no guarantee), "
           "`univer-fixed` the earlier fixed-order reconstruction (the rule for Greedy drafts); "
           "Traversal ≥ RRSw holds on balanced and deep-first shapes, not on every shape "
           "(`python -m proofs_check`). *vs RRSw*: the ratio of pooled means with the "
           f"{interval_label(rows)} (paired); *between worlds*: the mean of the "
           f"per-world gains with their 95% t-interval ({worlds_label(rows)} worlds, k − 1 degrees "
           "of freedom), then each world's gain; *vs Traversal*: a UniVer rule against "
           "Traversal on the same trees (pooled, paired bootstrap). Trees: `sampled-tree[WxD]` "
           "full W-ary trees of depth D (the UniVer paper's balanced trees), "
           "`tsubame-rrsw[B=..]` Tsubame's DDTree-shaped trees. The last column reads the "
           "pooled interval against the claims by the one verdict rule (holds: inside the "
           "claimed range; does not hold: entirely outside; undecided: across an edge): every "
           f"UniVer rule against UniVer's published +{CLAIM_RANGE[0]:g}–{CLAIM_RANGE[1]:g}%, "
           "Traversal against ≥ 0.", "",
           "| regime | T | tree | verifier | E[τ] | vs RRSw (pooled, bootstrap) | "
           "vs RRSw between worlds (t) | vs Traversal (pooled) | against the claim |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["verifier"] == "rrsw" and "greedy" not in r["method"]:
            continue
        note = verdict_cell(row_judgement(r), UNIVER_PAGE)
        trav = ("—" if missing(r.get("rel_traversal")) else
                f"{pct(float(r['rel_traversal']))} [{pct(float(r['rel_traversal_ci_low']))}, "
                f"{pct(float(r['rel_traversal_ci_high']))}]")
        out.append(f"| {r['regime']} | {r['temperature']:g} | {r['method']} | {r['verifier']} "
                   f"| {r['tau_mean']:.3f} | {pct(r['rel_to_baseline'])} "
                   f"[{pct(r['rel_ci_low'])}, {pct(r['rel_ci_high'])}] | "
                   f"{between_worlds(r, prefix='rel', pct=True)} | {trav} | {note} |")
    return [*out, *notes(out), ""]


def _tree_label(method: str) -> str:
    """``sampled-tree[2x5]`` -> ``2 wide × 5 deep``; ``tsubame-rrsw[B=64]`` -> ``Tsubame B=64``."""
    inner = method.split("[", 1)[1].split("]", 1)[0] if "[" in method else method
    if method.startswith("recorded"):
        return f"recorded {method.split()[1].split('[')[0]} {inner}"
    if method.startswith("tsubame"):
        return f"Tsubame {inner}"
    return inner.replace("x", " wide × ") + " deep"


def plot_verifier_gains(rows: list[dict], path: Path) -> None:
    """Gain in exact E[τ] over RRSw on the same sampled trees, with paired interval bars.

    One panel per regime (two columns when the panels are narrow), in it one group per (T,
    tree) and one bar per rule that the tree has (every rule of the table: Traversal and the
    three UniVer rules on the same sampled trees, and the fixed-order rule on Greedy drafts,
    hatched; Tsubame trees have no Greedy-draft arm); the band is UniVer's published gain
    (:data:`CLAIM_RANGE`). All panels share the gain axis.
    """
    import matplotlib.pyplot as plt

    sub = [r for r in rows if not (r["verifier"] == "rrsw" and "greedy" not in r["method"])]
    regimes = list(dict.fromkeys(r["regime"] for r in sub))
    groups = {reg: list(dict.fromkeys((r["temperature"], r["method"].removesuffix("+greedy"))
                                      for r in sub if r["regime"] == reg)) for reg in regimes}
    per = max(len(g) for g in groups.values())
    cols = 1 if per >= 4 or len(regimes) == 1 else 2
    nrows = -(-len(regimes) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(cols * (1.5 * per + 1.6), 2.9 * nrows + 1.2),
                             squeeze=False, sharey=True, layout="constrained")
    # every rule of the table but the baseline: the fixed-order reconstruction on the sampled
    # trees too (it can fall far behind RRSw there), and on Greedy drafts of k-ary shapes
    arms = [("traversal", False, "Traversal"), ("univer", False, "UniVer (safe)"),
            ("univer-guided", False, "UniVer (value-guided)"),
            ("univer-fixed", False, "fixed-order UniVer (same sampled trees)"),
            ("univer-fixed", True, "fixed-order UniVer on Greedy drafts")]
    width = 0.8 / len(arms)
    low, high = CLAIM_RANGE
    for ax, regime in zip(axes.flat, regimes, strict=False):
        for j, (verifier, greedy, label) in enumerate(arms):
            xs, ys, los, his = [], [], [], []
            for i, (t, method) in enumerate(groups[regime]):
                hit = [r for r in sub if (r["regime"], r["temperature"]) == (regime, t)
                       and r["method"] == method + ("+greedy" if greedy else "")
                       and r["verifier"] == verifier]
                if not hit:
                    continue
                r = hit[0]
                y = 100 * (r["rel_to_baseline"] - 1)
                xs.append(i + (j - (len(arms) - 1) / 2) * width)
                ys.append(y)
                # a percentile interval may miss its point estimate on few rounds: clip at 0
                los.append(max(0.0, y - 100 * (r["rel_ci_low"] - 1)))
                his.append(max(0.0, 100 * (r["rel_ci_high"] - 1) - y))
            if xs:
                ax.bar(xs, ys, width, yerr=[los, his], capsize=2, label=label, color=f"C{j}",
                       hatch="//" if greedy else None)
        ax.axhspan(low, high, color="gray", alpha=0.15,
                   label=f"UniVer's reported +{low:g}–{high:g}%")
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xticks(np.arange(len(groups[regime])),
                      [f"T = {t:g}\n{_tree_label(m)}" for t, m in groups[regime]], fontsize=8)
        ax.set_title(regime, fontsize=10)
        ax.set_ylabel("E[τ] gain over RRSw (%)")
        ax.grid(alpha=0.3, axis="y")
    for ax in list(axes.flat)[len(regimes):]:
        ax.axis("off")
    # Below the panels: inside, it would cover the tallest interval bars.
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure_legend(fig, handles, labels, max_cols=3,
                  title="Verifiers on the same sampled trees; bars: " + interval_label(sub)
                  + " (paired)")
    save_figure(fig, path)


def interval_label(rows: list[dict]) -> str:
    """What the family's gain intervals are (a paired bootstrap over contexts)."""
    return render_interval(rows, "percentile-bootstrap interval", VerifierGrid.unit)


#: File name -> figure.
figures = {"verifier_gains.png": FigureSpec("verifier gains over RRSw", plot_verifier_gains)}


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


def _gain(r: dict) -> tuple[float, float, float]:
    """A row's pooled gain over RRSw in percent, ``(estimate, low, high)``; a percentile
    interval may miss its point estimate on few rounds: it is widened to hold it."""
    est, lo, hi = (100 * (float(r[k]) - 1) for k in ("rel_to_baseline", "rel_ci_low",
                                                        "rel_ci_high"))
    return est, min(lo, est), max(hi, est)


def claimed_range(verifier: str) -> ClaimedRange | None:
    """What the family's claims say of ``verifier``'s gain over RRSw (every UniVer rule is
    read against UniVer's published range; None: no claim)."""
    if verifier.startswith("univer"):
        return UNIVER_CLAIMED
    return TRAVERSAL_CLAIMED if verifier == "traversal" else None


def row_judgement(r: dict):
    """:func:`judge` of a row's gain over RRSw against :func:`claimed_range` (None if no claim
    reads the row)."""
    claimed = claimed_range(r["verifier"])
    if claimed is None:
        return None
    n, what = interval_units(r)
    return judge(*_gain(r), claimed, units=n or None, unit_name=what, unit="%")


def _gains(rows: list[dict], verifier: str) -> list[Claim]:
    """Per (regime, T, tree) evidence: ``verifier``'s pooled gain over RRSw, in percent."""
    text, claimed = CLAIMS[verifier]
    out = []
    for r in rows:
        if r["verifier"] != verifier or "greedy" in r["method"]:
            continue
        n, what = interval_units(r)
        out.append(Claim.judged(text, *_gain(r), "% E[τ] over RRSw", claimed, units=n or None,
                                unit_name=what, page=UNIVER_PAGE,
                                scope=f"{r['regime']}, T = {float(r['temperature']):g}, "
                                      f"{r['method']}", family=name,
                                seconds_per_unit=seconds_per_unit(rows, r, n)))
    return out


def claims(rows: list[dict]) -> list[Claim]:
    """UniVer's (safe rule) published +4.2–8.5% over RRSw (holds where the pooled interval
    lies inside the range), and Traversal ≥ RRSw on the same trees; each over every (regime,
    T, tree) cell, by :func:`judge`."""
    low, high = CLAIM_RANGE
    out = [headline(CLAIMS["univer"][0], _gains(rows, "univer"),
                    margin=lambda c: min(c.low - low, high - c.high),
                    cells="(regime, T, tree) cells"),
           headline(CLAIMS["traversal"][0], _gains(rows, "traversal"),
                    margin=lambda c: c.low, cells="(regime, T, tree) cells")]
    return [c for c in out if c is not None]


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


def console_rows(rows: list[dict]) -> list[dict]:
    """The baseline (RRSw) and the first UniVer arm (the safe rule) of :data:`ARMS` on every
    tree."""
    shown = {ARMS[0][2], next(rule for label, _, rule in ARMS if label.startswith("univer"))}
    return [r for r in rows if r["verifier"] in shown]
