"""``proofs_check.check_verifier``: any verifier checked for losslessness in one call.

The check must pass every lossless rule of the table and fail the known-buggy ones (the
catalogue, exact and sampled), find a planted loss of TV 0.02 at its default sample size, hand
the verifier NaN proposal rows at leaves, refuse outputs that are not a round's, and register
only the rules it passes. Seeds are fixed, so each outcome is deterministic; the false-alarm
rate of the sampled check is its ``level`` (0.01).
"""

from __future__ import annotations

import numpy as np
import pytest

from proofs_check import (
    PLANTED_TV,
    check_verifier,
    law_sampler,
    plant_loss,
    register_checked_rule,
    rule_law,
    rule_sampler,
)
from proofs_check.buggy import BUGGY_VARIANTS
from proofs_check.checker import (
    DEFAULT_ROUNDS,
    EXACT_TOL,
    SCHEMES,
    VerifierOutputError,
    catalogue,
    draft_round,
    make_cases,
)
from treespec_sim.verify import RULES, VerifierRule, first_token_law

#: Every lossless rule of the table with a scheme the checker draws.
LOSSLESS = [(rule, "chain" if RULES[rule].chains_only else s)
            for rule in RULES if RULES[rule].lossless
            for s in RULES[rule].schemes[:1] if s in SCHEMES]


def test_every_lossless_rule_passes_the_exact_check():
    assert {"follow", "tev", "sample-match", "rrs", "rrsw", "traversal", "univer",
            "block"} <= {r for r, _ in LOSSLESS}
    for rule, scheme in LOSSLESS:
        rep = check_verifier(law=rule_law(rule), scheme=scheme)
        assert rep.lossless, (rule, rep.summary())
        assert max(c.gap for c in rep.cases) <= EXACT_TOL
        assert max(c.tv for c in rep.cases) < 1e-12


@pytest.mark.parametrize("name", sorted(catalogue()))
def test_every_catalogue_variant_fails_the_exact_check(name):
    scheme, variant = catalogue()[name]
    rep = check_verifier(law=variant.law, scheme=scheme)
    assert not rep.lossless, name
    assert rep.worst.gap > EXACT_TOL


def test_catalogue_covers_the_engines_bugs():
    names = set(catalogue())
    assert {"sibling_order_ratio", "sample_match_acc_below_1", "sample_match_single_below_1",
            "sample_match_on_iid_draws", "block_first_failure", "block_tokenwise_residual",
            "hf_ensemble_weight_0.5", "soft_q_on_deterministic_drafts"} <= names
    # drafting bugs are outside a verifier check (the checker draws the trees itself)
    assert "temperature_mismatch" not in names and "post_hoc_pruning" not in names
    assert set(BUGGY_VARIANTS) >= names


def test_sibling_order_rule_is_found_lossy_at_the_default_size():
    rep = check_verifier(rule_sampler("sibling-ratio"), scheme="deterministic")
    assert not rep.lossless
    assert rep.family_p < 1e-6
    w = rep.worst
    assert w.tv_low > 0.1  # a large bias, its interval well away from 0
    assert w.first_token_law.shape == w.target_root.shape == w.proposal_root.shape
    assert "LOSS FOUND" in rep.summary() and "worst case" in rep.summary()


@pytest.mark.parametrize("rule, scheme", [("sample-match", "deterministic"), ("follow",
                                                                              "deterministic"),
                                          ("rrs", "iid"), ("block", "chain")])
def test_lossless_rules_pass_the_sampled_check_at_the_default_size(rule, scheme):
    rep = check_verifier(rule_sampler(rule), scheme=scheme)
    assert rep.lossless, rep.summary()
    assert rep.power.pooled >= 0.85  # a TV-0.02 loss in every case would be found
    for c in rep.cases:
        assert c.tv_low == 0.0 or c.tv_low < 0.02
        assert c.rounds >= DEFAULT_ROUNDS


@pytest.mark.parametrize("rule", ["rrsw", "traversal", "univer"])
def test_sequential_rules_pass_the_sampled_check(rule):
    rep = check_verifier(rule_sampler(rule), scheme="without_replacement", rounds=1200)
    assert rep.lossless, rep.summary()


def test_a_planted_loss_of_tv_002_is_found_at_the_default_size():
    """Power: the least detectable loss of TV 0.02 planted in a lossless verifier."""
    rep = check_verifier(rule_sampler("follow"), scheme="deterministic", planted=True)
    assert rep.lossless
    assert rep.power.tv == PLANTED_TV == 0.02
    assert rep.power.pooled >= 0.85
    assert rep.power.planted_found is True and rep.power.planted_p < rep.level
    # the plant's loss is the stated one: the first-token TV intervals hold 0.02
    planted = check_verifier(plant_loss(rule_sampler("follow")), scheme="deterministic")
    assert not planted.lossless
    assert sum(c.tv_low <= PLANTED_TV <= c.tv_high for c in planted.cases) >= 5


def test_planted_loss_is_exactly_the_stated_tv():
    """The plant moves mass in proportion between two halves of the root row."""
    rng = np.random.default_rng(3)
    tree_rows = rng.dirichlet(np.ones(5), size=1)
    from treespec_sim import DraftTree
    tree = DraftTree.root_only()
    fn = plant_loss(lambda t, r, q, g: [int(g.choice(5, p=r[0]))], tv=0.05)
    n = 60_000
    counts = np.bincount([fn(tree, tree_rows, np.full((1, 5), np.nan), rng)[0]
                          for _ in range(n)], minlength=5)
    tv = 0.5 * np.abs(counts / n - tree_rows[0]).sum()
    assert abs(tv - 0.05) < 0.01


def test_buggy_variants_are_caught_by_the_sampled_check():
    """The engines' bugs, run as samplers of their exact laws (the catalogue's power)."""
    for name in ("sibling_order_ratio", "sample_match_acc_below_1",
                 "sample_match_single_below_1", "hf_ensemble_weight_0.5",
                 "block_first_failure", "soft_q_on_deterministic_drafts"):
        scheme, variant = catalogue()[name]
        rep = check_verifier(law_sampler(variant.law), scheme=scheme, rounds=1500)
        assert not rep.lossless, name


@pytest.mark.parametrize("rule", [r for r in RULES if not RULES[r].lossless])
def test_the_tables_lossy_rules_are_caught_through_verify(rule):
    """The lossy rules the sweep measures, run as the sweep runs them (``verify``, the
    table's sampler) and by their exact round law: both checks find the loss, and the exact
    first-token law the sweep reports lies inside the sampled check's TV intervals."""
    scheme = RULES[rule].schemes[0]
    sampled = check_verifier(rule_sampler(rule), scheme=scheme, rounds=1500)
    assert not sampled.lossless, sampled.summary()
    exact = check_verifier(law=rule_law(rule), scheme=scheme)
    assert not exact.lossless and max(c.gap for c in exact.cases) > 1e-3
    for c, case in zip(sampled.cases, make_cases(scheme), strict=True):
        # deterministic trees: every sequence's first round verifies the same tree
        tree, rows, prop = draft_round(case, scheme, (), np.random.default_rng(0))
        law = first_token_law(tree, rows, rule=rule,
                              proposal=prop if RULES[rule].needs_proposal else None)
        exact_tv = 0.5 * float(np.abs(law - rows[0]).sum())
        assert c.tv_low <= exact_tv <= c.tv_high, (c.index, c.tv_low, exact_tv, c.tv_high)


def test_the_verifier_sees_nan_proposal_rows_at_leaves_and_fresh_copies():
    seen = []

    def spy(tree, target_rows, proposal, rng):
        inner = np.zeros(tree.n_nodes, dtype=bool)
        inner[tree.parent[1:]] = True
        seen.append((np.isnan(proposal[~inner]).all(), np.isfinite(proposal[inner]).all(),
                     np.allclose(target_rows.sum(axis=1), 1.0)))
        target_rows[:] = 0.0  # scribbling on the inputs must not change the check
        return [0]  # a bonus only: valid, if not lossless

    for scheme in SCHEMES:
        seen.clear()
        check_verifier(spy, scheme=scheme, rounds=20, cases=2)
        assert seen and all(all(s) for s in seen), scheme


def test_outputs_that_are_not_a_round_are_refused():
    with pytest.raises(VerifierOutputError, match="not a child"):
        check_verifier(lambda t, r, q, g: [99, 0], scheme="deterministic", rounds=5, cases=1)
    with pytest.raises(VerifierOutputError, match="outside the vocabulary"):
        check_verifier(lambda t, r, q, g: [99], scheme="iid", rounds=5, cases=1)
    with pytest.raises(VerifierOutputError, match="non-empty"):
        check_verifier(lambda t, r, q, g: [], scheme="chain", rounds=5, cases=1)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="scheme"):
        check_verifier(rule_sampler("follow"), scheme="greedy")
    with pytest.raises(ValueError, match="exactly one"):
        check_verifier(scheme="iid")
    with pytest.raises(ValueError, match="rounds"):
        check_verifier(rule_sampler("rrs"), scheme="iid", rounds=0)
    with pytest.raises(ValueError, match="unknown rule"):
        rule_sampler("no-such-rule")


def test_cases_are_the_same_for_every_verifier_at_a_seed():
    a = make_cases("iid", seed=5)
    b = make_cases("iid", seed=5)
    for x, y in zip(a, b, strict=True):
        # visit prefixes in different orders: the same rows (a pure function of seed, path)
        x.world.p((1, 0))
        assert np.array_equal(y.world.p((0,)), x.world.p((0,)))
        assert np.array_equal(y.world.p((1, 0)), x.world.p((1, 0)))
    assert not np.array_equal(make_cases("iid", seed=6)[0].world.p(()), a[0].world.p(()))


def test_reports_are_reproducible():
    a = check_verifier(rule_sampler("rrs"), scheme="iid", rounds=200, cases=2, seed=3)
    b = check_verifier(rule_sampler("rrs"), scheme="iid", rounds=200, cases=2, seed=3)
    assert a.family_p == b.family_p
    assert [c.first_token_law.tolist() for c in a.cases] == \
        [c.first_token_law.tolist() for c in b.cases]
    js = a.to_json()
    assert js["lossless"] == a.lossless and len(js["cases"]) == 2
    assert {"target_root", "proposal_root", "first_token_law", "tv", "tv_low", "tv_high",
            "p_value"} <= set(js["cases"][0])


# ------------------------------------------------------------------------- registration
def test_register_checked_rule_registers_a_lossless_rule_and_refuses_a_lossy_one():
    from treespec_sim.methods import METHODS
    from treespec_sim.verify import MATCHING_RULES

    base = RULES["rrsw"]
    mine = VerifierRule("my-rrsw", base.schemes, base.sample, base.expected_length,
                        "a copy of rrsw", base.round_law)
    try:
        reports = register_checked_rule(mine)
        assert all(r.lossless and r.mode == "exact" for r in reports.values())
        assert "my-rrsw" in MATCHING_RULES["without_replacement"]
        assert "my-rrsw" in METHODS["sampled-tree"].rules  # so the verifiers family runs it
    finally:
        RULES.pop("my-rrsw", None)
        from treespec_sim.verify import register_rule
        register_rule(RULES["rrsw"], replace=True)  # re-derive the maps and the methods
    assert "my-rrsw" not in MATCHING_RULES["without_replacement"]
    assert "my-rrsw" not in METHODS["sampled-tree"].rules

    bad = RULES["sibling-ratio"]
    liar = VerifierRule("my-ratio", ("deterministic",), bad.sample, bad.expected_length,
                        "claims lossless", bad.round_law, takes_proposal=True)
    with pytest.raises(ValueError, match="marked lossless but the check found a loss"):
        register_checked_rule(liar)
    assert "my-ratio" not in RULES
