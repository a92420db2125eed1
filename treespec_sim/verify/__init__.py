r"""Verifiers: sample an outcome, or compute the exact expected round length.

``verify(tree, target_rows, *, rule, rng, proposal=None) -> Outcome`` and
``expected_length(tree, target_rows, *, rule, proposal=None) -> float``.

Rules for deterministic trees (tokens fixed by the policy; no proposal):

``"follow"``
    predraw-and-follow (DDTree), :mod:`.follow`;
``"tev"``
    exit-law sampling (TEV), :mod:`.tev`.

Rules for sampled trees (``proposal[v]`` = the law ``v``'s children were drawn from):

``"rrs"``
    recursive rejection sampling, i.i.d. siblings (SpecInfer), :mod:`.rrs`;
``"rrsw"``
    the same without replacement (RSD / Sequoia), :mod:`.rrs`;
``"traversal"``
    Traversal verification (leaf to root, prefix acceptance weights), :mod:`.traversal`;
``"univer"``
    UniVer (a reconstruction), *safe* step choice: Traversal's recursion with the exact best
    horizontal step at nodes whose children are all leaves; lossless and never below
    ``"traversal"`` (:mod:`.univer`, ``docs/theory/univer.md``);
``"univer-guided"``
    UniVer with a value-guided step at every node (child weights = subtree sizes); lossless,
    no guarantee;
``"univer-fixed"``
    the conditional step at every node (hold the first ``k-1`` draws; the earlier
    reconstruction); lossless for sequential draws and for Greedy drafts;
``"block"``
    block verification of a drafted chain (Sun et al.; what vLLM ships), :mod:`.block`;
    chains only (every node at most one child).

Rules the engines ship for deterministic trees:

``"sample-match"``
    SGLang's target-only sample-and-match with both thresholds at 1 (:mod:`.match`); the law of
    ``"follow"``, read off the target alone.

Lossy rules (``VerifierRule.lossless`` False): in the table so that their apparent
:math:`E[\tau]` and their bias can be measured beside the exact rules, never a method's rule,
never in :data:`MATCHING_RULES`, refused by ``run_round``:

``"sample-match[acc=0.7]"``, ``"sample-match[single=0.5]"``
    SGLang's sample-and-match with a threshold below 1 (:func:`sample_match_rule` makes any
    other pair);
``"sibling-ratio"``
    ``min(1, p/q)`` per child in sibling order on a top-k tree (:mod:`.ratio`; the rule
    warpfront/hipfire PR #483 measured as a net loss).

``"rrsw"``, ``"traversal"`` and the ``"univer*"`` rules verify sequential draws without
replacement in node order (``"univer-fixed"`` also Greedy drafts); ``"rrs"`` verifies i.i.d.
draws.

A rule of your own: :func:`register_rule` (``proofs_check.register_checked_rule`` checks it for
losslessness first); the maps below, the methods' rules and the sweep's verifier arms follow.

``expected_length`` is exact over the verifier's own randomness with the tree fixed. For the
deterministic rules the round ends at node ``v`` with probability :math:`w(v)` (the exit law)
and commits ``depth(v) + 1`` tokens, so :math:`E[\tau] = \sum_v w(v)\,(1 + \mathrm{depth}(v))`.
That this equals :math:`1 + C_p(T)` (the coverage bound is saturated) is a theorem the tests
check. The sampled-tree rules compute it by their own exact recursions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..exits import exit_law
from ..rows import TargetOracle, as_oracle
from ..tree import DraftTree
from ..validation import check_rng
from .block import block_chain_law, block_expected_length, block_sample, check_chain
from .follow import follow_sample
from .match import (
    MatchThresholds,
    match_expected_length,
    match_first_token_law,
    match_round_law,
    match_sample,
)
from .outcome import Outcome
from .ratio import ratio_expected_length, ratio_first_token_law, ratio_round_law, ratio_sample
from .rrs import check_proposal, rrs_expected_length, rrs_round_law, rrs_sample
from .tev import tev_sample
from .traversal import traversal_expected_length, traversal_round_law, traversal_sample

__all__ = ["MATCHING_RULES", "RULES", "SCHEMES", "SCHEME_FOR_RULE", "MatchThresholds", "Outcome",
           "VerifierRule", "check_chain", "expected_length", "first_token_law", "get_rule",
           "lossy_rules", "on_register", "register_rule", "sample_match_rule", "verify"]


#: The ways a tree's tokens can be chosen: ``"deterministic"`` (chosen, not drawn: any
#: deterministic builder, and the ``T = 0`` top-k fill of a sampled one), i.i.d. draws,
#: sequential draws without replacement in node order, and Greedy drafts (the top ``k-1``
#: tokens and one draw). A rule lists the schemes whose draws it is exact for (condition C4 of
#: ``docs/theory/tsubame.md``).
SCHEMES = ("deterministic", "iid", "without_replacement", "greedy")


@dataclass(frozen=True)
class VerifierRule:
    """A verification rule: the draws it is exact for, how to sample one round and how to
    compute its exact E[tau]."""

    name: str
    #: The drawing schemes (:data:`SCHEMES`) this rule is exact for; the first is the one a
    #: sampled builder that picks its scheme from the rule draws with.
    schemes: tuple[str, ...]
    #: ``sample(tree, oracle, rng, proposal) -> Outcome`` (proposal None for deterministic)
    sample: Callable[..., Outcome]
    #: ``expected_length(tree, oracle, proposal) -> float``
    expected_length: Callable[..., float]
    description: str
    #: ``round_law(tree, oracle, proposal) -> {emitted tokens: probability}``, exact, for the
    #: sampled-tree rules (the deterministic rules' laws live in ``proofs_check.enumerate``)
    round_law: Callable[..., dict[tuple[int, ...], float]] | None = None
    #: The rule this one is a variant of (``"univer-guided"`` and ``"univer-fixed"`` of
    #: ``"univer"``); None for a rule of its own.
    variant_of: str | None = None
    #: ``length_from_exit_law(tree, w) -> float``: :attr:`expected_length` from the tree's exit
    #: law ``w`` (:func:`~treespec_sim.exits.exit_law`), for the rules whose length is read off
    #: it (the deterministic ones): a round that has ``w`` already reuses it (the same floats).
    length_from_exit_law: Callable[[DraftTree, np.ndarray], float] | None = None
    #: Whether the rule emits the target's law on the draws of its schemes. A lossy rule
    #: (False) is measured, never run: it is in no :data:`MATCHING_RULES` entry, no method
    #: lists it and ``run_round`` refuses it; its :attr:`schemes` are the draws it is *meant*
    #: for, and :attr:`bias` says how it departs from the target.
    lossless: bool = True
    #: Exact for chains only (every node at most one child): a branching tree is refused, and
    #: only chain methods list the rule.
    chains_only: bool = False
    #: Whether :attr:`sample` reads proposal rows; None: exactly when the rule verifies drawn
    #: tokens (``schemes != ("deterministic",)``). A rule for deterministic trees that reads the
    #: drafter's rows (``"sibling-ratio"``) sets True.
    takes_proposal: bool | None = None
    #: ``first_token_law(tree, oracle, proposal) -> (V,)``: the exact law of the round's first
    #: emitted token; required of a lossy rule (its bias is the total-variation distance of this
    #: law from the target's root row), optional otherwise.
    first_token_law: Callable[..., np.ndarray] | None = None
    #: For a lossy rule: how it departs from the target (one sentence).
    bias: str = ""
    #: The rule's own work per round beyond the target's forward pass (one phrase).
    cost: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or any(c.isspace() for c in self.name):
            raise ValueError(f"rule name must be a non-empty string without spaces; got "
                             f"{self.name!r}")
        if not isinstance(self.schemes, tuple):
            raise ValueError(f"rule {self.name!r}: schemes must be a tuple; got "
                             f"{self.schemes!r}")
        bad = [s for s in self.schemes if s not in SCHEMES]
        if bad or not self.schemes or (
                "deterministic" in self.schemes and len(self.schemes) > 1):
            raise ValueError(f"rule {self.name!r}: schemes must be a non-empty tuple of "
                             f"{', '.join(SCHEMES)} ('deterministic' alone); "
                             f"got {self.schemes!r}")
        for field_name in ("sample", "expected_length"):
            if not callable(getattr(self, field_name)):
                raise ValueError(f"rule {self.name!r}: {field_name} must be callable")
        for field_name in ("round_law", "length_from_exit_law", "first_token_law"):
            f = getattr(self, field_name)
            if f is not None and not callable(f):
                raise ValueError(f"rule {self.name!r}: {field_name} must be callable or None")
        if not self.lossless and (self.first_token_law is None or not self.bias):
            raise ValueError(f"rule {self.name!r} is marked lossy: it needs first_token_law "
                             "(its bias is measured from it) and a bias description")

    @property
    def needs_proposal(self) -> bool:
        """Whether the rule reads proposal rows (by default: it verifies drawn tokens)."""
        if self.takes_proposal is not None:
            return bool(self.takes_proposal)
        return self.schemes != ("deterministic",)

    @property
    def without_replacement(self) -> bool:
        """Whether the rule verifies sequential draws without replacement (each later
        sibling's law is renormalised off the earlier ones)."""
        return "without_replacement" in self.schemes


def _length_of_exit_law(tree: DraftTree, w: np.ndarray) -> float:
    """``E[tau] = sum_v w(v) (1 + depth(v))``: the walk stops at its exit node ``v`` and
    commits its ``depth(v)`` tokens and the bonus."""
    return float(np.dot(w, 1.0 + tree.depth))


def _exit_law_length(tree: DraftTree, oracle: TargetOracle, proposal=None) -> float:
    return _length_of_exit_law(tree, exit_law(tree, oracle))


def _rrs_rule(name: str, scheme: str, description: str) -> VerifierRule:
    without_replacement = scheme == "without_replacement"

    def sample(tree, oracle, rng, proposal):
        return rrs_sample(tree, oracle, rng, proposal, without_replacement=without_replacement)

    def length(tree, oracle, proposal):
        return rrs_expected_length(tree, oracle, proposal,
                                   without_replacement=without_replacement)

    def law(tree, oracle, proposal):
        return rrs_round_law(tree, oracle, proposal, without_replacement=without_replacement)

    return VerifierRule(name, (scheme,), sample, length, description, law,
                        cost="O(V) per tried child, sequential over siblings")


def _scaled_rule(name: str, description: str, schemes=("without_replacement",),
                 variant_of: str | None = None) -> VerifierRule:
    def sample(tree, oracle, rng, proposal):
        return traversal_sample(tree, oracle, rng, proposal, step=name)

    def length(tree, oracle, proposal):
        return traversal_expected_length(tree, oracle, proposal, step=name)

    def law(tree, oracle, proposal):
        return traversal_round_law(tree, oracle, proposal, step=name)

    cost = {"traversal": "O(V) per node, sequential leaf to root",
            "univer": "as traversal, plus the exact step choice at nodes whose children are "
                      "leaves",
            "univer-guided": "as traversal, plus a value-guided step choice at every node",
            }.get(name, "as traversal (another horizontal step)")
    return VerifierRule(name, schemes, sample, length, description, law, variant_of, cost=cost)


def sample_match_rule(single: float = 1.0, acc: float = 1.0) -> VerifierRule:
    """SGLang's target-only sample-and-match with thresholds ``single`` and ``acc`` as a rule:
    ``"sample-match"`` (lossless) at ``(1, 1)``, else lossy, named
    ``"sample-match[single=..,acc=..]"`` with the thresholds below 1 (:mod:`.match`).
    Register it with :func:`register_rule` to measure it in the sweep."""
    th = MatchThresholds(single, acc)

    def sample(tree, oracle, rng, _p):
        return match_sample(tree, oracle, rng, thresholds=th)

    def length(tree, oracle, _p):
        return match_expected_length(tree, oracle, thresholds=th)

    def law(tree, oracle, _p):
        return match_round_law(tree, oracle, thresholds=th)

    def first(tree, oracle, _p):
        return match_first_token_law(tree, oracle, thresholds=th)

    name = "sample-match" if th.lossless else f"sample-match[{th.label}]"
    what = ("SGLang's target-only sample-and-match (thresholds 1): the law of follow, "
            "target probabilities only" if th.lossless else
            f"SGLang's sample-and-match with threshold {th.label.replace(',', ', ')}")
    bias = "" if th.lossless else (
        "accepts a child whenever " + " or ".join(
            ([f"its target probability >= {th.single:g}"] if th.single < 1 else [])
            + ([f"the node's uniform <= (running target sum) / {th.acc:g}"] if th.acc < 1
               else [])) + ": more often than the target draws it")
    return VerifierRule(name, ("deterministic",), sample, length, what, law,
                        lossless=th.lossless, first_token_law=first, bias=bias,
                        cost="one uniform and O(k) target lookups per visited node; the bonus "
                             "row O(V)")


def _block_rule() -> VerifierRule:
    return VerifierRule(
        "block", ("iid", "without_replacement"), block_sample, block_expected_length,
        "block verification of a drafted chain (Sun et al. 2025; vLLM): the largest passing "
        "index of sequence-level weights", block_chain_law, chains_only=True,
        cost="gamma uniforms and O(gamma V) residual masses, parallel over positions")


def _ratio_rule() -> VerifierRule:
    return VerifierRule(
        "sibling-ratio", ("deterministic",), ratio_sample, ratio_expected_length,
        "min(1, p/q) per child in sibling order on a top-k tree, bonus from norm((p - q)+) "
        "(warpfront/hipfire PR #483)", ratio_round_law, lossless=False, takes_proposal=True,
        first_token_law=ratio_first_token_law,
        bias="top-k children were chosen, not drawn from q, and every sibling is judged "
             "against the untouched p and q",
        cost="one uniform per tried child, O(k) lookups per node; the bonus row O(V)")


#: The one rule table: every rule by name, with the drawing schemes it is exact for (or, for a
#: lossy rule, meant for). :data:`MATCHING_RULES` and :data:`SCHEME_FOR_RULE` are read off it.
RULES: dict[str, VerifierRule] = {r.name: r for r in (
    VerifierRule("follow", ("deterministic",), lambda t, o, rng, _p: follow_sample(t, o, rng),
                 _exit_law_length, "predraw-and-follow (DDTree); deterministic trees",
                 length_from_exit_law=_length_of_exit_law,
                 cost="one target draw, O(V), per visited node"),
    VerifierRule("tev", ("deterministic",), lambda t, o, rng, _p: tev_sample(t, o, rng),
                 _exit_law_length,
                 "exit-law sampling + residual bonus (TEV); deterministic trees",
                 length_from_exit_law=_length_of_exit_law,
                 cost="the exit law, O(n) gathers level-parallel, and one O(V) bonus row"),
    _rrs_rule("rrs", "iid", "recursive rejection sampling, i.i.d. siblings (SpecInfer)"),
    _rrs_rule("rrsw", "without_replacement",
              "recursive rejection sampling without replacement (RSD)"),
    _scaled_rule("traversal", "Traversal verification: post-order, prefix acceptance weights "
                 "(Weng et al. 2025)"),
    _scaled_rule("univer", "UniVer (reconstruction), safe: exact best horizontal step where "
                 "all children are leaves, Traversal elsewhere; >= Traversal"),
    _scaled_rule("univer-guided", "UniVer (reconstruction), value-guided step at every node "
                 "(weights = subtree sizes); no guarantee", variant_of="univer"),
    _scaled_rule("univer-fixed", "UniVer (reconstruction), conditional step at every node "
                 "(Greedy plan given earlier draws)", ("without_replacement", "greedy"),
                 variant_of="univer"),
    _block_rule(),
    sample_match_rule(),
    sample_match_rule(acc=0.7),
    sample_match_rule(single=0.5),
    _ratio_rule(),
)}

#: Scheme -> the lossless rules exact for its draws, in table order (derived from
#: :data:`RULES`; chain-only rules included: a chain's draws are of every sampled scheme).
MATCHING_RULES: dict[str, tuple[str, ...]] = {}

#: Sampled-tree rule -> the scheme a builder that picks its draws from the rule draws with
#: (the rule's first scheme; derived from :data:`RULES`): the lossless rules that read a
#: proposal and verify any tree shape (chain-only rules are for chain methods).
SCHEME_FOR_RULE: dict[str, str] = {}

#: Called with the rule after :func:`register_rule` added it and refreshed the maps.
_LISTENERS: list[Callable[[VerifierRule], None]] = []


def _derive_maps() -> None:
    """Refresh :data:`MATCHING_RULES` and :data:`SCHEME_FOR_RULE` in place (other modules hold
    these very dicts)."""
    MATCHING_RULES.clear()
    MATCHING_RULES.update({scheme: tuple(name for name, r in RULES.items()
                                         if r.lossless and scheme in r.schemes)
                           for scheme in SCHEMES})
    SCHEME_FOR_RULE.clear()
    SCHEME_FOR_RULE.update({name: r.schemes[0] for name, r in RULES.items()
                            if r.lossless and r.needs_proposal and not r.chains_only
                            and r.schemes != ("deterministic",)})


_derive_maps()


def lossy_rules(scheme: str) -> tuple[str, ...]:
    """The lossy rules of the table meant for ``scheme``'s draws, in table order."""
    return tuple(name for name, r in RULES.items() if not r.lossless and scheme in r.schemes)


def register_rule(rule: VerifierRule, *, replace: bool = False) -> VerifierRule:
    """Add ``rule`` to the one rule table; :data:`MATCHING_RULES`, :data:`SCHEME_FOR_RULE`,
    the methods' lossless rules (:mod:`treespec_sim.methods`) and the sweep's verifier arms
    follow.

    Checked here: the entry itself (a :class:`VerifierRule`: its schemes, callables, a lossy
    rule's first-token law and bias; ``VerifierRule.__post_init__``) and its name (new, unless
    ``replace``). That a rule marked lossless *is* lossless cannot be checked here (the
    simulator does not import the checks): ``proofs_check.register_checked_rule`` runs
    ``proofs_check.check_verifier`` on it first and registers it only if no loss is found.
    """
    if not isinstance(rule, VerifierRule):
        raise ValueError(f"rule must be a VerifierRule; got {type(rule).__name__}")
    if rule.name in RULES and not replace:
        raise ValueError(f"rule {rule.name!r} is already in the rule table (replace=True to "
                         "override)")
    RULES[rule.name] = rule
    _derive_maps()
    for listener in list(_LISTENERS):
        listener(rule)
    return rule


def on_register(listener: Callable[[VerifierRule], None]) -> None:
    """Call ``listener(rule)`` after every :func:`register_rule` (the method registry
    re-derives its methods' rules this way)."""
    _LISTENERS.append(listener)


def get_rule(rule: str) -> VerifierRule:
    """The table's entry for ``rule``; ``ValueError`` naming the known rules otherwise."""
    if not isinstance(rule, str) or rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; known rules: {', '.join(sorted(RULES))}")
    return RULES[rule]


def _rule(rule: str, proposal) -> VerifierRule:
    spec = get_rule(rule)
    if spec.needs_proposal and proposal is None:
        raise ValueError(f"rule {rule!r} needs a proposal: the (n+1, V) laws the children of "
                         f"each node were drawn from")
    if not spec.needs_proposal and proposal is not None:
        raise ValueError(f"rule {rule!r} verifies deterministic trees and takes no proposal; "
                         f"pass proposal=None")
    return spec


def verify(tree: DraftTree, target_rows, *, rule: str, rng: np.random.Generator,
           proposal=None) -> Outcome:
    """Verify ``tree`` against the target once.

    Parameters
    ----------
    tree : DraftTree
    target_rows : ndarray float64 (n+1, V) or target oracle
        Row ``v`` = target's next-token law after the path to node ``v``.
    rule : str
        One of :data:`RULES`.
    rng : numpy.random.Generator
    proposal : ndarray float64 (n+1, V) or ProposalRows, optional
        For sampled trees: row ``v`` = the law ``v``'s children were drawn from (a sampled
        builder's :class:`~treespec_sim.proposal.ProposalRows` is read row by row, never
        densified).

    Returns
    -------
    Outcome
    """
    spec = _rule(rule, proposal)
    check_rng(rng)
    oracle = as_oracle(target_rows, tree)
    return spec.sample(tree, oracle, rng, _proposal(spec, proposal, tree))


def expected_length(tree: DraftTree, target_rows, *, rule: str, proposal=None) -> float:
    """Exact expected tokens per round, :math:`E[\\tau]` (bonus included), for fixed tokens."""
    spec = _rule(rule, proposal)
    oracle = as_oracle(target_rows, tree)
    return spec.expected_length(tree, oracle, _proposal(spec, proposal, tree))


def first_token_law(tree: DraftTree, target_rows, *, rule: str, proposal=None) -> np.ndarray:
    """Exact law of the first token a round of ``rule`` emits, float64 (V,) (tokens fixed).

    For a lossless rule this is the target's root row only on average over the draws; for a
    lossy rule its distance from the root row is the rule's bias on this tree. Needs the
    rule's ``first_token_law`` (every lossy rule has one).
    """
    spec = _rule(rule, proposal)
    if spec.first_token_law is None:
        raise ValueError(f"rule {rule!r} has no first_token_law in the rule table")
    oracle = as_oracle(target_rows, tree)
    return spec.first_token_law(tree, oracle, _proposal(spec, proposal, tree))


def _proposal(spec: VerifierRule, proposal, tree: DraftTree):
    if spec.chains_only:
        check_chain(tree)
    if not spec.needs_proposal:
        return None
    return check_proposal(proposal, tree, without_replacement=spec.without_replacement)
