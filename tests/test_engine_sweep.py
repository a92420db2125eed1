
import numpy as np
import pytest

from treespec_sim.engine import RoundRecord, decode, run_round, run_rounds, summarize
from treespec_sim.surrogate import surrogate_length
from treespec_sim.synth import Context, make_world


@pytest.fixture(scope="module")
def world():
    return make_world("mid-entropy", seed=0, vocab_size=256)


def test_round_record_is_consistent(world):
    ctx = Context(2, 5)
    rnd = run_round(world, ctx, method="ddtree", budget=32, rule="follow",
                    temperature=1.0, rng=np.random.default_rng(0))
    rec, out = RoundRecord.of(rnd), rnd.outcome
    assert rec.tree_size == 32
    assert abs(rec.expected_tau - (1 + rec.coverage)) < 1e-12  # saturated verifier
    assert abs(sum(rec.exit_by_depth) - 1) < 1e-12 and abs(sum(rec.exit_by_cause) - 1) < 1e-12
    assert rec.sampled_tau == out.tau == len(out.tokens)
    from treespec_sim.policies import ddtree

    tree = ddtree(world.draft(ctx), 32, root_token=ctx.last_token)
    assert rec.surrogate == pytest.approx(surrogate_length(tree, world.draft(ctx)), rel=1e-12)


def test_decode_is_reproducible_and_commits_rounds(world):
    a = decode(world, Context(1, 9), method="ddtree", budget=16, rule="tev", temperature=0.7,
               n_tokens=40, rng=np.random.default_rng(5))
    b = decode(world, Context(1, 9), method="ddtree", budget=16, rule="tev", temperature=0.7,
               n_tokens=40, rng=np.random.default_rng(5))
    assert np.array_equal(a.tokens, b.tokens) and len(a.tokens) == 40
    assert sum(r.sampled_tau for r in a.records) >= 40


def test_greedy_decode_equals_target_greedy(world):
    ctx = Context(0, 11)
    got = decode(world, ctx, method="ddtree", budget=16, rule="follow", temperature=0.0,
                 n_tokens=30, rng=np.random.default_rng(0)).tokens
    want = world.target_sample(ctx, 30, np.random.default_rng(1), 0.0)
    assert np.array_equal(got, want)


def test_summary_ci_brackets_mean_and_sampled_ci_covers_exact_mean(world):
    seqs = run_rounds(world, method="chain", budget=15, rule="follow", temperature=1.0,
                      rounds=40, rng=np.random.default_rng(3), rounds_per_sequence=1)
    s = summarize(seqs)
    assert s.rounds == 40 and s.sequences == 40
    assert s.expected_tau.low < s.expected_tau.mean < s.expected_tau.high
    assert s.sampled_tau.low < s.expected_tau.mean < s.sampled_tau.high  # same expectation


@pytest.mark.parametrize("kwargs, match", [
    ({"temperature": -1.0}, "temperature"),
    ({"rule": "nope"}, "rule 'nope' is not lossless for method 'ddtree'"),
    ({"rule": "rrsw"}, "rule 'rrsw' is not lossless for method 'ddtree'"),
    ({"rounds": 0}, "rounds"),
])
def test_engine_bad_input(world, kwargs, match):
    args = {"method": "ddtree", "budget": 4, "rule": "follow", "temperature": 1.0,
            "rounds": 2, "rng": np.random.default_rng(0)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        run_rounds(world, **args)


def test_unknown_method(world):
    with pytest.raises(ValueError, match="unknown method 'bfs'; known methods: chain, ddtree"):
        run_round(world, Context(0, 0), method="bfs", budget=4, rule="follow",
                  temperature=1.0, rng=np.random.default_rng(0))
