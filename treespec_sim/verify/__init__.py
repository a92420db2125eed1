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
    reconstruction); lossless for sequential draws and for Greedy drafts.

``"rrsw"``, ``"traversal"`` and the ``"univer*"`` rules verify sequential draws without
replacement in node order (``"univer-fixed"`` also Greedy drafts); ``"rrs"`` verifies i.i.d.
draws.

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
from .follow import follow_sample
from .outcome import Outcome
from .rrs import check_proposal, rrs_expected_length, rrs_round_law, rrs_sample
from .tev import tev_sample
from .traversal import traversal_expected_length, traversal_round_law, traversal_sample

__all__ = ["MATCHING_RULES", "RULES", "SCHEMES", "SCHEME_FOR_RULE", "Outcome", "VerifierRule",
           "expected_length", "verify"]


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

    def __post_init__(self) -> None:
        bad = [s for s in self.schemes if s not in SCHEMES]
        if bad or not self.schemes or (
                "deterministic" in self.schemes and len(self.schemes) > 1):
            raise ValueError(f"rule {self.name!r}: schemes must be a non-empty tuple of "
                             f"{', '.join(SCHEMES)} ('deterministic' alone); "
                             f"got {self.schemes!r}")

    @property
    def needs_proposal(self) -> bool:
        """Whether the rule verifies drawn tokens (and so needs the proposal rows)."""
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

    return VerifierRule(name, (scheme,), sample, length, description, law)


def _scaled_rule(name: str, description: str, schemes=("without_replacement",),
                 variant_of: str | None = None) -> VerifierRule:
    def sample(tree, oracle, rng, proposal):
        return traversal_sample(tree, oracle, rng, proposal, step=name)

    def length(tree, oracle, proposal):
        return traversal_expected_length(tree, oracle, proposal, step=name)

    def law(tree, oracle, proposal):
        return traversal_round_law(tree, oracle, proposal, step=name)

    return VerifierRule(name, schemes, sample, length, description, law, variant_of)


#: The one rule table: every rule by name, with the drawing schemes it is exact for.
#: :data:`MATCHING_RULES` and :data:`SCHEME_FOR_RULE` are read off it.
RULES: dict[str, VerifierRule] = {r.name: r for r in (
    VerifierRule("follow", ("deterministic",), lambda t, o, rng, _p: follow_sample(t, o, rng),
                 _exit_law_length, "predraw-and-follow (DDTree); deterministic trees",
                 length_from_exit_law=_length_of_exit_law),
    VerifierRule("tev", ("deterministic",), lambda t, o, rng, _p: tev_sample(t, o, rng),
                 _exit_law_length,
                 "exit-law sampling + residual bonus (TEV); deterministic trees",
                 length_from_exit_law=_length_of_exit_law),
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
)}

#: Scheme -> the rules exact for its draws, in table order (derived from :data:`RULES`).
MATCHING_RULES: dict[str, tuple[str, ...]] = {
    scheme: tuple(name for name, r in RULES.items() if scheme in r.schemes)
    for scheme in SCHEMES}

#: Sampled-tree rule -> the scheme a builder that picks its draws from the rule draws with
#: (the rule's first scheme; derived from :data:`RULES`).
SCHEME_FOR_RULE: dict[str, str] = {name: r.schemes[0] for name, r in RULES.items()
                                   if r.needs_proposal}


def _rule(rule: str, proposal) -> VerifierRule:
    if not isinstance(rule, str) or rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; known rules: {', '.join(sorted(RULES))}")
    spec = RULES[rule]
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


def _proposal(spec: VerifierRule, proposal, tree: DraftTree):
    if not spec.needs_proposal:
        return None
    return check_proposal(proposal, tree, without_replacement=spec.without_replacement)
