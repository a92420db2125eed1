"""The ``verifiers`` family on the engines' trees: arms of one method share its drafted tree
(block verification paired with token-wise RRS on the same chain), and Tsubame's i.i.d. fill
draws from a stream of its own, so the arms that were there before it keep their numbers."""

from __future__ import annotations

import numpy as np

from treespec_sim.engine import run_round
from treespec_sim.families import verifiers, verifiers_report
from treespec_sim.families.base import world_for
from treespec_sim.families.verifiers import VerifierRow, arm_facts, arms_for, parse_tree
from treespec_sim.families.verifiers_report import has_engine_rows


def _row(method: str) -> VerifierRow:
    return VerifierRow(regime="a", method=method, verifier="rrsw", temperature=1.0, budget=64,
                       rounds=30, tau_mean=3.0, tau_ci_low=2.9, tau_ci_high=3.1)


def test_tsubame_rrsw_arms_draw_what_a_plain_loop_draws():
    world, tree = world_for("small", 0), parse_tree("tsubame8")
    lengths, _, _ = arm_facts(world, tree=tree, temperature=1.0, rounds=6,
                              rng=np.random.default_rng(4))
    labels = [a.label for a in arms_for(tree)]
    assert "rrs" in labels  # the i.i.d. fill's arm is there ...
    rng = np.random.default_rng(4)  # ... and the RRSw arm is what it was without it
    plain = []
    for _ in range(6):
        ctx = world.sample_context(rng)
        rnd = run_round(world, ctx, method="tsubame-rrsw", budget=8, rule="rrsw",
                        temperature=1.0, rng=rng, sample=False)
        plain.append(rnd.expected_tau_under("rrsw"))
    assert np.array_equal(lengths[:, labels.index("rrsw")], plain)


def test_block_and_rrs_verify_the_same_drawn_chain(monkeypatch):
    calls = []

    def counting(*args, **kwargs):
        calls.append((kwargs["method"], kwargs["rule"]))
        return run_round(*args, **kwargs)

    monkeypatch.setattr(verifiers, "run_round", counting)
    arm_facts(world_for("small", 0), tree=parse_tree("chain"), temperature=1.0, rounds=3,
              rng=np.random.default_rng(0))
    # per round: one drawn chain (rrs and block both verify it), one argmax chain
    assert calls == [("sampled-chain-corrected", "rrs"), ("chain", "follow")] * 3


def test_the_engines_figure_is_drawn_only_for_runs_with_engine_cells():
    assert not has_engine_rows([_row("tsubame-rrsw[B=64]"), _row("sampled-tree[2x5]")])
    assert has_engine_rows([_row("ddtree[B=64]")])
    assert has_engine_rows([_row("sampled-chain-corrected")])
    spec = verifiers_report.figures["engine_rules.png"]
    assert spec.applies is has_engine_rows
