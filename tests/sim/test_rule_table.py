"""The one rule table: each verifier rule knows its drawing schemes; everything else reads it.

``treespec_sim.verify.RULES`` is the only place that says which rules suit which drawing
scheme; ``MATCHING_RULES``, ``SCHEME_FOR_RULE``, the drafts' rule check and the methods' rules
are derived from it, and no module of the packages spells a tuple or list of rule names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from treespec_sim.methods import METHODS, rules_for
from treespec_sim.policies import SAMPLING_SCHEMES, Draft
from treespec_sim.verify import MATCHING_RULES, RULES, SCHEME_FOR_RULE, SCHEMES, lossy_rules

ROOT = Path(__file__).resolve().parents[2]


def test_maps_are_read_off_the_table():
    assert set(MATCHING_RULES) == set(SCHEMES)
    for scheme, rules in MATCHING_RULES.items():
        assert rules == tuple(r for r in RULES if scheme in RULES[r].schemes
                              and RULES[r].lossless)
    assert SCHEME_FOR_RULE == {r: spec.schemes[0] for r, spec in RULES.items()
                               if spec.needs_proposal and spec.lossless
                               and not spec.chains_only
                               and spec.schemes != ("deterministic",)}
    assert SAMPLING_SCHEMES == tuple(s for s in SCHEMES if s != "deterministic")
    for spec in RULES.values():
        if spec.takes_proposal is None:
            assert spec.needs_proposal == (spec.schemes != ("deterministic",))
        assert spec.without_replacement == ("without_replacement" in spec.schemes)
        assert spec.variant_of is None or spec.variant_of in RULES
        assert spec.lossless or (spec.first_token_law is not None and spec.bias)


def test_lossy_rules_are_never_a_methods_rule():
    lossy = lossy_rules("deterministic")
    assert {"sibling-ratio", "sample-match[acc=0.7]", "sample-match[single=0.5]"} <= set(lossy)
    for m in METHODS.values():
        for t in (0.0, 1.0):
            assert not set(lossy) & set(m.lossless_rules(t)), m.name
    for scheme in SCHEMES:
        assert not set(lossy) & set(MATCHING_RULES[scheme])


def test_chain_only_rules_are_only_chain_methods_rules():
    assert RULES["block"].chains_only
    for m in METHODS.values():
        chains = m.rules_from is not None and m.rules_from.chains
        assert ("block" in m.rules) == chains, m.name
    assert "block" not in rules_for("iid") and "block" in rules_for("iid", chains=True)


def test_every_method_rule_matches_its_scheme():
    for m in METHODS.values():
        allowed = (m.rules_from.rules() if m.rules_from is not None
                   else rules_for(m.scheme))
        assert m.rules and set(m.rules) <= set(allowed), m.name
        assert set(m.rules) <= set(rules_for(m.scheme, chains=True)), m.name


def test_rules_for_puts_the_default_first():
    assert rules_for("without_replacement", default="univer")[0] == "univer"
    assert set(rules_for("by-rule")) == set(SCHEME_FOR_RULE)
    with pytest.raises(ValueError, match="no rule"):
        rules_for("iid", default="follow")


def test_a_bad_scheme_in_the_table_is_refused():
    spec = RULES["rrs"]
    with pytest.raises(ValueError, match="schemes"):
        type(spec)("bad", ("sometimes",), spec.sample, spec.expected_length, "")
    with pytest.raises(ValueError, match="schemes"):
        type(spec)("bad", ("deterministic", "iid"), spec.sample, spec.expected_length, "")


def test_draft_check_reads_the_table():
    import numpy as np

    from treespec_sim import DraftTree

    tree = DraftTree.from_parents(np.array([-1, 0]), np.array([-1, 1]))
    draft = Draft(tree, np.full((2, 2), 0.5), "greedy", 1.0)
    for rule in RULES:
        if "greedy" in RULES[rule].schemes:
            draft.check_rule(rule)
        else:
            with pytest.raises(ValueError, match=r"does not match|is lossy"):
                draft.check_rule(rule)


def test_draft_check_refuses_lossy_rules_and_branching_trees_for_chain_rules():
    import numpy as np

    from treespec_sim import DraftTree

    det = Draft(DraftTree.from_parents([-1, 0, 0], [-1, 0, 1]))
    with pytest.raises(ValueError, match="is lossy"):
        det.check_rule("sibling-ratio")
    det.check_rule("sample-match")
    branching = Draft(DraftTree.from_parents_multiset([-1, 0, 0], [-1, 0, 0]),
                      np.full((3, 2), 0.5), "iid", 1.0)
    with pytest.raises(ValueError, match="verifies chains"):
        branching.check_rule("block")
    chain = Draft(DraftTree.from_parents([-1, 0, 1], [-1, 0, 0]), np.full((3, 2), 0.5), "iid",
                  1.0)
    chain.check_rule("block")


def _literal_rule_sequences(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2:
            names = [e.value for e in node.elts
                     if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(names) == len(node.elts) and sum(n in RULES for n in names) >= 2:
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {names}")
    return out


def test_no_literal_rule_tuples_outside_the_table():
    table = ROOT / "treespec_sim" / "verify" / "__init__.py"
    found = [hit for pkg in ("treespec_sim", "real_models")
             for path in sorted((ROOT / pkg).rglob("*.py")) if path != table
             for hit in _literal_rule_sequences(path)]
    assert not found, "rule names spelled outside the rule table:\n" + "\n".join(found)
