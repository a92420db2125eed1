"""The round's contract: the engine asks a backend what it has in one place
(``engine.capabilities``), and a round's settings are checked once (``engine.RoundSpec``)."""

import ast
from pathlib import Path

import numpy as np
import pytest

from treespec_sim import engine, make_world
from treespec_sim.engine import RoundSpec, capabilities, run_round, run_spec
from treespec_sim.proposal import ConditionalProposal

ROOT = Path(__file__).resolve().parents[2]


def test_engine_asks_a_backend_only_in_the_capabilities_resolver():
    tree = ast.parse((ROOT / "treespec_sim" / "engine.py").read_text())
    offenders = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or fn.name == "capabilities":
            continue
        for node in ast.walk(fn):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and node.args
                    and isinstance(node.args[0], ast.Name) and node.args[0].id == "backend"):
                offenders.append(f"{fn.name}:{node.lineno}")
    assert offenders == []


class _Correcting:
    """A world whose correction reads paths and batches a level."""

    def __init__(self, world):
        self.w, self.asked = world, []
        self.depth, self.vocab_size = world.depth, world.vocab_size
        self.conditions_on_path, self.correction_pass_cost = True, 1.0

    def draft(self, ctx):
        return self.w.draft(ctx)

    def target_oracle(self, ctx, tree, t):
        return self.w.target_oracle(ctx, tree, t)

    def draft_conditional(self, ctx, depth, parent_token, **path):
        self.asked.append(("one", depth, tuple(path)))
        return self.w.draft_conditional(ctx, depth, parent_token)

    def draft_conditional_batch(self, ctx, depth, parent_tokens, **paths):
        self.asked.append(("batch", depth, tuple(paths)))


def test_capabilities_resolve_the_optional_protocols_and_the_proposal_declares_them():
    world = make_world("tiny", seed=0)
    b = _Correcting(world)
    caps = capabilities(b)
    assert caps.draft_conditional is not None and caps.draft_conditional_batch is not None
    assert caps.conditions_on_path and caps.commit is None and caps.draft_lazy is None
    plain = capabilities(world)
    assert plain.draft_conditional is not None and not plain.conditions_on_path
    corrected: set[int] = set()
    prop = engine._conditional_proposal(caps, world.sample_context(np.random.default_rng(0)),
                                        corrected)
    assert isinstance(prop, ConditionalProposal) and prop.conditions_on_path
    assert prop.prefetch is not None
    rng = np.random.default_rng(1)
    ctx = world.sample_context(rng)
    rnd = run_round(b, ctx, method="tsubame", budget=8, temperature=1.0, rng=rng,
                    cost="h200-qwen3-8b")
    assert {k for k, _, paths in b.asked if paths} == {"one", "batch"}  # asked with paths
    assert rnd.correction_passes >= 1


def test_round_spec_checks_once_and_runs_as_run_round():
    world = make_world("tiny", seed=0)
    spec = RoundSpec.of(method="ddtree", budget=8, temperature=1.0)
    assert (spec.rule, spec.budget, spec.name) == ("follow", 8, "ddtree")
    ctx = world.sample_context(np.random.default_rng(2))
    a = run_spec(world, ctx, spec, rng=np.random.default_rng(3))
    b = run_round(world, ctx, method="ddtree", budget=8, temperature=1.0,
                  rng=np.random.default_rng(3))
    assert a.tree == b.tree and a.expected_tau == b.expected_tau
    assert a.outcome.tokens == b.outcome.tokens
    with pytest.raises(ValueError, match="budget"):
        RoundSpec.of(method="ddtree", budget=0)
    with pytest.raises(ValueError, match="nested"):
        RoundSpec.of(method="chain", nested=True)
