"""One source of truth for which rules are lossless for which method at which temperature, and a
round loop that refuses what it cannot do under the name it was asked for (issue 22, item 3)."""

import numpy as np
import pytest

from treespec_sim.engine import run_round, run_rounds
from treespec_sim.methods import METHODS, lossless_rules, resolve_rule
from treespec_sim.synth import make_world
from treespec_sim.verify import RULES

TEMPERATURES = (0.0, 0.6, 1.0)


def _names():
    """Every method a world runs (``recorded`` replays a backend's recorded draft:
    ``tests/sim/test_lossless.py``)."""
    return [m.name + ("[2x2]" if m.parametrised else "") for m in METHODS.values()
            if not m.needs_recorded]


@pytest.fixture(scope="module")
def world():
    return make_world("small", seed=0)


@pytest.mark.parametrize("name", _names())
def test_builder_resolve_rule_and_lossless_rules_agree(world, name):
    """Every method x T x rule: run_round accepts the rule iff lossless_rules lists it, the
    round is verified with it, and the builder's draws match it (Draft.check_rule)."""
    for t in TEMPERATURES:
        ok = lossless_rules(name, t)
        for rule in RULES:
            rng = np.random.default_rng(1)
            ctx = world.sample_context(rng)
            args = dict(method=name, budget=6, rule=rule, temperature=t, rng=rng,
                        cost="a800-qwen3-8b", options={"lam": 100.0})
            if rule in ok:
                assert resolve_rule(name, rule, t) == rule
                rnd = run_round(world, ctx, **args)
                assert rnd.rule == rule
                rnd.draft.check_rule(rule, target_temperature=t)
                assert 1.0 <= rnd.expected_tau <= 1.0 + rnd.tree_size + 1e-9
            else:
                with pytest.raises(ValueError):
                    resolve_rule(name, rule, t)
                with pytest.raises(ValueError):
                    run_round(world, ctx, **args)
        if ok:  # the default is the first lossless rule
            rnd = run_round(world, world.sample_context(np.random.default_rng(2)), method=name,
                            budget=6, temperature=t, rng=np.random.default_rng(3),
                            cost="a800-qwen3-8b", options={"lam": 100.0})
            assert rnd.rule == ok[0]


@pytest.mark.parametrize("name", ["tsubame", "tsubame-rrsw", "sampled-ddtree"])
@pytest.mark.parametrize("rule", ["rrsw", "univer", "traversal"])
def test_sampled_rule_at_t0_is_refused_not_remapped(world, name, rule):
    """At T = 0 a sampled method drafts its proposals' top-k (a deterministic tree): the
    sampled rules were silently mapped to 'follow' while lossless_rules said follow/tev."""
    assert lossless_rules(name, 0.0) == ("follow", "tev", "sample-match")
    ctx = world.sample_context(np.random.default_rng(0))
    with pytest.raises(ValueError, match=rf"rule {rule!r} is not lossless .* at T = 0"):
        run_round(world, ctx, method=name, budget=8, rule=rule, temperature=0.0,
                  rng=np.random.default_rng(0))


def test_sample_only_methods_have_no_rule_at_t0(world):
    assert lossless_rules("sampled-tree[2x3]", 0.0) == ()
    with pytest.raises(ValueError, match="needs T > 0"):
        resolve_rule("sampled-tree[2x3]", None, 0.0)
    with pytest.raises(ValueError, match="needs T > 0"):
        run_round(world, world.sample_context(np.random.default_rng(0)),
                  method="greedy-tree[2x3]", temperature=0.0, rng=np.random.default_rng(0))


@pytest.mark.parametrize("rule", ["tevv", "RRSW", "", 3])
def test_unknown_rule_is_called_unknown(world, rule):
    for t in (0.0, 1.0):
        with pytest.raises(ValueError, match="unknown rule"):
            resolve_rule("ddtree", rule, t)
    with pytest.raises(ValueError, match="unknown rule"):
        run_round(world, world.sample_context(np.random.default_rng(0)), method="tsubame",
                  budget=4, rule=rule, temperature=1.0, rng=np.random.default_rng(0))


@pytest.mark.parametrize("temperature", ["1", b"1", None, True, np.bool_(True), 1j,
                                         float("nan"), -0.5, float("inf")])
def test_temperature_must_be_a_real_number(world, temperature):
    ctx = world.sample_context(np.random.default_rng(0))
    with pytest.raises(ValueError, match="temperature"):
        run_round(world, ctx, method="ddtree", budget=4, temperature=temperature,
                  rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="temperature"):
        lossless_rules("ddtree", temperature)


def test_numpy_temperatures_are_real_numbers(world):
    ctx = world.sample_context(np.random.default_rng(0))
    for t in (np.float32(1.0), np.float64(0.6), np.int64(1), 1):
        rnd = run_round(world, ctx, method="ddtree", budget=4, temperature=t,
                        rng=np.random.default_rng(0))
        assert rnd.temperature == float(t) and isinstance(rnd.temperature, float)


# ------------------------------------------------------------------ backends
class _Wrapped:
    """A backend that forwards the protocol's required methods to a world, and nothing else
    unless asked (a user's own backend, or a real-model backend: no draft_conditional)."""

    def __init__(self, world, *, advance=True, vocab_size=None, trim=None):
        self._w = world
        self.depth = world.depth
        self.vocab_size = world.vocab_size if vocab_size is None else vocab_size
        self._trim = trim
        if advance:
            self.advance = world.advance

    def sample_context(self, rng):
        return self._w.sample_context(rng)

    def draft(self, ctx):
        lq = self._w.draft(ctx)
        if self._trim is None:
            return lq
        lq = lq[:, : self._trim]
        return lq - np.logaddexp.reduce(lq, axis=1, keepdims=True)

    def target_oracle(self, ctx, tree, temperature):
        return self._w.target_oracle(ctx, tree, temperature)


@pytest.mark.parametrize("name", ["sampled-chain-corrected", "tsubame", "tsubame-rrs",
                                  "tsubame-rrsw", "tsubame-univer",
                                  "tsubame-rrsw-tempered-plan"])
def test_corrected_methods_are_refused_without_a_conditional_proposal(world, name):
    """They fell back to the marginals silently, and their rows still said 'corrected'."""
    backend = _Wrapped(world)
    ctx = backend.sample_context(np.random.default_rng(0))
    for t in (0.0, 1.0):
        with pytest.raises(ValueError, match="draft_conditional"):
            run_round(backend, ctx, method=name, budget=8, temperature=t,
                      rng=np.random.default_rng(0))
    # the same methods run on the world, which has the conditional proposal
    assert run_round(world, ctx, method=name, budget=8, temperature=1.0,
                     rng=np.random.default_rng(0)).tree_size >= 1


def test_marginal_methods_run_without_a_conditional_proposal(world):
    backend = _Wrapped(world)
    ctx = backend.sample_context(np.random.default_rng(0))
    for name in ("sampled-chain", "sampled-ddtree", "ddtree"):
        assert run_round(backend, ctx, method=name, budget=8, temperature=1.0,
                         rng=np.random.default_rng(0)).tree_size >= 1


def test_declared_vocab_size_is_checked_against_the_arrays(world):
    ctx = world.sample_context(np.random.default_rng(0))
    wrong = _Wrapped(world, vocab_size=world.vocab_size + 8)
    with pytest.raises(ValueError, match=rf"vocab_size = {world.vocab_size + 8} .* V = "
                                         rf"{world.vocab_size}"):
        run_round(wrong, ctx, method="ddtree", budget=4, rng=np.random.default_rng(0))
    trimmed = _Wrapped(world, trim=world.vocab_size - 4)  # draft narrower than declared
    with pytest.raises(ValueError, match="draft"):
        run_round(trimmed, ctx, method="ddtree", budget=4, rng=np.random.default_rng(0))


def test_backend_without_advance_is_named(world):
    backend = _Wrapped(world, advance=False)
    with pytest.raises(ValueError, match=r"lacks advance\(ctx, tokens\)"):
        run_rounds(backend, rng=np.random.default_rng(0), rounds=4, rounds_per_sequence=2,
                   method="ddtree", budget=4)
    # fresh contexts need no advance
    assert len(run_rounds(backend, rng=np.random.default_rng(0), rounds=2, method="ddtree",
                          budget=4)) == 2


def test_backend_missing_a_required_method_is_named(world):
    class NoOracle:
        depth, vocab_size = world.depth, world.vocab_size
        draft = world.draft

    with pytest.raises(ValueError, match="lacks target_oracle"):
        run_round(NoOracle(), world.sample_context(np.random.default_rng(0)), method="ddtree",
                  budget=4, rng=np.random.default_rng(0))


def test_cost_preset_by_name(world):
    ctx = world.sample_context(np.random.default_rng(0))
    rnd = run_round(world, ctx, method="caddtree", budget=16, cost="h200-qwen3-8b",
                    rng=np.random.default_rng(0))
    assert rnd.cost_s is not None and rnd.cost_s > 0
    with pytest.raises(ValueError, match="unknown cost model"):
        run_round(world, ctx, method="caddtree", budget=16, cost="h200",
                  rng=np.random.default_rng(0))
