"""Whole decoded sequences follow the target's law (lossless speculative decoding).

Exact: on tiny vocabularies the law of the first N emitted tokens of multi-round decoding is
enumerated analytically and compared with the target's own N-token law. Statistical: on a
larger vocabulary, sampled decodes (the real ``verify`` code) pass a chi-square test against
the exact target law, with a stated false-alarm rate.
"""

import numpy as np
import pytest
from scipy import stats

from proofs_check.enumerate import (
    ROUND_LAWS,
    decode_law,
    exit_round_law,
    max_law_gap,
    target_law,
)
from treespec_sim.cost import get_cost_model
from treespec_sim.engine import decode, run_round
from treespec_sim.methods import METHODS, rules_for
from treespec_sim.synth import Context, make_world

EXACT_TOL = 1e-12
FALSE_ALARM = 1e-3  # per chi-square test; seeds are fixed, so the outcome is deterministic


@pytest.mark.parametrize("temperature", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("rule", ["follow", "tev"])
@pytest.mark.parametrize("policy, budget", [("chain", 3), ("ddtree", 2), ("ddtree", 5)])
def test_decode_law_equals_target_law_tiny(policy, budget, rule, temperature):
    world = make_world("tiny", seed=1)
    for ctx in (Context(0, 0), Context(1, 2)):
        got = decode_law(world, ctx, method=policy, budget=budget,
                         round_law=ROUND_LAWS[rule], temperature=temperature, n_tokens=4)
        want = target_law(world, ctx, temperature=temperature, n_tokens=4)
        assert abs(sum(got.values()) - 1) < EXACT_TOL
        assert max_law_gap(got, want) < EXACT_TOL


def test_decode_law_small_vocabulary():
    world = make_world("small", seed=0)
    ctx = Context(1, 3)
    got = decode_law(world, ctx, method="ddtree", budget=6, round_law=exit_round_law,
                     temperature=1.0, n_tokens=3)
    assert max_law_gap(got, target_law(world, ctx, temperature=1.0, n_tokens=3)) < EXACT_TOL


def test_buggy_round_law_is_caught():
    """The same check flags a verifier whose bonus ignores the residual."""
    world = make_world("tiny", seed=1)
    ctx = Context(0, 0)

    def buggy(tree, rows):
        return exit_round_law(tree, rows, residual=False)

    got = decode_law(world, ctx, method="ddtree", budget=5, round_law=buggy,
                     temperature=1.0, n_tokens=4)
    assert max_law_gap(got, target_law(world, ctx, temperature=1.0, n_tokens=4)) > 1e-3


def _chi_square_pvalue(observed: np.ndarray, expected: np.ndarray) -> float:
    """Pearson chi-square with cells of expected count < 5 pooled into one."""
    big = expected >= 5
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] < 5:  # fold a still-small pool into the largest cell's neighbour set
        obs, exp = obs[:-1], exp[:-1]
        exp = exp * obs.sum() / exp.sum()
    return float(stats.chisquare(obs, exp).pvalue)


def _pair_test_pvalue(rule: str, n: int = 3000) -> float:
    """Decode 3 tokens ``n`` times from one context (V = 64, word classes of 4 variants,
    T = 1, DDTree with B = 16); chi-square p-value of the (2nd, 3rd) token pair's counts
    against the target's exact joint law."""
    world = make_world("mid-entropy", seed=0, vocab_size=64)
    assert world.spec.variants == 4
    ctx = Context(3, 17)
    rng = np.random.default_rng(2024)
    counts = np.zeros((64, 64))
    for _ in range(n):
        toks = decode(world, ctx, method="ddtree", budget=16, rule=rule, temperature=1.0,
                      n_tokens=3, rng=rng).tokens
        counts[toks[1], toks[2]] += 1
    p = world.target_kernel(ctx.topic, 1.0).dense()
    joint = (p[ctx.last_token] @ p)[:, None] * p  # law of (2nd, 3rd)
    assert abs(joint.sum() - 1) < 1e-12
    return _chi_square_pvalue(counts.ravel(), n * joint.ravel())


@pytest.mark.parametrize("rule", ["follow", "tev"])
def test_sampled_sequences_chi_square_larger_vocabulary(rule):
    """Sampled decodes pass the chi-square test (false-alarm rate 1e-3)."""
    assert _pair_test_pvalue(rule) > FALSE_ALARM


def test_chi_square_has_power_against_a_buggy_sampler(monkeypatch):
    """The sampled check must be able to fail: patch TEV's residual to the full row."""
    import treespec_sim.verify.tev as tev

    monkeypatch.setattr(tev, "residual_row",
                        lambda tree, oracle, v: np.array(oracle.row(v), dtype=np.float64))
    assert _pair_test_pvalue("tev") < FALSE_ALARM


# ------------------------------------------------------------- every registered method
COST = get_cost_model("h200-qwen3-8b")


def _method_args(name: str) -> dict:
    """What each registered method needs to run (a latency model, lam, a shape)."""
    method = METHODS[name]
    args: dict = {"method": f"{name}[2x2]" if method.parametrised else name, "budget": 8}
    if method.needs_cost:
        args["cost"] = COST
    if name == "longrun":
        args["options"] = {"lam": 600.0}  # tokens/s: makes the rule stop early in some rounds
    return args


DETERMINISTIC = [m.name for m in METHODS.values() if not m.sampled]
SAMPLED_PAIRS = [(m.name, rule) for m in METHODS.values()
                 if m.sampled and not m.needs_recorded for rule in m.rules]
#: Methods replaying a backend's recorded draft: checked on a backend that records one
#: (:class:`_Recording`).
RECORDED = [m.name for m in METHODS.values() if m.needs_recorded]


def test_every_registered_method_is_covered():
    assert set(DETERMINISTIC) | {m for m, _ in SAMPLED_PAIRS} | set(RECORDED) == set(METHODS)
    assert len(SAMPLED_PAIRS) >= 15 and RECORDED == ["recorded"]


@pytest.mark.parametrize("temperature", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("name", DETERMINISTIC)
def test_decode_law_of_every_deterministic_method(name, temperature):
    """Exact: the law of 4 decoded tokens through run_round equals the target's, for each
    lossless rule of the method."""
    world = make_world("tiny", seed=1)
    args = _method_args(name)
    for rule in METHODS[name].rules:
        for ctx in (Context(0, 0), Context(1, 2)):
            got = decode_law(world, ctx, round_law=ROUND_LAWS[rule], temperature=temperature,
                             n_tokens=4, **args)
            want = target_law(world, ctx, temperature=temperature, n_tokens=4)
            assert max_law_gap(got, want) < EXACT_TOL, (name, rule, ctx)


class _Recording:
    """A world that records a draft of every context it is asked for: a fresh Tsubame-RRSw
    round's (as ``real_models.record`` records a trace's sampled tree), which the
    ``recorded`` method replays."""

    def __init__(self, world, temperature: float, rng: np.random.Generator) -> None:
        self.world, self.temperature, self.rng = world, temperature, rng

    def __getattr__(self, name: str):
        return getattr(self.world, name)

    def recorded_draft(self, ctx):
        return run_round(self.world, ctx, method="tsubame-rrsw", budget=8,
                         temperature=self.temperature, rng=self.rng, sample=False).draft


def _engine_pair_pvalue(temperature: float, n: int, *, recording: bool = False,
                        **round_args) -> float:
    """Chi-square p-value of the (2nd, 3rd) decoded tokens, decoding through engine.decode
    (V = 16, word classes), against the target's exact joint law (``recording``: on a
    :class:`_Recording` of the world)."""
    world = make_world("mid-entropy", seed=0, vocab_size=16)
    ctx = Context(3, 5)
    rng = np.random.default_rng(7)
    backend = _Recording(world, temperature, np.random.default_rng(8)) if recording else world
    counts = np.zeros((16, 16))
    for _ in range(n):
        toks = decode(backend, ctx, temperature=temperature, n_tokens=3, rng=rng,
                      **round_args).tokens
        counts[toks[1], toks[2]] += 1
    p = world.target_kernel(ctx.topic, temperature).dense()
    joint = (p[ctx.last_token] @ p)[:, None] * p
    return _chi_square_pvalue(counts.ravel(), n * joint.ravel())


@pytest.mark.parametrize("temperature", [0.6, 1.0])
@pytest.mark.parametrize("name, rule", SAMPLED_PAIRS)
def test_sampled_decodes_of_every_sampled_method(name, rule, temperature):
    """Statistical (false-alarm rate 1e-3 per test): every sampled method with each of its
    lossless rules, decoded through engine.decode, follows the target's law."""
    p = _engine_pair_pvalue(temperature, 600, rule=rule, **_method_args(name))
    assert p > FALSE_ALARM


@pytest.mark.parametrize("rule", rules_for("without_replacement"))
def test_sampled_decodes_of_the_recorded_method(rule):
    """Statistical: replaying a recorded Tsubame-RRSw draft (``recorded``) with each rule
    lossless for draws without replacement follows the target's law."""
    assert _engine_pair_pvalue(1.0, 600, recording=True, method="recorded", rule=rule) \
        > FALSE_ALARM


def test_the_recorded_method_needs_a_recording_backend():
    world = make_world("small", seed=0)
    with pytest.raises(ValueError, match="records none"):
        run_round(world, world.sample_context(np.random.default_rng(0)), method="recorded",
                  rule="rrsw", temperature=1.0, rng=np.random.default_rng(0))


def test_engine_chi_square_catches_a_wrong_proposal(monkeypatch):
    """Known-buggy: the tree is drawn from one law and the verifier is told another (the
    marginal squared): the same chi-square through engine.decode must reject it."""
    import treespec_sim.methods as methods

    real_fill = methods.fill_shape

    def lying_fill(shape, rows, *, scheme, rng):
        tree, proposal = real_fill(shape, rows, scheme=scheme, rng=rng)
        told = proposal ** 2
        return tree, told / told.sum(axis=1, keepdims=True)

    monkeypatch.setattr(methods, "fill_shape", lying_fill)
    p = _engine_pair_pvalue(1.0, 600, rule="rrsw", method="sampled-ddtree", budget=8)
    assert p < FALSE_ALARM
