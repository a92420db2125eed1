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
from treespec_sim.engine import decode
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
