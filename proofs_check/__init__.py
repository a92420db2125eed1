"""The theory as executable checks (``python -m proofs_check``), and the check of any verifier.

``check_verifier(fn, scheme=...)`` tests a verifier -- yours, an engine's, one of the rule
table's -- for losslessness (:mod:`proofs_check.checker`, ``docs/check_your_verifier.md``);
``register_checked_rule(rule)`` checks a rule and adds it to the one rule table.
"""

from .checker import (
    PLANTED_TV,
    VerifierReport,
    check_rule,
    check_verifier,
    law_sampler,
    plant_loss,
    register_checked_rule,
    rule_law,
    rule_sampler,
)

__all__ = ["PLANTED_TV", "VerifierReport", "check_rule", "check_verifier", "law_sampler",
           "plant_loss", "register_checked_rule", "rule_law", "rule_sampler"]
