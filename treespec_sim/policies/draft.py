r"""The one draft type every builder returns: a tree and what its verifier must be told.

A deterministic builder (``chain``, ``ddtree``, ``caddtree``, ...) returns a :class:`Draft`
with no proposal; a sampled builder (sampled chains, Tsubame, sampled DDTree, ...) returns the
tree with the exact law each node's children were drawn from, the drawing scheme and the
temperature the proposal was tempered to. The verifier needs exactly these facts
(condition C4 of ``docs/theory/tsubame.md``): the rule must match the scheme, and the target must
sample at the proposal's temperature. Which rules match which scheme is read from the
verifier's one rule table (:data:`treespec_sim.verify.RULES`, through
:data:`~treespec_sim.verify.MATCHING_RULES`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..proposal import ProposalRows
from ..tree import DraftTree
from ..verify import MATCHING_RULES, RULES, check_chain

__all__ = ["Draft", "ProposalRows"]


@dataclass(frozen=True)
class Draft:
    """A drafted tree with what its verifier must be told.

    Attributes
    ----------
    tree : DraftTree
        Children in draw order.
    proposal : ProposalRows, ndarray float64 (n+1, V), or None
        Row ``v`` = the exact law ``v``'s children were drawn from (zeros, or any law, for
        leaves: never read); None for a deterministic tree. Sampled builders return
        :class:`ProposalRows`; a dense array is accepted as well.
    scheme : str
        ``"iid"``, ``"without_replacement"``, ``"greedy"`` or ``"deterministic"``.
    temperature : float or None
        The target temperature the draft is to be verified at (the target must sample at it);
        the proposal rows are tempered to it too, unless the builder was given its own
        ``proposal_temperature`` (the drafter's sampling law, ``docs/theory/tsubame.md`` §5):
        the rows are always the exact laws drawn from, which is what the verifier needs.
        None for a deterministic tree, which any target temperature may verify.
    """

    tree: DraftTree
    proposal: ProposalRows | np.ndarray | None = None
    scheme: str = "deterministic"
    temperature: float | None = None

    def __post_init__(self) -> None:
        if self.scheme not in MATCHING_RULES:
            raise ValueError(f"scheme must be one of {', '.join(MATCHING_RULES)}; "
                             f"got {self.scheme!r}")
        if (self.proposal is None) != (self.scheme == "deterministic"):
            raise ValueError("a deterministic draft has no proposal and a sampled draft needs "
                             f"one; got scheme {self.scheme!r} with proposal "
                             f"{'None' if self.proposal is None else 'rows'}")

    @property
    def sampled(self) -> bool:
        """Whether the tokens were drawn (the verifier needs :attr:`proposal`)."""
        return self.proposal is not None

    def check_rule(self, rule: str, *, target_temperature: float | None = None) -> None:
        """Raise ``ValueError`` if ``rule`` does not match the draws (C4), or if the target
        samples at a different temperature than the proposal was tempered to."""
        ok = MATCHING_RULES[self.scheme]
        spec = RULES.get(rule) if isinstance(rule, str) else None
        if spec is not None and not spec.lossless:
            raise ValueError(f"rule {rule!r} is lossy ({spec.bias}); it is measured, never "
                             "verified with: Round.lossy_facts(rule) gives its apparent E[tau] "
                             "and its bias, proofs_check.check_verifier its loss")
        if rule not in ok:
            raise ValueError(f"rule {rule!r} does not match {self.scheme!r} draws (exact rules: "
                             f"{', '.join(ok)})")
        if spec.chains_only:
            check_chain(self.tree)
        if (self.sampled and target_temperature is not None
                and float(target_temperature) != self.temperature):
            raise ValueError(
                f"temperature mismatch: the draft was sampled at T = {self.temperature!r} but "
                f"the target is verified at T = {target_temperature!r}; draw and verify at the "
                "same temperature")
