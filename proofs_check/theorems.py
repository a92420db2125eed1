r"""Every theorem of the verification theory as a named, executable check.

A check draws random instances (seeded), computes the quantity the theorem is about *exactly*
(enumeration, closed forms, LPs) and reports the worst violation. ``python -m proofs_check``
runs them all (:mod:`proofs_check.__main__`).

Three kinds of rows:

``theorem``
    must hold; ``passed`` iff the worst violation is within the tolerance.
``caught[...]``
    a known-buggy variant; the "violation" is the largest losslessness gap found, and
    ``passed`` iff it *exceeds* the tolerance (the check can fail, and did).
``witness``
    an existence statement ("an instance exists where ..."): a search; the value is the size of
    the effect in the instance found, and ``passed`` iff it exceeds the tolerance.
``claim``
    a published claim about a *reconstructed* method, measured rather than proven; ``passed``
    reports whether it held on every instance. A claim that does not hold is reported, not
    hidden, and does not make the run fail.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from treespec_sim import DraftTree
from treespec_sim.exits import coverage
from treespec_sim.rows import ArrayOracle
from treespec_sim.verify import MATCHING_RULES, RULES, SCHEME_FOR_RULE, expected_length
from treespec_sim.verify.block import block_round_law
from treespec_sim.verify.traversal import emission_weights, opportunities, traversal_round_law
from treespec_sim.verify.univer import (
    CHOOSERS,
    COIN,
    NodeView,
    enumerated_accepts,
    two_child_accepts,
)

from . import budget, ot, tsubame
from .buggy import BUGGY_VARIANTS, reference_rrs_law
from .enumerate import ROUND_LAWS, extend_law, max_law_gap
from .sampled import mean_length, round_law, target_law_from, two_level_shape
from .switch import oracle_chooser, oracle_value, rule_value
from .tree_lp import (
    TwoLevelWorld,
    conditional_ot_value,
    decomposed_optimum,
    global_optimum,
    set_law,
)
from .worlds import RandomWorld, SmallSupportWorld

__all__ = ["CHECKS", "Check", "CheckResult", "run_checks"]

#: Exact float64 enumeration: laws agree to rounding.
EXACT_TOL = 1e-9
#: Anything compared with an LP optimum (HiGHS feasibility ~1e-7).
LP_TOL = ot.LP_TOL
#: A buggy variant counts as caught when its law is off by more than this.
CAUGHT_TOL = 1e-6


@dataclass(frozen=True)
class CheckResult:
    """One row of the table."""

    theorem: str
    kind: str
    instances: int
    max_violation: float
    tolerance: float
    passed: bool
    seconds: float


@dataclass(frozen=True)
class Check:
    """A named check: ``run(rng, size) -> (instances, worst violation)``."""

    theorem: str
    kind: str
    tolerance: float
    statement: str
    run: Callable[[np.random.Generator, int], tuple[int, float]]

    def __call__(self, seed: int, size: int) -> CheckResult:
        start = time.perf_counter()
        n, worst = self.run(np.random.default_rng(seed), size)
        exceed = self.kind in ("caught", "witness")
        passed = bool(worst > self.tolerance if exceed else worst <= self.tolerance)
        return CheckResult(self.theorem, self.kind, n, float(worst), self.tolerance, passed,
                           time.perf_counter() - start)


def _shape(parent: list[int]) -> DraftTree:
    return DraftTree.from_parents_multiset(parent, [-1] + [0] * (len(parent) - 1))


#: Shapes the sampled-tree checks fill (tokens are placeholders).
SHAPES = {
    "one level, k=2": _shape([-1, 0, 0]),
    "one level, k=3": _shape([-1, 0, 0, 0]),
    "chain of 3": _shape([-1, 0, 1, 2]),
    "2 x 2": two_level_shape(2, 2),
    "deep-first": _shape([-1, 0, 0, 1, 3]),
    "deep-second": _shape([-1, 0, 0, 2, 3]),
    "link + deep-second": _shape([-1, 0, 1, 1, 3, 4]),
    "three children, middle deep": _shape([-1, 0, 0, 0, 2]),
}
#: Balanced binary tree of depth 3 (14 nodes): enumerated on :class:`SmallSupportWorld`.
BINARY_3 = _shape([-1, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6])
#: A DDTree-like shape: the deepest subtree under the first-drawn child.
DDTREE_LIKE = _shape([-1, 0, 0, 0, 1, 1, 4, 2])
#: Shape families the claims are stated for (checked on exactly these shapes).
FAMILIES = {
    "balanced": {k: SHAPES[k] for k in ("one level, k=2", "one level, k=3", "chain of 3",
                                        "2 x 2")} | {"binary depth 3": BINARY_3},
    "deep-first": {"deep-first": SHAPES["deep-first"], "ddtree-like": DDTREE_LIKE},
    "deep-second": {k: SHAPES[k] for k in ("deep-second", "link + deep-second")},
}
#: The rules of the step family on sequential draws without replacement (those with a step
#: chooser in the verifier, in its rule table's order).
STEP_RULES = tuple(CHOOSERS)


def _lossless_gap(world: RandomWorld, shape: DraftTree, scheme: str, law_fn) -> float:
    law = round_law(shape, world.p, world.q, scheme=scheme, law_fn=law_fn)
    n_tokens = int(shape.depth.max()) + 1
    return max_law_gap(extend_law(law, world.p, n_tokens),
                       target_law_from(world.p, n_tokens, world.vocab))


def _package(rule: str):
    law = RULES[rule].round_law
    return lambda tree, rows, prop: law(tree, ArrayOracle(rows, tree), prop)


#: Chains (one child per node) for the chain-only rule and variants (block verification).
CHAIN_SHAPES = {f"chain of {g}": _shape(list(range(-1, g))) for g in (1, 2, 3, 4)}


def _sampled_lossless(rule: str, scheme: str, vocab: int = 3, shapes=None):
    shapes = SHAPES if shapes is None else shapes

    def run(rng: np.random.Generator, size: int) -> tuple[int, float]:
        n, worst = 0, 0.0
        for _ in range(size):
            for shape in shapes.values():
                world = RandomWorld(rng, vocab, alpha=float(rng.choice([0.3, 1.0, 3.0])),
                                    zeros=bool(rng.random() < 0.3))
                worst = max(worst, _lossless_gap(world, shape, scheme, _package(rule)))
                n += 1
        return n, worst
    return run


def _caught(name: str, vocab: int = 3):
    variant = BUGGY_VARIANTS[name]

    def run(rng: np.random.Generator, size: int) -> tuple[int, float]:
        n, worst = 0, 0.0
        # chains are cheap and a chain port's mistakes subtle: more instances, poorer drafters
        shapes = CHAIN_SHAPES if variant.chains_only else SHAPES
        repeats = max(1, size // 2) * (5 if variant.chains_only else 1)
        for _ in range(repeats):
            for shape in shapes.values():
                if variant.scheme in ("tempered", "post_hoc", "top_k") and shape.size == 0:
                    continue
                world = RandomWorld(rng, vocab, alpha=1.0,
                                    mix=0.9 if variant.chains_only else 0.5)
                worst = max(worst, _lossless_gap(world, shape, variant.scheme, variant.law))
                n += 1
        return n, worst
    return run


def _deterministic_trees(rng: np.random.Generator, size: int, vocab: int = 3):
    """Random deterministic trees (distinct sibling tokens) with a world for their rows."""
    for _ in range(size):
        n = int(rng.integers(1, 7))
        parent, token = [-1], [-1]
        kids: dict[int, set[int]] = {0: set()}
        for v in range(1, n + 1):
            for _ in range(20):
                a = int(rng.integers(0, v))
                free = [x for x in range(vocab) if x not in kids[a]]
                if free:
                    break
            x = int(rng.choice(free))
            kids[a].add(x)
            kids[v] = set()
            parent.append(a)
            token.append(x)
        tree = DraftTree.from_parents(parent, token)
        world = RandomWorld(rng, vocab, alpha=float(rng.choice([0.3, 1.0])), zeros=True)
        rows = np.array([world.p(path) for path in [(), *tree.paths()]])
        yield tree, rows, world


def _deterministic_lossless(law_name: str):
    law_fn = ROUND_LAWS[law_name]

    def run(rng, size):
        n, worst = 0, 0.0
        for tree, rows, world in _deterministic_trees(rng, 4 * size):
            n_tokens = int(tree.depth.max()) + 1
            got = extend_law(law_fn(tree, rows), world.p, n_tokens)
            worst = max(worst, max_law_gap(got, target_law_from(world.p, n_tokens, 3)))
            n += 1
        return n, worst
    return run


def _coverage_bound(rng, size):
    """max over trees and rules of E[tau] - (1 + C_p): must be <= 0 (and is 0: saturated)."""
    n, worst = 0, 0.0
    for tree, rows, _ in _deterministic_trees(rng, 6 * size):
        bound = 1.0 + coverage(tree, rows)
        for rule in MATCHING_RULES["deterministic"]:
            worst = max(worst, expected_length(tree, rows, rule=rule) - bound)
        n += 1
    return n, worst


def _ot_instances(rng, size, vocab=4):
    for _ in range(3 * size):
        p = rng.dirichlet(np.full(vocab, float(rng.choice([0.3, 1.0]))))
        q = 0.5 * p + 0.5 * rng.dirichlet(np.ones(vocab))
        yield p, q, int(rng.integers(1, 4))


def _rrs_chain(rng, size):
    n, worst = 0, 0.0
    for p, q, k in _ot_instances(rng, size):
        rrs = ot.rrs_acceptance(p, q, k)
        iid = ot.optimal_acceptance(p, q, k, replacement=True)
        wo = ot.optimal_acceptance(p, q, k, replacement=False)
        worst = max(worst, rrs - iid, iid - wo)
        n += 1
    return n, worst


def _rrsw_le_opt(rng, size):
    n, worst = 0, 0.0
    for p, q, k in _ot_instances(rng, size):
        worst = max(worst, ot.rrsw_acceptance(p, q, k)
                    - ot.optimal_acceptance(p, q, k, replacement=False))
        n += 1
    return n, worst


def _k1_tv(rng, size):
    n, worst = 0, 0.0
    for p, q, _ in _ot_instances(rng, size):
        tv = 1.0 - 0.5 * float(np.abs(p - q).sum())
        for repl in (True, False):
            worst = max(worst, abs(ot.optimal_acceptance(p, q, 1, replacement=repl) - tv))
        n += 1
    return n, worst


def _lp_min_cut(rng, size):
    n, worst = 0, 0.0
    for p, q, k in _ot_instances(rng, size):
        for repl in (True, False):
            worst = max(worst, abs(ot.optimal_acceptance(p, q, k, replacement=repl)
                                   - ot.optimal_acceptance_subsets(p, q, k, replacement=repl)))
        n += 1
    return n, worst


def _reference_agrees(rng, size):
    """The package's RRS/RRSw laws equal an independent implementation on every filled tree."""
    n, worst = 0, 0.0
    for _ in range(size):
        for shape in SHAPES.values():
            world = RandomWorld(rng, 3)
            for scheme, rule, wo in (("iid", "rrs", False),
                                     ("without_replacement", "rrsw", True)):
                a = round_law(shape, world.p, world.q, scheme=scheme, law_fn=_package(rule))
                b = round_law(shape, world.p, world.q, scheme=scheme,
                              law_fn=lambda t, r, q, wo=wo: reference_rrs_law(
                                  t, r, q, without_replacement=wo))
                worst = max(worst, max_law_gap(a, b))
                n += 1
    return n, worst


def _chains_are_block(rng, size):
    """Traversal (and UniVer) on a fixed chain emit exactly block verification's law."""
    n, worst = 0, 0.0
    vocab = 4
    for _ in range(20 * size):
        gamma = int(rng.integers(1, 5))
        target = rng.dirichlet(np.full(vocab, 0.5), size=gamma + 1)
        drafts = rng.dirichlet(np.full(vocab, 0.5), size=gamma)
        x = [int(rng.choice(vocab, p=drafts[i])) for i in range(gamma)]
        tree = DraftTree.from_parents(list(range(-1, gamma)), [-1, *x])
        prop = np.vstack([drafts, np.full((1, vocab), np.nan)])
        ref = block_round_law(x, target, drafts)
        for step in STEP_RULES:
            got = RULES[step].round_law(tree, ArrayOracle(target, tree), prop)
            worst = max(worst, max_law_gap(got, ref))
        n += 1
    return n, worst


def _one_level_is_rrsw(rng, size):
    """Traversal on a one-level tree emits exactly RRSw's law (fixed drafted tokens)."""
    n, worst = 0, 0.0
    vocab = 5
    for _ in range(20 * size):
        k = int(rng.integers(1, 5))
        p = rng.dirichlet(np.ones(vocab))
        q = rng.dirichlet(np.ones(vocab))
        x = [int(t) for t in rng.choice(vocab, size=k, replace=False, p=q)]
        tree = DraftTree.from_parents([-1] + [0] * k, [-1, *x])
        rows = np.vstack([p] + [np.full(vocab, 1.0 / vocab)] * k)
        prop = np.vstack([q] * (k + 1))
        a = RULES["traversal"].round_law(tree, ArrayOracle(rows, tree), prop)
        b = RULES["rrsw"].round_law(tree, ArrayOracle(rows, tree), prop)
        worst = max(worst, max_law_gap(a, b))
        n += 1
    return n, worst


def univer_local_value(mu: np.ndarray, q: np.ndarray, tokens: list[int],
                       values: np.ndarray) -> float:
    """UniVer's value at one node with leaf children: sum of accepted mass times value.

    Runs the package's recursion on a two-step tree (root -> a -> children of a) whose root
    row puts mass ``s = sum(mu)`` on ``a``'s token, so ``a`` is visited with scale ``s``; the
    accepted mass of child ``c`` is the chance of its emission opportunity times its reach.
    """
    vocab = mu.size
    s = float(mu.sum())
    k = len(tokens)
    tree = DraftTree.from_parents([-1, 0] + [1] * k, [-1, 0, *tokens])
    root_row = np.zeros(vocab)
    root_row[0] = s
    root_row[1:] = (1.0 - s) / (vocab - 1)
    rows = np.vstack([root_row, mu / s] + [np.full(vocab, 1.0 / vocab)] * k)
    prop = np.vstack([np.eye(vocab)[0], q] + [np.full(vocab, np.nan)] * k)

    opps = opportunities(tree, ArrayOracle(rows, tree), prop, step="univer-fixed")
    return sum(w * values[tokens[v - 2]] for v, w, _ in emission_weights(opps) if v >= 2)


def _univer_local_optimal(rng, size):
    """At a node with scale s, UniVer's plan attains the conditional OT optimum given the
    earlier draws, for random non-negative values (so for every value vector)."""
    n, worst = 0, 0.0
    vocab = 5
    for _ in range(4 * size):
        k = int(rng.integers(1, 4))
        s = float(rng.uniform(0.2, 1.0))
        mu = s * rng.dirichlet(np.ones(vocab))
        q = rng.dirichlet(np.ones(vocab))
        held = [int(t) for t in rng.choice(vocab, size=k - 1, replace=False, p=q)]
        rest = q.copy()
        rest[held] = 0.0
        rest /= rest.sum()
        law = {frozenset([*held, int(j)]): float(rest[j]) for j in np.flatnonzero(rest > 0)}
        values = rng.uniform(0.0, 3.0, size=vocab)
        lp = conditional_ot_value(mu, law, values)
        # UniVer's value is an expectation over the last draw j
        got = sum(float(rest[j]) * univer_local_value(mu, q, [*held, int(j)], values)
                  for j in np.flatnonzero(rest > 0))
        worst = max(worst, abs(got - lp))
        n += 1
    return n, worst


def _two_level_worlds(rng, size, vocab=4):
    for _ in range(size):
        alpha = float(rng.choice([0.5, 1.0, 2.0]))
        w = RandomWorld(rng, vocab, alpha=alpha)
        p2 = np.array([w.p((y,)) for y in range(vocab)])
        q2 = np.array([w.q((y,)) for y in range(vocab)])
        yield w, p2, q2


def _le_global_optimum(rng, size):
    """Every lossless rule, on its drafting scheme, is <= (c1) for that scheme; (c2) <= (c1)."""
    n, worst = 0, 0.0
    shape = two_level_shape(2, 2)
    for w, p2, q2 in _two_level_worlds(rng, size):
        for scheme in ("without_replacement", "greedy"):
            rules = [r for r in MATCHING_RULES[scheme] if not RULES[r].chains_only]
            world = TwoLevelWorld(w.p(()), w.q(()), p2, q2, 2, 2, scheme)
            c1 = global_optimum(world)
            worst = max(worst, decomposed_optimum(world) - c1)
            for rule in rules:  # the step rules node by node (= the package: node_values)
                got = (rule_value(shape, w, CHOOSERS[rule]) if rule in STEP_RULES
                       and scheme == "without_replacement" else
                       mean_length(shape, w.p, w.q, scheme=scheme, rule=rule))
                worst = max(worst, got - c1)
        n += 1
    return n, worst


def _rrsw_le_c2(rng, size):
    n, worst = 0, 0.0
    shape = two_level_shape(2, 2)
    for w, p2, q2 in _two_level_worlds(rng, size):
        world = TwoLevelWorld(w.p(()), w.q(()), p2, q2, 2, 2, "without_replacement")
        worst = max(worst, mean_length(shape, w.p, w.q, scheme="without_replacement",
                                       rule="rrsw") - decomposed_optimum(world))
        n += 1
    return n, worst


def _greedy_is_set_optimal(rng, size):
    """One level, Greedy drafts: UniVer's acceptance equals alpha* of the Greedy set law."""
    n, worst = 0, 0.0
    shape_by_k = {k: DraftTree.from_parents_multiset([-1] + [0] * k, [-1] + [0] * k)
                  for k in (1, 2, 3)}
    for p, q, k in _ot_instances(rng, size, vocab=5):
        lp = conditional_ot_value(p, set_law(q, k, "greedy"), np.ones(p.size))
        got = mean_length(shape_by_k[k], lambda path, p=p: p, lambda path, q=q: q,
                          scheme="greedy", rule="univer-fixed") - 1.0
        worst = max(worst, abs(got - lp))
        n += 1
    return n, worst


# ----------------------------------------------------------------- UniVer's step choice
def _fixed_step(step: str):
    """A chooser that always takes ``step`` where it is defined (traversal elsewhere)."""
    inner = step[len(COIN):] if step.startswith(COIN) else step

    def choose(view: NodeView) -> str:
        ok = inner in ("traversal", "conditional") or view.n_children == 2
        return step if ok else "traversal"
    return choose


#: Every step of the family as a fixed rule (coin variants included).
ALL_STEPS = ("traversal", "conditional", "reverse", "condrev",
             *(COIN + st for st in ("traversal", "conditional", "reverse", "condrev")))


def _chooser_law(chooser):
    """Exact round law of the scaled recursion with ``chooser`` (input checks bypassed)."""
    return lambda tree, rows, prop: traversal_round_law(tree, ArrayOracle(rows, tree), prop,
                                                        step=chooser)


def _world(rng: np.random.Generator, vocab: int) -> RandomWorld:
    """Sharp to flat targets, drafters half-right (mix 0.5) or poor (mix 0.9), some zeros."""
    return RandomWorld(rng, vocab, alpha=float(rng.choice([0.1, 0.3, 1.0, 3.0])),
                       mix=float(rng.choice([0.5, 0.9])), zeros=bool(rng.random() < 0.3))


def _every_step_lossless(rng, size):
    """Every fixed step (and coin variant) is lossless on every shape in SHAPES."""
    n, worst = 0, 0.0
    for _ in range(max(1, size // 5)):
        for shape in SHAPES.values():
            world = _world(rng, 3)
            for step in ALL_STEPS:
                worst = max(worst, _lossless_gap(world, shape, "without_replacement",
                                                 _chooser_law(_fixed_step(step))))
                n += 1
    return n, worst


def _binary3_lossless(rng, size):
    """Every rule of the step family, binary tree of depth 3 (draft rows below the root on
    two tokens, so its 6 * 2^6 filled trees can be enumerated)."""
    n, worst = 0, 0.0
    for _ in range(max(1, size // 5)):
        world = SmallSupportWorld(rng, 3, support=2, alpha=float(rng.choice([0.3, 1.0])),
                                  zeros=True)
        for rule in STEP_RULES:
            worst = max(worst, _lossless_gap(world, BINARY_3, "without_replacement",
                                             _package(rule)))
            n += 1
    return n, worst


def _all_shapes() -> dict[str, DraftTree]:
    return SHAPES | {"binary depth 3": BINARY_3, "ddtree-like": DDTREE_LIKE}


def _safe_ge_traversal(rng, size):
    """max over worlds and shapes of E[tau](traversal) - E[tau](univer): <= 0."""
    n, worst = 0, 0.0
    for _ in range(size):
        for shape in _all_shapes().values():
            world = _world(rng, 3 if shape.size > 8 else int(rng.choice([3, 4])))
            worst = max(worst, rule_value(shape, world, CHOOSERS["traversal"])
                        - rule_value(shape, world, CHOOSERS["univer"]))
            n += 1
    return n, worst


def _closed_form_k2(rng, size):
    """k = 2, leaf children: the O(V log V) closed forms equal enumeration over the draws."""
    n, worst = 0, 0.0
    for _ in range(20 * size):
        vocab = int(rng.integers(2, 7))
        q = rng.dirichlet(np.full(vocab, float(rng.choice([0.2, 1.0]))))
        if vocab > 2 and rng.random() < 0.3:
            q[rng.integers(vocab)] = 0.0
            q /= q.sum()
        if np.count_nonzero(q) < 2:  # two draws without replacement need two tokens
            continue
        s = 1.0 if rng.random() < 0.3 else float(rng.uniform(0.05, 1.0))
        mu = s * rng.dirichlet(np.full(vocab, float(rng.choice([0.2, 1.0]))))
        for step in ("traversal", "conditional", "reverse", "condrev"):
            worst = max(worst, float(np.abs(two_child_accepts(mu, q, step)
                                            - enumerated_accepts(mu, q, 2, step)).max()))
        n += 1
    return n, worst


def _values_equal_package(rng, size):
    """The node-by-node value recursion (proofs_check.switch) equals the package's exact
    E[tau] averaged over every filled tree, for every rule and the exact switch."""
    n, worst = 0, 0.0
    for _ in range(max(1, size // 5)):
        for shape in SHAPES.values():
            world = _world(rng, 3)
            for rule in STEP_RULES:
                worst = max(worst, abs(rule_value(shape, world, CHOOSERS[rule])
                                       - mean_length(shape, world.p, world.q,
                                                     scheme="without_replacement", rule=rule)))
            oracle = _chooser_law(oracle_chooser(shape, world))
            law = round_law(shape, world.p, world.q, scheme="without_replacement",
                            law_fn=oracle)
            got = sum(len(k) * v for k, v in law.items())
            worst = max(worst, abs(got - oracle_value(shape, world)))
            n += 1
    return n, worst


def _coin_traversal_is_rrsw(rng, size):
    """``coin+traversal`` at every node emits exactly RRSw's law (fixed drafted tokens)."""
    n, worst = 0, 0.0
    rrsw = _package("rrsw")
    coin = _chooser_law(_fixed_step(COIN + "traversal"))
    for _ in range(size):
        for shape in SHAPES.values():
            world = _world(rng, 3)
            a = round_law(shape, world.p, world.q, scheme="without_replacement", law_fn=rrsw)
            b = round_law(shape, world.p, world.q, scheme="without_replacement", law_fn=coin)
            worst = max(worst, max_law_gap(a, b))
            n += 1
    return n, worst


def _rules_le_switch(rng, size):
    """Every realizable rule (and RRSw) <= the exact switch (the family's ceiling)."""
    n, worst = 0, 0.0
    rules = {**{r: CHOOSERS[r] for r in STEP_RULES}, "rrsw": _fixed_step(COIN + "traversal")}
    for _ in range(max(1, size // 2)):
        for shape in SHAPES.values():
            world = _world(rng, 3)
            ceiling = oracle_value(shape, world)
            worst = max(worst, max(rule_value(shape, world, c) for c in rules.values())
                        - ceiling)
            n += 1
    return n, worst


def _traversal_below_rrsw(rng, size):
    """Search: a world where Traversal < RRSw on root -> link -> {leaf, chain of 2}."""
    n, best = 0, 0.0
    shape = SHAPES["link + deep-second"]
    for _ in range(max(100, 3 * size)):  # stops at the first clear instance
        world = _world(rng, 3)
        best = max(best, mean_length(shape, world.p, world.q, scheme="without_replacement",
                                     rule="rrsw")
                   - mean_length(shape, world.p, world.q, scheme="without_replacement",
                                 rule="traversal"))
        n += 1
        if best > 0.01:
            break
    return n, best


def _guided_below_traversal(rng, size):
    """Search: a world where univer-guided < Traversal in E[tau] on the 2 x 2 shape."""
    n, best = 0, 0.0
    shape = SHAPES["2 x 2"]
    for _ in range(max(400, 20 * size)):  # stops at the first clear instance
        world = RandomWorld(rng, 3, alpha=float(rng.choice([0.1, 1.0])), mix=0.9,
                            zeros=bool(rng.random() < 0.5))
        best = max(best, rule_value(shape, world, CHOOSERS["traversal"])
                   - rule_value(shape, world, CHOOSERS["univer-guided"]))
        n += 1
        if best > 1e-3:
            break
    return n, best


class _DeepRows:
    """Root rows given; every row below the root is ``deep`` (target, draft)."""

    def __init__(self, p0: np.ndarray, q0: np.ndarray, deep: tuple[np.ndarray, np.ndarray]):
        self.p0, self.q0, self.deep = p0, q0, deep

    def p(self, path: tuple[int, ...]) -> np.ndarray:
        return self.p0 if not path else self.deep[0]

    def q(self, path: tuple[int, ...]) -> np.ndarray:
        return self.q0 if not path else self.deep[1]


def _no_rule_dominates(rng, size):
    """Two worlds that agree on everything a verifier sees at the root (deep-second shape):
    below the root, rows with p = q (world A) or with disjoint p and q (world B). For every
    root step, even the exact switch below it falls short of max(Traversal, univer-fixed) in
    one of the two worlds, so no rule choosing the root's step from what it sees dominates
    both. The value is min over root steps of the larger shortfall (> 0: witness found)."""
    shape = SHAPES["deep-second"]
    trav, fixed = CHOOSERS["traversal"], CHOOSERS["univer-fixed"]
    candidates = [(np.array([0.251, 0.512, 0.236]) / 0.999, np.array([0.159, 0.315, 0.526]))]
    candidates += [(rng.dirichlet(np.ones(3)), rng.dirichlet(np.ones(3))) for _ in range(size)]
    best, n = 0.0, 0
    for p0, q0 in candidates:
        same = rng.dirichlet(np.ones(3))
        worlds = (_DeepRows(p0, q0, (same, same)),
                  _DeepRows(p0, q0, (np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.5, 0.5]))))
        target = [max(rule_value(shape, w, trav), rule_value(shape, w, fixed)) for w in worlds]
        shortfall = min(max(t - oracle_value(shape, w, root_step=step)
                            for t, w in zip(target, worlds, strict=True))
                        for step in ("traversal", "conditional", "reverse", "condrev"))
        best = max(best, shortfall)
        n += 1
        if best > 0.01:
            break
    return n, best


def _family_gap(family: str, rule: str, base: str, scheme: str = "without_replacement"):
    def run(rng, size):
        """max over worlds and the family's shapes of E[tau](base) - E[tau](rule)."""
        n, worst = 0, 0.0
        for _ in range(size):
            for shape in FAMILIES[family].values():
                world = _world(rng, 3 if shape.size > 6 else int(rng.choice([3, 4])))
                got = (rule_value(shape, world, CHOOSERS[rule]) if scheme != "greedy" else
                       mean_length(shape, world.p, world.q, scheme=scheme, rule=rule))
                ref = rule_value(shape, world, _fixed_step(COIN + "traversal")
                                 if base == "rrsw" else CHOOSERS[base])
                worst = max(worst, ref - got)
                n += 1
        return n, worst
    return run


def _family_claims() -> list[Check]:
    out = []
    shapes = {f: ", ".join(FAMILIES[f]) for f in FAMILIES}
    for family in FAMILIES:
        for rule, base, scheme in (("traversal", "rrsw", "without_replacement"),
                                   ("univer", "rrsw", "without_replacement"),
                                   ("univer-guided", "rrsw", "without_replacement"),
                                   ("univer-fixed", "rrsw", "without_replacement"),
                                   ("univer-guided", "traversal", "without_replacement"),
                                   ("univer-fixed", "rrsw", "greedy")):
            name = f"{rule}{',greedy' if scheme == 'greedy' else ''}>={base}|{family}"
            out.append(Check(name, "claim", EXACT_TOL,
                             f"{rule} ({scheme} draws) >= {base} (sequential draws) in exact "
                             f"E[tau], random worlds, shapes: {shapes[family]}",
                             _family_gap(family, rule, base, scheme)))
    return out


CHECKS: list[Check] = [
    Check("lossless[follow]", "theorem", EXACT_TOL,
          "predraw-and-follow emits exact target draws (all V^(n+1) pre-draws enumerated)",
          _deterministic_lossless("follow")),
    Check("lossless[tev]", "theorem", EXACT_TOL,
          "TEV (exit law + residual bonus) emits the target's law", _deterministic_lossless("tev")),
    Check("coverage_bound", "theorem", EXACT_TOL,
          "E[tau] <= 1 + C_p for follow, tev and sample-match on deterministic trees "
          "(saturated)", _coverage_bound),
    *[Check(f"lossless[{rule}]", "theorem", EXACT_TOL,
            f"{rule} on {scheme} draws emits the target's law, every shape in SHAPES "
            "(one level k=2/3, chain, 2x2, deep-first, deep-second, link + deep-second, "
            "three children)", _sampled_lossless(rule, scheme))
      for rule, scheme in SCHEME_FOR_RULE.items()],
    Check("lossless[univer-fixed,greedy]", "theorem", EXACT_TOL,
          "univer-fixed on Greedy drafts (top k-1 + one sampled) emits the target's law",
          _sampled_lossless("univer-fixed", "greedy")),
    Check("lossless[every step]", "theorem", EXACT_TOL,
          "each fixed step (traversal, conditional, reverse, condrev, coin+each) on every "
          "shape in SHAPES emits the target's law", _every_step_lossless),
    Check("lossless[binary depth 3]", "theorem", EXACT_TOL,
          "traversal, univer, univer-guided, univer-fixed on the binary tree of depth 3",
          _binary3_lossless),
    Check("univer>=traversal", "theorem", EXACT_TOL,
          "the safe rule >= Traversal in exact E[tau] over the draws, every shape in SHAPES, "
          "binary depth 3, DDTree-like", _safe_ge_traversal),
    Check("k2_closed_form=enumeration", "theorem", EXACT_TOL,
          "k = 2 leaf children: each step's closed-form accepted mass equals enumeration",
          _closed_form_k2),
    Check("node_values=package", "theorem", EXACT_TOL,
          "node-by-node value recursion = package E[tau] over all filled trees (every rule, "
          "and the exact switch run through the package)", _values_equal_package),
    Check("coin+traversal=rrsw", "theorem", EXACT_TOL,
          "coin+traversal at every node emits exactly RRSw's law", _coin_traversal_is_rrsw),
    Check("rules<=exact_switch", "theorem", EXACT_TOL,
          "rrsw, traversal and every univer rule <= the exact switch (test-only oracle)",
          _rules_le_switch),
    Check("rrs_matches_reference", "theorem", EXACT_TOL,
          "the package's RRS/RRSw laws equal an independent loop implementation",
          _reference_agrees),
    Check("rrs<=opt_iid<=opt_wo", "theorem", LP_TOL,
          "alpha_RRS <= alpha*_iid <= alpha*_wo (single node, LP optima)", _rrs_chain),
    Check("rrsw<=opt_wo", "theorem", LP_TOL, "alpha_RRSw <= alpha*_wo", _rrsw_le_opt),
    Check("k1_is_1-tv", "theorem", LP_TOL, "k = 1: alpha* = 1 - TV(p, q), both schemes", _k1_tv),
    Check("lp=min_cut", "theorem", LP_TOL,
          "the OT LP equals the min-cut closed form over all token subsets", _lp_min_cut),
    Check("traversal=block_on_chains", "theorem", EXACT_TOL,
          "on a chain, Traversal and UniVer emit exactly block verification's law",
          _chains_are_block),
    Check("traversal=rrsw_one_level", "theorem", EXACT_TOL,
          "on one level, Traversal emits exactly RRSw's law", _one_level_is_rrsw),
    Check("univer_local=framework_lp", "theorem", LP_TOL,
          "UniVer's node plan attains the scaled conditional OT optimum, any values",
          _univer_local_optimal),
    Check("univer_greedy=opt_greedy", "theorem", LP_TOL,
          "one level, Greedy drafts: UniVer's acceptance = alpha* of the Greedy set law",
          _greedy_is_set_optimal),
    Check("rules<=c1", "theorem", LP_TOL,
          "rrsw, traversal, univer and (c2) <= (c1), the global optimum, on 2x2 trees",
          _le_global_optimum),
    Check("rrsw<=c2", "theorem", LP_TOL, "RRSw-tree <= (c2) decomposed local OT on 2x2 trees",
          _rrsw_le_c2),
    *[Check(f"caught[{name}]", "caught", CAUGHT_TOL, v.description, _caught(name))
      for name, v in BUGGY_VARIANTS.items() if not v.shipped],
    # sampled policies at T > 0 (Tsubame, sampled chains, dynamic trees): docs/theory/tsubame.md
    *[Check(f"lossless[{label},{rule}]", "theorem", EXACT_TOL,
            f"{label.split(',')[0]} ({scheme} draws, {kind} proposal) verified with {rule} emits "
            "the target's law",
            tsubame.lossless_gap(label, scheme, rule, kind))
      for label, scheme, rule, kind in tsubame.sampled_policies],
    Check("lossless[dynamic_tree,follow]", "theorem", EXACT_TOL,
          "the EAGLE-2-like dynamic tree (deterministic tokens) with follow emits the target's law",
          tsubame.dynamic_follow_gap),
    Check("lossless[dedup_iid,rrsw]", "theorem", EXACT_TOL,
          "i.i.d. siblings with duplicates merged, verified with RRSw, emit the target's law",
          tsubame.dedup_rrsw_gap),
    *[Check(f"caught[{name}]", "caught", CAUGHT_TOL, f"Tsubame, violates {cond}: {what}",
            tsubame.buggy_gap(name))
      for name, (cond, what, _) in tsubame.BUGGY_TSUBAME.items()],
    # cost-aware budgets (CaDDTree): docs/theory/caddtree.md
    Check("theta_unimodal[convex]", "theorem", EXACT_TOL,
          "convex verify cost: theta(B) = N(B)/D(B) rises strictly to its first maximiser, "
          "never exceeds it after", budget.theta_unimodal),
    Check("caddtree=exhaustive[convex]", "theorem", EXACT_TOL,
          "convex verify cost: CaDDTree's greedy stop is the smallest argmax of theta and equals "
          "the inline-heap reference (flat regions, ties)", budget.greedy_is_exhaustive),
    Check("nested_trees", "theorem", 0.0,
          "ddtree(B) is the first B nodes of ddtree(B + 1)", budget.nested_trees),
    Check("surrogate_concave", "theorem", 0.0,
          "DDTree's pop probabilities never increase (the surrogate gain is concave)",
          budget.surrogate_concave),
    Check("longrun=dinkelbach[convex]", "theorem", EXACT_TOL,
          "convex verify cost: the long-run rule p > lambda * dC maximises N - lambda D",
          budget.longrun_is_dinkelbach),
    Check("true_acceptance_not_concave", "witness", EXACT_TOL,
          "an instance where the true acceptance 1 + sum P(v_i) has a rising increment",
          budget.true_acceptance_not_concave),
    Check("greedy_local_max[tiled]", "witness", EXACT_TOL,
          "a tiled (step) verify cost where CaDDTree's greedy stop is a strict local maximum",
          budget.step_counterexample_exists),
    Check("traversal<rrsw[link + deep-second]", "witness", EXACT_TOL,
          "a world where Traversal < RRSw in E[tau] (root -> link -> {leaf, chain of 2})",
          _traversal_below_rrsw),
    Check("no_rule_dominates[traversal,univer-fixed]", "witness", EXACT_TOL,
          "two worlds alike at the root where every root step (exact switch below) falls "
          "short of max(Traversal, univer-fixed) in one of them", _no_rule_dominates),
    Check("univer-guided<traversal[2 x 2]", "witness", EXACT_TOL,
          "a world where the value-guided rule < Traversal in E[tau] (it has no guarantee)",
          _guided_below_traversal),
    *_family_claims(),
    # the rules the engines ship (appended: the rows above keep their seeds)
    Check("lossless[sample-match]", "theorem", EXACT_TOL,
          "SGLang's target-only sample-and-match (thresholds 1) emits the target's law on "
          "deterministic trees", _deterministic_lossless("sample-match")),
    Check("lossless[block]", "theorem", EXACT_TOL,
          "block verification on drafted chains (gamma = 1..4) emits the target's law",
          _sampled_lossless("block", "iid", vocab=3, shapes=CHAIN_SHAPES)),
    *[Check(f"caught[{name}]", "caught", CAUGHT_TOL, v.description, _caught(name))
      for name, v in BUGGY_VARIANTS.items() if v.shipped],
    # one budget across a batch: docs/theory/batch_caddtree.md (appended: earlier seeds kept)
    Check("batch_union_optimal", "theorem", EXACT_TOL,
          "for every total N, the union's first N pops maximise the batch's surrogate over "
          "all budget vectors summing to N", budget.batch_union_optimal),
    Check("batch_caddtree=exhaustive[convex]", "theorem", EXACT_TOL,
          "convex verify cost: batch_caddtree reaches the largest batch theta over every "
          "budget vector; one request: caddtree's tree", budget.batch_greedy_is_exhaustive),
    Check("batch_greedy_local_max[tiled]", "witness", EXACT_TOL,
          "a tiled verify cost where the batch's greedy stop loses to a larger budget vector",
          budget.batch_step_counterexample),
]


def run_checks(*, size: int = 10, seed: int = 0, only: str | None = None) -> list[CheckResult]:
    """Run every check (or those whose name contains ``only``) at ``size``."""
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be a positive integer; got {size!r}")
    out = []
    for i, check in enumerate(CHECKS):
        if only is not None and only not in check.theorem:
            continue
        out.append(check(seed + 1000 * i, size))
    return out
