
import numpy as np
import pytest

from treespec_sim.cost import get_cost_model, round_time
from treespec_sim.engine import RoundRecord, decode, run_round, run_rounds, summarize
from treespec_sim.exits import exit_decomposition
from treespec_sim.surrogate import surrogate_length
from treespec_sim.synth import Context, make_world
from treespec_sim.verify import expected_length


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
    ({"rule": "nope"}, "unknown rule 'nope'"),
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


# ------------------------------------------------------------------ worlds of a sweep cell
EXACT = 1e-12


def _world_grids():
    from treespec_sim.families import CaDDTreeGrid, DDTreeGrid, StochasticGrid, VerifierGrid

    return {
        "ddtree": DDTreeGrid(("small",), methods=("chain", "ddtree", "dynamic"), budgets=(3, 8),
                             temperatures=(1.0,), rounds=7),
        "caddtree": CaDDTreeGrid(("small",), rounds=7, max_budget=24,
                                 cost_models=("h200-qwen3-8b",)),
        "stochastic": StochasticGrid(("small",), temperatures=(0.6,), budgets=(6,),
                                     methods=("chain", "ddtree", "tsubame-rrsw"), rounds=7),
        "verifiers": VerifierGrid(("small",), shapes=("2x2",), rounds=7),
    }


def _keyed(rows):
    return {(r.method, r.verifier, r.budget, r.cost_model): r for r in rows}


def _t_interval(values):
    """The 95% t-interval of ``values`` by hand (scipy's t quantile, k - 1 dof)."""
    from scipy import stats as sps

    v = np.asarray(values, dtype=np.float64)
    half = sps.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size)
    return v.mean() - half, v.mean() + half


@pytest.mark.parametrize("family", ["ddtree", "caddtree", "stochastic", "verifiers"])
def test_a_cell_of_three_worlds_pools_its_three_one_world_runs(family):
    """World i of a cell at seed s is that cell run with worlds = 1 at seed s + i on its share
    of the rounds; the row pools them, and its between-world interval is the t-interval over
    the one-world means."""
    import dataclasses

    from treespec_sim.families import RunSettings, run_cell, world_shares

    grid = _world_grids()[family]
    shares = world_shares(grid.rounds, grid.worlds, 5)
    assert [(s.seed, s.rounds) for s in shares] == [(5, 3), (6, 2), (7, 2)]
    n = np.array([s.rounds for s in shares], dtype=np.float64)
    for cell in grid.cells():
        pooled = _keyed(run_cell(cell, RunSettings(seed=5)))
        singles = []
        for s in shares:
            one = dataclasses.replace(grid, rounds=s.rounds, worlds=1)
            cell1 = dataclasses.replace(cell, grid=one)
            assert cell1.key == cell.key  # the key (and so every stream) ignores the worlds
            singles.append(_keyed(run_cell(cell1, RunSettings(seed=s.seed))))
        assert set(pooled) == set(singles[0])
        for key, row in pooled.items():
            assert row.worlds == 3 and row.rounds == grid.rounds
            lo, hi = _t_interval(row.tau_world_means)
            assert (row.tau_world_ci_low, row.tau_world_ci_high) == \
                pytest.approx((lo, hi), abs=1e-12)
            if key[0] == "ddtree-oracle":  # the oracle budget is chosen on the pooled rounds
                continue
            one = [sg[key] for sg in singles]
            means = np.array([r.tau_mean for r in one])
            assert row.tau_world_means == pytest.approx(means, abs=EXACT)
            assert row.tau_mean == pytest.approx((n * means).sum() / n.sum(), abs=EXACT)
            if family in ("ddtree", "caddtree"):  # throughput over every round of every world
                seconds = np.array([r.round_time_s for r in one])
                assert row.throughput_tok_s == pytest.approx(
                    (n * means).sum() / (n * seconds).sum(), rel=1e-12)
            if family == "ddtree":
                for col in ("coverage_mean", "lost_uncovered", "lost_budget", "lost_depth_cap"):
                    values = np.array([r.get(col) for r in one])
                    assert row.get(col) == pytest.approx((n * values).sum() / n.sum(), abs=EXACT)
            if family == "stochastic":  # the pooled contexts, world after world
                taus = [t for r in one for t in r.taus]
                assert row.taus == pytest.approx(taus, abs=EXACT)
                assert (row.tau_ci_low, row.tau_ci_high) == \
                    pytest.approx(_t_interval(taus), abs=1e-12)
            if family == "verifiers":  # each world's gain over RRSw is its one-world gain
                rel = [r.rel_to_baseline for r in one]
                assert row.rel_world_means == pytest.approx(rel, abs=EXACT)
                lo, hi = _t_interval(rel)
                assert (row.rel_world_ci_low, row.rel_world_ci_high) == \
                    pytest.approx((lo, hi), abs=1e-12)
        if family == "caddtree":  # per-world throughput ratios to the (pooled) oracle budget
            oracle = pooled[("ddtree-oracle", "follow", grid.max_budget, "h200-qwen3-8b")]
            b = oracle.tree_size_mean
            fixed = [sg[("ddtree", "follow", int(b), "h200-qwen3-8b")] for sg in singles]
            for key, row in pooled.items():
                if key[0] in ("caddtree", "exhaustive", "longrun"):
                    want = [sg[key].throughput_tok_s / f.throughput_tok_s
                            for sg, f in zip(singles, fixed, strict=True)]
                    assert row.rel_world_means == pytest.approx(want, rel=1e-12)


# ------------------------------------------------------------------ correction passes
def test_a_corrected_round_is_charged_one_drafter_pass_per_corrected_level():
    world = make_world("small", seed=2)
    cost = get_cost_model("h200-qwen3-8b")
    rng = np.random.default_rng(4)
    ctx = world.sample_context(rng)
    rnd = run_round(world, ctx, method="tsubame-rrsw", budget=24, temperature=1.0, rng=rng,
                    sample=False, cost=cost)
    tree = rnd.tree
    # levels whose tokens were drawn given a sampled parent: children at depth >= 2
    levels = {int(d) for d in tree.depth[1:] if d >= 2}
    assert rnd.correction_passes == len(levels) > 0
    # the synthetic world's correction is a head whose cost is not modelled
    assert rnd.cost_s == pytest.approx(float(round_time(cost, tree.size)))
    # a backend whose correction is a drafter forward is charged one C_d per corrected level
    backend = _Batching(world, pass_cost=1.0)
    again = run_round(backend, ctx, method="tsubame-rrsw", budget=24, temperature=1.0,
                      rng=np.random.default_rng(4), sample=False, cost=cost)
    assert again.correction_passes > 0
    assert again.cost_s == pytest.approx(float(round_time(cost, again.tree.size))
                                         + again.correction_passes * cost.draft_cost())
    marginal = run_round(backend, ctx, method="sampled-ddtree", budget=24, temperature=1.0,
                         rng=rng, sample=False, cost=cost)
    assert marginal.correction_passes == 0
    assert marginal.cost_s == pytest.approx(float(round_time(cost, marginal.tree.size)))


class _Batching:
    """The world with a batched correction: every level's laws asked for at once."""

    def __init__(self, world, pass_cost: float = 0.0):
        self._world, self.calls = world, []
        self.depth, self.vocab_size = world.depth, world.vocab_size
        self.correction_pass_cost = pass_cost

    def __getattr__(self, name):
        return getattr(self._world, name)

    def draft_conditional_batch(self, ctx, depth, parents):
        self.calls.append((depth, list(parents)))
        return np.stack([self._world.draft_conditional(ctx, depth, p) for p in parents])


def test_run_round_hands_a_batching_backend_one_call_per_level():
    world = make_world("small", seed=2)
    backend = _Batching(world)
    ctx = world.sample_context(np.random.default_rng(1))
    a = run_round(backend, ctx, method="tsubame-rrsw", budget=24, temperature=1.0,
                  rng=np.random.default_rng(9), sample=False)
    b = run_round(world, ctx, method="tsubame-rrsw", budget=24, temperature=1.0,
                  rng=np.random.default_rng(9), sample=False)
    assert a.tree.token.tolist() == b.tree.token.tolist()  # the same draws
    depths = [d for d, _ in backend.calls]
    assert depths and depths == sorted(set(depths))  # one batched call per level, in order
    assert a.correction_passes == len([d for d in depths if d >= 2])


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_deterministic_rules_tau_from_the_rounds_exit_law_equals_verify(world, temperature):
    # Round reads follow's and tev's E[tau] off the exit law it shares with exits; the
    # verifier's own path (expected_length: from the rows) must give the same float, and the
    # exits the same as exit_decomposition from the rows
    rng = np.random.default_rng(4)
    for _ in range(6):
        ctx = world.sample_context(rng)
        for rule in ("follow", "tev"):
            rnd = run_round(world, ctx, method="ddtree", budget=48, rule=rule,
                            temperature=temperature, rng=rng, sample=False)
            assert rnd.expected_tau == expected_length(rnd.tree, rnd.rows, rule=rule)
            want = exit_decomposition(rnd.tree, rnd.rows, depth_limit=world.depth)
            assert np.array_equal(rnd.exits.by_depth_cause, want.by_depth_cause)
            assert rnd.exits.coverage == want.coverage
