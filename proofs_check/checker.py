r"""Check any verifier for losslessness in one call: :func:`check_verifier`.

A verifier is given as a *sampler* ``fn(tree, target_rows, proposal, rng) -> tokens``:

``tree``
    a :class:`~treespec_sim.DraftTree` (siblings in node order, which is the draw order of a
    sampled tree and descending drafter probability for a top-k tree);
``target_rows``
    float64 ``(n + 1, V)``; row ``v`` is the target's next-token law after the path to node
    ``v`` (the root row: after the committed prefix);
``proposal``
    float64 ``(n + 1, V)``; row ``v``, for every node with children, is the drafter's law
    those children were drawn from -- or, on a deterministic (top-k) tree, chosen from as its
    top tokens; rows of leaves are NaN (never a silent placeholder: a verifier that reads a
    leaf's row gets NaN);
``rng``
    a :class:`numpy.random.Generator`, the verifier's only randomness;

and it returns the tokens the round commits: the accepted path's tokens, then the bonus token
(a sequence of ints, an int array or an :class:`~treespec_sim.verify.Outcome`).

What the check does (``docs/check_your_verifier.md``). For the drawing ``scheme`` --
``"deterministic"`` (top-k trees), ``"iid"``, ``"without_replacement"`` (sequential draws in
node order) or ``"chain"`` (one child per node, drawn autoregressively) -- it builds
:data:`DEFAULT_CASES` *cases*: a small world (``V <= 8``; target and drafter rows after every
prefix, :class:`~proofs_check.worlds.SeededWorld`) and a tree shape. In each case it decodes
sequences from the empty context: a tree of the shape is drafted at the current context by the
package's own fill (:func:`treespec_sim.policies.fill_tree`, the top-k fill at ``T = 0`` for
deterministic trees), ``fn`` verifies it, the committed tokens extend the context, and the
next round starts there, until the sequence holds ``prefix`` tokens (the deepest path plus one,
so a round that stops early is followed by another). ``rounds`` calls of ``fn`` per case.

Then, with the one convention of :mod:`treespec_sim.stats` ("Counts against a known law"):

* per case, two chi-square tests against the target's exact laws: of the *first committed
  token* (against the root row) and of the *committed prefix* (against the target's law of
  ``prefix`` tokens, every ``V^prefix`` string); the case's p-value is their Bonferroni
  combination, ``min(1, 2 min(p_first, p_prefix))``;
* one pooled test of the first token over all cases (statistics and degrees of freedom added):
  a loss present in every case -- the usual kind: a biased rule is biased everywhere --
  accumulates there;
* family-wise false-alarm rate ``level`` (default :data:`LEVEL`): half to the pooled test,
  half shared by the cases (Bonferroni). ``report.family_p`` is the smallest adjusted p-value;
  ``report.lossless`` is ``family_p > level``: no evidence of loss at that level. A lossless
  verifier is reported lossy with probability at most ``level`` (asymptotically, as the
  chi-square law).

Power. The report states, from the same sample sizes, the least power of the pooled test
against *any* loss of total variation at least :data:`PLANTED_TV` in the first token of every
case, and the loss a single case needs to be found with power 0.9
(:func:`treespec_sim.stats.gof_power`). With ``planted=True`` it also plants such a loss in
``fn`` itself (:func:`plant_loss`: the least detectable kind, exactly :data:`PLANTED_TV` if
``fn`` is lossless) and runs the same check on it: ``report.power.planted_found``.

Exact mode: ``check_verifier(law=law_fn, scheme=...)`` for a verifier that supplies its exact
round law ``law_fn(tree, target_rows, proposal) -> {tokens: probability}``: every drafted tree
of each case is enumerated (:func:`proofs_check.sampled.round_law`), each emission is extended
with target draws to ``prefix`` tokens (:func:`proofs_check.enumerate.extend_law`) and compared
with the target's law (:func:`proofs_check.sampled.target_law_from`); lossless iff every gap is
at most :data:`EXACT_TOL`. ``V <= 4`` there (enumeration).

The planted-bug catalogue the check proves its power on is :data:`proofs_check.buggy.
BUGGY_VARIANTS` (every variant whose drafting scheme is one of the checker's:
:func:`catalogue`), in both modes (``tests/proofs/test_checker.py``).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from treespec_sim import DraftTree
from treespec_sim.policies.sampled import PreparedLaw, draw_children
from treespec_sim.rows import ArrayOracle
from treespec_sim.stats import gof_power, gof_test, pooled_gof, tv_interval
from treespec_sim.validation import (
    check_flag,
    check_nonnegative_int,
    check_positive_int,
    check_real,
)
from treespec_sim.verify import RULES, Outcome, VerifierRule, register_rule, verify

from .buggy import BUGGY_VARIANTS, BuggyVariant
from .enumerate import ROUND_LAWS, extend_law, max_law_gap
from .sampled import round_law, target_law_from
from .worlds import SeededWorld

__all__ = ["DEFAULT_CASES", "DEFAULT_ROUNDS", "EXACT_TOL", "LEVEL", "PLANTED_TV", "SCHEMES",
           "Case", "CaseReport", "Power", "VerifierOutputError", "VerifierReport", "catalogue",
           "check_rule", "check_verifier", "draft_round", "law_sampler", "make_cases",
           "plant_loss", "register_checked_rule", "rule_law", "rule_sampler"]

#: The drawing schemes a verifier can be checked on.
SCHEMES = ("deterministic", "iid", "without_replacement", "chain")
#: Family-wise false-alarm rate: a lossless verifier is reported lossy at most this often.
LEVEL = 0.01
#: The total variation of the loss the report states its power against.
PLANTED_TV = 0.02
#: Cases per check.
DEFAULT_CASES = 6
#: Calls of ``fn`` per case.
DEFAULT_ROUNDS = 5000
#: One sequence in this many is decoded on to the full prefix (the others stop after their
#: first round, which is all the first-token test reads).
DECODE_EVERY = 2
#: Exact mode: a law gap above this is a loss (float64 rounding is ~1e-16).
EXACT_TOL = 1e-9
#: Exact mode: the largest vocabulary (every drafted tree is enumerated).
EXACT_VOCAB = 4
#: The power the single-case detectable loss is quoted at.
TARGET_POWER = 0.9

#: Checker scheme -> the drafting scheme of :func:`proofs_check.sampled.enumerate_trees`.
ENUMERATION_SCHEME = {"deterministic": "top_k", "iid": "iid",
                      "without_replacement": "without_replacement", "chain": "iid"}

Sampler = Callable[[DraftTree, np.ndarray, np.ndarray, np.random.Generator], object]
LawFn = Callable[[DraftTree, np.ndarray, np.ndarray], dict[tuple[int, ...], float]]


def _shape(parent: Sequence[int]) -> DraftTree:
    return DraftTree.from_parents_multiset(list(parent), [-1] + [0] * (len(parent) - 1))


#: Tree shapes per scheme, cycled over the cases (tokens are placeholders).
SHAPES: dict[str, dict[str, DraftTree]] = {
    "deterministic": {
        "top-2 x 2": _shape([-1, 0, 0, 1, 1, 2, 2]),
        "top-3, first child a chain of 2": _shape([-1, 0, 0, 0, 1, 4]),
        "DDTree-like (3, 2, 1 + 1)": _shape([-1, 0, 0, 0, 1, 1, 4, 2]),
        "top-3": _shape([-1, 0, 0, 0]),
        "top-2, deep first": _shape([-1, 0, 0, 1, 3]),
        "top-4, first child 2": _shape([-1, 0, 0, 0, 0, 1, 1]),
    },
    "sampled": {
        "k = 2": _shape([-1, 0, 0]),
        "k = 3": _shape([-1, 0, 0, 0]),
        "2 x 2": _shape([-1, 0, 0, 1, 1, 2, 2]),
        "deep first": _shape([-1, 0, 0, 1, 3]),
        "deep second": _shape([-1, 0, 0, 2, 3]),
        "three children, middle deep": _shape([-1, 0, 0, 0, 2]),
    },
    "chain": {f"chain of {g}": _shape(list(range(-1, g))) for g in (2, 3, 4, 1)},
}

#: World parameters cycled over the cases: (V, Dirichlet alpha, drafter mix, target zeros).
WORLDS = ((3, 1.0, 0.5, False), (4, 0.5, 0.5, True), (5, 1.0, 0.9, False),
          (6, 0.3, 0.5, False), (8, 1.0, 0.7, True), (4, 2.0, 0.5, False))


# ----------------------------------------------------------------------------- cases
@dataclass(frozen=True, eq=False)
class Case:
    """One case: a world and a tree shape.

    Attributes
    ----------
    index : int
    label : str
        The shape's name and the world's parameters.
    world : SeededWorld
        ``world.p(path)``, ``world.q(path)``: target and drafter rows after ``path``.
    shape : DraftTree
        Tokens are placeholders; the scheme fills them.
    prefix : int
        Tokens of the committed prefix whose law is tested (the deepest path plus one).
    """

    index: int
    label: str
    world: SeededWorld
    shape: DraftTree

    @property
    def vocab(self) -> int:
        return int(self.world.vocab)

    @property
    def prefix(self) -> int:
        return int(self.shape.max_depth) + 1


def _shapes_for(scheme: str) -> dict[str, DraftTree]:
    return SHAPES["deterministic" if scheme == "deterministic" else
                  "chain" if scheme == "chain" else "sampled"]


def make_cases(scheme: str, *, cases: int = DEFAULT_CASES, seed: int = 0,
               max_vocab: int = 8) -> list[Case]:
    """The cases of a check: shapes of ``scheme`` and worlds cycled, world ``i`` seeded by
    ``(seed, i)`` (the same cases for every verifier checked at ``seed``)."""
    _check_scheme(scheme)
    shapes = list(_shapes_for(scheme).items())
    out = []
    for i in range(cases):
        name, shape = shapes[i % len(shapes)]
        vocab, alpha, mix, zeros = WORLDS[i % len(WORLDS)]
        width = max(int(np.bincount(shape.parent[1:]).max()) if shape.size else 1, 2)
        vocab = max(min(vocab, max_vocab), width)
        world = SeededWorld(seed * 1_000_003 + i, vocab, alpha=alpha, mix=mix, zeros=zeros)
        label = (f"{name}, V = {vocab}, target Dirichlet({alpha:g}), drafter "
                 f"{100 * (1 - mix):.0f}% target{', target zeros' if zeros else ''}")
        out.append(Case(i, label, world, shape))
    return out


def draft_round(case: Case, scheme: str, context: tuple[int, ...], rng: np.random.Generator
                ) -> tuple[DraftTree, np.ndarray, np.ndarray]:
    """One round's tree of the case's shape at ``context``: ``(tree, target rows, proposal
    rows)``, the proposal NaN at leaves.

    Node ``v``'s children get the top-``k`` tokens of the drafter's row after ``context`` and
    ``v``'s path (descending probability, ties to the smaller id: the ``T = 0`` fill of
    :func:`~treespec_sim.policies.fill_tree`), or ``k`` draws from it by the package's own
    :func:`~treespec_sim.policies.sampled.draw_children` (i.i.d., or sequential without
    replacement in node order; a chain is i.i.d. with ``k = 1``).
    """
    world, shape = case.world, case.shape
    n1 = shape.n_nodes
    token = [int(shape.token[0])] + [0] * (n1 - 1)
    path: list[tuple[int, ...]] = [()] * n1
    prop = np.full((n1, world.vocab), np.nan)
    for v, kids in enumerate(shape.child_lists):
        if kids.size == 0:
            continue
        q = world.q(context + path[v])
        prop[v] = q
        if scheme == "deterministic":
            drawn = np.lexsort((np.arange(q.size), -q))[: kids.size]
        else:
            drawn = draw_children(PreparedLaw.of(q), int(kids.size),
                                  "without_replacement" if scheme == "without_replacement"
                                  else "iid", rng)
        for c, x in zip(kids.tolist(), drawn.tolist(), strict=True):
            token[c] = int(x)
            path[c] = (*path[v], int(x))
    build = DraftTree.from_parents_multiset if scheme == "iid" else DraftTree.from_parents
    tree = build(shape.parent, token)
    rows = np.array([world.p(context + pth) for pth in path])
    return tree, rows, prop


# ----------------------------------------------------------------------------- outputs
class VerifierOutputError(ValueError):
    """``fn`` returned something that is not a round's output for the tree it was given."""


def _tokens(out, tree: DraftTree, vocab: int, case: Case) -> tuple[int, ...]:
    """The committed tokens of ``out``, checked: a path of ``tree`` from the root, then a bonus
    token in the vocabulary."""
    raw = out.tokens if isinstance(out, Outcome) else out
    try:
        arr = np.asarray(raw).ravel()
    except Exception as exc:  # any object a user returns
        raise VerifierOutputError(f"case {case.index}: the verifier returned {out!r}, not a "
                                  f"sequence of tokens ({exc})") from None
    if arr.size == 0 or not (np.issubdtype(arr.dtype, np.integer)
                             or (np.issubdtype(arr.dtype, np.floating)
                                 and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)))):
        raise VerifierOutputError(f"case {case.index}: the verifier returned {out!r}; it must "
                                  "return the accepted path's tokens then the bonus token "
                                  "(a non-empty sequence of ints)")
    toks = tuple(int(t) for t in arr.tolist())
    v = 0
    for i, t in enumerate(toks[:-1]):
        kids = tree.children(v)
        hit = kids[tree.token[kids] == t]
        if hit.size == 0:
            raise VerifierOutputError(
                f"case {case.index}: the verifier returned {list(toks)}, but token {t} at "
                f"position {i} is not a child of node {v} (children's tokens: "
                f"{tree.token[kids].tolist()}): the output must be a path of the tree from "
                "the root, then the bonus token")
        v = int(hit[0])
    if not 0 <= toks[-1] < vocab:
        raise VerifierOutputError(f"case {case.index}: the bonus token {toks[-1]} is outside "
                                  f"the vocabulary (V = {vocab})")
    return toks


# ----------------------------------------------------------------------------- reports
@dataclass(frozen=True)
class CaseReport:
    """One case of a check.

    Attributes
    ----------
    index : int
    label : str
    vocab : int
    shape : tuple of int
        The shape's parent array.
    target_root, proposal_root : ndarray float64 (V,)
        The target's and the drafter's rows at the empty context (the first round's root).
    first_token_law : ndarray float64 (V,)
        The law of the first committed token: empirical (sampled mode) or exact.
    tv, tv_low, tv_high : float
        Its total-variation distance from ``target_root``, with the 95% interval of
        :func:`treespec_sim.stats.tv_interval` (exact mode: all three the exact distance).
    p_value : float
        The case's test: ``min(1, 2 min(p_first, p_prefix))`` (NaN in exact mode).
    p_first, p_prefix : float
        The chi-square tests of the first committed token and of the committed prefix.
    prefix : int
        Tokens of the committed prefix tested.
    sequences, rounds : int
        Sequences started (each one's first round is in the first-token test), and calls of the
        verifier that decoded them.
    decoded : int
        Sequences decoded on to ``prefix`` tokens (the prefix test's sample).
    gap : float
        Exact mode: the largest gap between the emitted law (extended to ``prefix`` tokens)
        and the target's; NaN in sampled mode.
    observed_prefix_law, expected_prefix_law : dict
        The committed prefix's law as observed (frequencies; exact mode: exact) and the
        target's.
    """

    index: int
    label: str
    vocab: int
    shape: tuple[int, ...]
    target_root: np.ndarray
    proposal_root: np.ndarray
    first_token_law: np.ndarray
    tv: float
    tv_low: float
    tv_high: float
    p_value: float
    p_first: float
    p_prefix: float
    prefix: int
    sequences: int
    rounds: int
    gap: float
    observed_prefix_law: dict[tuple[int, ...], float] = field(repr=False)
    expected_prefix_law: dict[tuple[int, ...], float] = field(repr=False)
    decoded: int = 0

    def worst_strings(self, k: int = 5) -> list[tuple[tuple[int, ...], float, float]]:
        """The ``k`` prefixes whose observed and expected probabilities differ most:
        ``(prefix, observed, expected)``."""
        keys = set(self.observed_prefix_law) | set(self.expected_prefix_law)
        rows = [(s, self.observed_prefix_law.get(s, 0.0), self.expected_prefix_law.get(s, 0.0))
                for s in keys]
        rows.sort(key=lambda r: -abs(r[1] - r[2]))
        return rows[:k]


@dataclass(frozen=True)
class Power:
    """What the check's sample size can find.

    Attributes
    ----------
    tv : float
        The stated loss (:data:`PLANTED_TV`).
    pooled : float
        Least power of the pooled first-token test against any loss of total variation at
        least ``tv`` in the first token of every case.
    single_case_tv : float
        The total variation a loss confined to one case (the least favourable case) needs
        to be found with power :data:`TARGET_POWER`.
    planted_found : bool or None
        With ``planted=True``: whether the same check on :func:`plant_loss` of the verifier
        (a loss of exactly ``tv`` when the verifier is lossless) reported the loss.
    planted_p : float or None
        That check's ``family_p``.
    """

    tv: float
    pooled: float
    single_case_tv: float
    planted_found: bool | None = None
    planted_p: float | None = None


@dataclass(frozen=True)
class VerifierReport:
    """The result of :func:`check_verifier`.

    Attributes
    ----------
    scheme, mode : str
        The drawing scheme; ``"sampled"`` or ``"exact"``.
    level : float
        The family-wise false-alarm rate.
    cases : tuple of CaseReport
    pooled_p : float
        The pooled first-token test over all cases (NaN in exact mode).
    family_p : float
        ``min(1, 2 pooled_p, 2 m min_c p_c)`` over ``m`` cases (exact mode: 0 or 1).
    lossless : bool
        No evidence of loss at ``level`` (exact mode: every gap within :data:`EXACT_TOL`).
    power : Power or None
        None in exact mode (any loss above :data:`EXACT_TOL` is found).
    seed, rounds : int
    seconds : float
    """

    scheme: str
    mode: str
    level: float
    cases: tuple[CaseReport, ...]
    pooled_p: float
    family_p: float
    lossless: bool
    power: Power | None
    seed: int
    rounds: int
    seconds: float

    @property
    def worst(self) -> CaseReport:
        """The case with the strongest evidence of loss (smallest p-value; exact mode:
        largest gap)."""
        if self.mode == "exact":
            return max(self.cases, key=lambda c: c.gap)
        return min(self.cases, key=lambda c: (c.p_value, -c.tv))

    def to_json(self) -> dict:
        """The report as plain JSON types (laws as lists; the prefix laws of the worst case
        only, as its five most-off prefixes)."""
        def num(x: float) -> float | None:
            return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)

        def case(c: CaseReport) -> dict:
            return {"index": c.index, "label": c.label, "vocab": c.vocab,
                    "shape": list(c.shape), "target_root": c.target_root.tolist(),
                    "proposal_root": c.proposal_root.tolist(),
                    "first_token_law": c.first_token_law.tolist(), "tv": c.tv,
                    "tv_low": c.tv_low, "tv_high": c.tv_high, "p_value": num(c.p_value),
                    "p_first": num(c.p_first), "p_prefix": num(c.p_prefix),
                    "prefix": c.prefix, "sequences": c.sequences, "decoded": c.decoded,
                    "rounds": c.rounds, "gap": num(c.gap)}

        worst = self.worst
        pw = self.power
        return {
            "scheme": self.scheme, "mode": self.mode, "lossless": self.lossless,
            "level": self.level, "family_p": num(self.family_p), "pooled_p": num(self.pooled_p),
            "seed": self.seed, "rounds": self.rounds, "seconds": self.seconds,
            "power": None if pw is None else {
                "tv": pw.tv, "pooled": pw.pooled, "single_case_tv": pw.single_case_tv,
                "planted_found": pw.planted_found, "planted_p": num(pw.planted_p)},
            "cases": [case(c) for c in self.cases],
            "worst": {**case(worst), "most_off_prefixes": [
                {"prefix": list(k), "observed": o, "expected": e}
                for k, o, e in worst.worst_strings()]},
        }

    def summary(self) -> str:
        """A few lines for a terminal."""
        head = ("no evidence of loss" if self.lossless else "LOSS FOUND")
        lines = [f"{head}: scheme {self.scheme!r}, {self.mode} check of {len(self.cases)} "
                 f"cases, {self.seconds:.1f} s"]
        if self.mode == "sampled":
            lines.append(f"family-wise p = {self.family_p:.3g} (false-alarm rate "
                         f"{self.level:g}); pooled first-token test p = {self.pooled_p:.3g}")
        for c in self.cases:
            if self.mode == "exact":
                lines.append(f"  case {c.index}: gap {c.gap:.3g}, first-token TV {c.tv:.4f} "
                             f"- {c.label}")
            else:
                lines.append(f"  case {c.index}: first-token TV {c.tv:.4f} [{c.tv_low:.4f}, "
                             f"{c.tv_high:.4f}], p = {c.p_value:.3g} ({c.sequences} sequences, "
                             f"{c.rounds} rounds) - {c.label}")
        if self.power is not None:
            pw = self.power
            lines.append(f"power: a loss of TV >= {pw.tv:g} in every case's first token is "
                         f"found with probability >= {pw.pooled:.2f}; one confined to a single "
                         f"case with probability {TARGET_POWER:g} from TV "
                         f"{pw.single_case_tv:.3f}")
            if pw.planted_found is not None:
                lines.append(f"planted loss of TV {pw.tv:g}: "
                             f"{'found' if pw.planted_found else 'NOT found'} "
                             f"(family-wise p = {pw.planted_p:.3g})")
        if not self.lossless:
            w = self.worst
            lines.append(f"worst case {w.index} ({w.label}):")
            lines.append(f"  target root row    {_fmt(w.target_root)}")
            lines.append(f"  drafter root row   {_fmt(w.proposal_root)}")
            lines.append(f"  first token, seen  {_fmt(w.first_token_law)}")
            lines.append(f"  first-token TV {w.tv:.4f}"
                         + ("" if self.mode == "exact" else f" [{w.tv_low:.4f}, {w.tv_high:.4f}]"))
            lines.append(f"  prefixes of {w.prefix} tokens, most off (seen vs target):")
            for s, o, e in w.worst_strings():
                lines.append(f"    {list(s)}: {o:.4f} vs {e:.4f}")
        return "\n".join(lines)


def _fmt(row: np.ndarray) -> str:
    return "[" + " ".join(f"{x:.3f}" for x in np.asarray(row, dtype=np.float64)) + "]"


# ----------------------------------------------------------------------------- checks
def _check_scheme(scheme: str) -> None:
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}; got {scheme!r}")


def _sampled_case(fn: Sampler, case: Case, scheme: str, rounds: int, seed: int
                  ) -> tuple[CaseReport, object]:
    """The case's report, and its first-token test (for the pooled test)."""
    world, vocab, length = case.world, case.vocab, case.prefix
    rng = np.random.default_rng([seed, case.index, 44])
    cache: dict[tuple[int, ...], tuple[DraftTree, np.ndarray, np.ndarray]] = {}
    first = np.zeros(vocab)
    seen: Counter = Counter()
    calls = sequences = decoded = 0
    while calls < rounds:
        context: tuple[int, ...] = ()
        # every sequence's first round counts for the first-token test; every other one is
        # decoded on, round after round, to the prefix the prefix test reads
        goal = length if sequences % DECODE_EVERY == 0 else 1
        while len(context) < goal:
            if scheme == "deterministic":
                if context not in cache:
                    cache[context] = draft_round(case, scheme, context, rng)
                tree, rows, prop = cache[context]
            else:
                tree, rows, prop = draft_round(case, scheme, context, rng)
            out = fn(tree, rows.copy(), prop.copy(), rng)
            context = context + _tokens(out, tree, vocab, case)
            calls += 1
        first[context[0]] += 1
        sequences += 1
        if goal == length:
            seen[context[:length]] += 1
            decoded += 1
    target_root = world.p(())
    expected = target_law_from(world.p, length, vocab)
    keys = sorted(set(expected) | set(seen))
    t_first = gof_test(first, target_root)
    t_prefix = gof_test(np.array([seen.get(k, 0) for k in keys]),
                        np.array([expected.get(k, 0.0) for k in keys]))
    tv, lo, hi = tv_interval(first, target_root)
    return CaseReport(
        case.index, case.label, vocab, tuple(case.shape.parent.tolist()), target_root.copy(),
        world.q(()).copy(), first / sequences, tv, lo, hi,
        min(1.0, 2.0 * min(t_first.p_value, t_prefix.p_value)), t_first.p_value,
        t_prefix.p_value, length, sequences, calls, math.nan,
        {k: c / max(decoded, 1) for k, c in seen.items()}, expected, decoded), t_first


def _exact_case(law_fn: LawFn, case: Case, scheme: str) -> CaseReport:
    world, vocab, length = case.world, case.vocab, case.prefix
    law = round_law(case.shape, world.p, world.q, scheme=ENUMERATION_SCHEME[scheme],
                    law_fn=law_fn)
    got = extend_law(law, world.p, length)
    want = target_law_from(world.p, length, vocab)
    first = np.zeros(vocab)
    for s, prob in law.items():
        if not 0 <= s[0] < vocab:
            raise VerifierOutputError(f"case {case.index}: the law emits {list(s)}, whose "
                                      f"first token is outside the vocabulary (V = {vocab})")
        first[s[0]] += prob
    target_root = world.p(())
    tv = 0.5 * float(np.abs(first - target_root).sum())
    return CaseReport(
        case.index, case.label, vocab, tuple(case.shape.parent.tolist()), target_root.copy(),
        world.q(()).copy(), first, tv, tv, tv, math.nan, math.nan, math.nan, length, 0, 0,
        max_law_gap(got, want), got, want)


def _single_case_tv(n: int, df: int, alpha: float) -> float:
    """The smallest total variation found with power :data:`TARGET_POWER` by a test of ``n``
    draws, ``df`` degrees of freedom, size ``alpha`` (bisection on :func:`gof_power`)."""
    if df < 1 or n < 1:
        return math.inf
    lo, hi = 0.0, 1.0
    if gof_power(n, hi, df, alpha) < TARGET_POWER:
        return math.inf
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gof_power(n, mid, df, alpha) < TARGET_POWER else (lo, mid)
    return hi


def check_verifier(fn: Sampler | None = None, *, scheme: str, law: LawFn | None = None,
                   rounds: int = DEFAULT_ROUNDS, cases: int = DEFAULT_CASES, seed: int = 0,
                   level: float = LEVEL, planted: bool = False) -> VerifierReport:
    """Test a verifier for losslessness (module docstring).

    Parameters
    ----------
    fn : callable, optional
        The sampler ``fn(tree, target_rows, proposal, rng) -> tokens``.
    scheme : {"deterministic", "iid", "without_replacement", "chain"}
        How the trees' tokens are chosen.
    law : callable, optional
        Exact mode instead of ``fn``: ``law(tree, target_rows, proposal) -> {tokens: prob}``.
    rounds : int
        Calls of ``fn`` per case (sampled mode).
    cases : int
        Cases (worlds and shapes).
    seed : int
        The cases' worlds and every draw (the same seed: the same report).
    level : float
        Family-wise false-alarm rate.
    planted : bool
        Also run the check on :func:`plant_loss` of ``fn`` and report whether it was found.

    Returns
    -------
    VerifierReport
    """
    _check_scheme(scheme)
    if (fn is None) == (law is None):
        raise ValueError("pass exactly one of fn (a sampler) and law (an exact round law)")
    rounds = check_positive_int(rounds, "rounds")
    cases = check_positive_int(cases, "cases")
    seed = check_nonnegative_int(seed, "seed")
    planted = check_flag(planted, "planted")
    if check_real(level, "level", strict=True) >= 1:
        raise ValueError(f"level must be in (0, 1); got {level!r}")
    start = time.perf_counter()
    if law is not None:
        if not callable(law):
            raise ValueError(f"law must be callable; got {law!r}")
        reports = tuple(_exact_case(law, c, scheme)
                        for c in make_cases(scheme, cases=cases, seed=seed,
                                            max_vocab=EXACT_VOCAB))
        lossless = all(c.gap <= EXACT_TOL for c in reports)
        return VerifierReport(scheme, "exact", level, reports, math.nan,
                              1.0 if lossless else 0.0, lossless, None, seed, 0,
                              time.perf_counter() - start)
    if not callable(fn):
        raise ValueError(f"fn must be callable; got {fn!r}")
    done = [_sampled_case(fn, c, scheme, rounds, seed)
            for c in make_cases(scheme, cases=cases, seed=seed)]
    reports = tuple(r for r, _ in done)
    pooled = pooled_gof(t for _, t in done)
    m = len(reports)
    family_p = min(1.0, 2.0 * pooled.p_value, 2.0 * m * min(r.p_value for r in reports))
    n_total = sum(r.sequences for r in reports)
    pooled_power = gof_power(n_total, PLANTED_TV, pooled.df, level / 2.0)
    single = max(_single_case_tv(r.sequences, t.df, level / (4.0 * m)) for r, t in done)
    power = Power(PLANTED_TV, pooled_power, single)
    if planted:
        twin = check_verifier(plant_loss(fn), scheme=scheme, rounds=rounds, cases=cases,
                              seed=seed, level=level)
        power = Power(PLANTED_TV, pooled_power, single, not twin.lossless, twin.family_p)
    return VerifierReport(scheme, "sampled", level, reports, pooled.p_value, family_p,
                          family_p > level, power, seed, rounds, time.perf_counter() - start)


# ----------------------------------------------------------------------------- samplers
def _half_mass_split(p: np.ndarray, tv: float) -> np.ndarray:
    """A boolean mask ``A`` over tokens: the most likely tokens, with ``p(A)`` as near 1/2
    as a prefix of the descending order allows, keeping ``p(not A) >= tv`` when possible."""
    order = np.argsort(-p, kind="stable")
    cum = np.cumsum(p[order])
    j = int(np.argmin(np.abs(cum[:-1] - 0.5))) + 1 if p.size > 1 else 1
    while j > 1 and 1.0 - cum[j - 1] < tv:
        j -= 1
    mask = np.zeros(p.size, dtype=bool)
    mask[order[:j]] = True
    return mask


def plant_loss(fn: Sampler, tv: float = PLANTED_TV) -> Sampler:
    r"""``fn`` with a planted loss of total variation ``tv`` in every round's first token.

    With ``A`` the most likely tokens of the root row :math:`p` (about half its mass): when
    ``fn`` commits a first token outside ``A``, with probability :math:`\rho = tv / p(A^c)` the
    round commits instead only a bonus token drawn from :math:`p` restricted to ``A``. A
    lossless ``fn`` then has first-token law
    :math:`p + tv\,(p\,1_A / p(A) - p\,1_{A^c} / p(A^c))`, at total variation exactly ``tv``:
    the least detectable loss of that size for a chi-square test (its noncentrality is
    :math:`n\,tv^2 (1/p(A) + 1/p(A^c))`, the bound :math:`4 n\,tv^2` at :math:`p(A) = 1/2`).
    (If :math:`p(A^c) < tv` the loss is :math:`p(A^c)`.)
    """
    if not 0 < tv < 1:
        raise ValueError(f"tv must be in (0, 1); got {tv!r}")

    def planted(tree, target_rows, proposal, rng):
        out = fn(tree, target_rows, proposal, rng)
        toks = out.tokens if isinstance(out, Outcome) else out
        first = int(np.asarray(toks).ravel()[0])
        p = np.asarray(target_rows[0], dtype=np.float64)
        a = _half_mass_split(p, tv)
        rest = float(p[~a].sum())
        if not a[first] and rest > 0 and rng.random() < min(1.0, tv / rest):
            w = np.where(a, p, 0.0)
            return (int(rng.choice(p.size, p=w / w.sum())),)
        return out

    return planted


def rule_sampler(rule: str) -> Sampler:
    """A rule of the table (:data:`treespec_sim.verify.RULES`) as a sampler for
    :func:`check_verifier` (the proposal is passed only to rules that read one)."""
    spec = RULES.get(rule) if isinstance(rule, str) else None
    if spec is None:
        raise ValueError(f"unknown rule {rule!r}; known rules: {', '.join(sorted(RULES))}")

    def sample(tree, target_rows, proposal, rng):
        return verify(tree, target_rows, rule=rule, rng=rng,
                      proposal=proposal if spec.needs_proposal else None).tokens

    sample.__name__ = f"rule_sampler[{rule}]"
    return sample


def rule_law(rule: str) -> LawFn:
    """A rule's exact round law for :func:`check_verifier`'s exact mode (the table's
    ``round_law``; for ``follow`` and ``tev``, :data:`proofs_check.enumerate.ROUND_LAWS`)."""
    spec = RULES.get(rule) if isinstance(rule, str) else None
    if spec is None:
        raise ValueError(f"unknown rule {rule!r}; known rules: {', '.join(sorted(RULES))}")
    if spec.round_law is None:
        det = ROUND_LAWS.get(rule)
        if det is None:
            raise ValueError(f"rule {rule!r} has no exact round law")
        return lambda tree, rows, prop: det(tree, np.asarray(rows, dtype=np.float64))

    def law(tree, rows, prop):
        return spec.round_law(tree, ArrayOracle(rows, tree),
                              prop if spec.needs_proposal else None)

    return law


def law_sampler(law: LawFn) -> Sampler:
    """A sampler that draws a round's output from the exact law ``law`` (so that a law --
    a known-buggy variant, a rule's round law -- can be run through the sampled check)."""

    def sample(tree, target_rows, proposal, rng):
        d = law(tree, target_rows, proposal)
        keys = list(d)
        w = np.array([d[k] for k in keys], dtype=np.float64)
        return keys[int(rng.choice(len(keys), p=w / w.sum()))]

    return sample


def catalogue() -> dict[str, tuple[str, BuggyVariant]]:
    """The known-buggy variants the checker can run, by name: ``(checker scheme, variant)``
    (variants whose bug is in the drafting -- tempered or post-hoc draws, Greedy drafts --
    are outside a verifier check: the checker draws the trees itself)."""
    to_checker = {"top_k": "deterministic", "iid": "iid",
                  "without_replacement": "without_replacement"}
    out = {}
    for name, v in BUGGY_VARIANTS.items():
        if v.scheme in to_checker:
            out[name] = ("chain" if v.chains_only else to_checker[v.scheme], v)
    return out


# ----------------------------------------------------------------------------- registration
def _checker_schemes(rule: VerifierRule) -> tuple[str, ...]:
    """The checker's schemes for a rule's drawing schemes (a chain-only rule: ``"chain"``;
    Greedy drafts have no checker scheme)."""
    if rule.chains_only:
        return ("chain",)
    return tuple(s for s in rule.schemes if s in SCHEMES)


def _spec_sampler(rule: VerifierRule) -> Sampler:
    def sample(tree, target_rows, proposal, rng):
        oracle = ArrayOracle(target_rows, tree)
        return rule.sample(tree, oracle, rng, proposal if rule.needs_proposal else None)
    return sample


def _spec_law(rule: VerifierRule) -> LawFn:
    def law(tree, target_rows, proposal):
        return rule.round_law(tree, ArrayOracle(target_rows, tree),
                              proposal if rule.needs_proposal else None)
    return law


def check_rule(rule: VerifierRule, *, exact: bool | None = None, rounds: int = DEFAULT_ROUNDS,
               seed: int = 0) -> dict[str, VerifierReport]:
    """:func:`check_verifier` of a rule-table entry on each of its schemes the checker knows:
    exact mode when the rule has a ``round_law`` (unless ``exact=False``), else sampled."""
    if not isinstance(rule, VerifierRule):
        raise ValueError(f"rule must be a VerifierRule; got {type(rule).__name__}")
    schemes = _checker_schemes(rule)
    if not schemes:
        raise ValueError(f"rule {rule.name!r}: none of its schemes {rule.schemes} can be "
                         f"checked (the checker's schemes: {', '.join(SCHEMES)})")
    use_exact = rule.round_law is not None if exact is None else bool(exact)
    if use_exact and rule.round_law is None:
        raise ValueError(f"rule {rule.name!r} has no round_law for the exact check")
    return {s: (check_verifier(law=_spec_law(rule), scheme=s, seed=seed) if use_exact else
                check_verifier(_spec_sampler(rule), scheme=s, rounds=rounds, seed=seed))
            for s in schemes}


def register_checked_rule(rule: VerifierRule, *, exact: bool | None = None,
                          rounds: int = DEFAULT_ROUNDS, seed: int = 0, replace: bool = False
                          ) -> dict[str, VerifierReport]:
    """Check ``rule`` (:func:`check_rule`), then add it to the one rule table
    (:func:`treespec_sim.verify.register_rule`): the methods whose rules are read off the table
    and the ``verifiers`` family's arms then include it.

    A rule marked lossless that the check finds lossy is refused (``ValueError`` with the worst
    case); a rule marked lossy is registered as such whatever the check says (it is measured,
    never run, and its bias is reported). Returns the reports, by scheme.
    """
    reports = check_rule(rule, exact=exact, rounds=rounds, seed=seed)
    if rule.lossless:
        bad = {s: r for s, r in reports.items() if not r.lossless}
        if bad:
            scheme, rep = next(iter(bad.items()))
            raise ValueError(f"rule {rule.name!r} is marked lossless but the check found a "
                             f"loss on {scheme!r} draws; not registered (mark it lossless="
                             f"False to measure it):\n{rep.summary()}")
    register_rule(rule, replace=replace)
    return reports
