import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proofs_check.reference import brute_force_top_prefixes, ddtree_heap_reference
from proofs_check.strategies import log_q_arrays
from treespec_sim import DraftTree, compiled
from treespec_sim.policies import _ddtree, chain, ddtree, ddtree_with_mask
from treespec_sim.surrogate import path_log_scores, surrogate_length


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def builder_path(request, monkeypatch):
    """Every test here runs on both builders: the compiled kernel and the pure-numpy path."""
    if request.param == "numpy":
        monkeypatch.setattr(compiled, "kernel", None)
    elif compiled.kernel is None:
        pytest.skip("the compiled kernel is not built on this machine")
    return request.param


def _log_softmax(x):
    return x - np.logaddexp.reduce(x, axis=1, keepdims=True)


def _n_prefixes(L, V):
    return sum(V ** d for d in range(1, L + 1))


@given(log_q_arrays(max_depth=4, max_vocab=4), st.integers(1, 40))
def test_equals_brute_force(lp, budget):
    tree = ddtree(lp, budget)
    expected = brute_force_top_prefixes(lp, budget)
    assert tree.paths() == expected  # same nodes, same (heap pop) order
    assert tree.size == min(budget, _n_prefixes(*lp.shape))


@given(log_q_arrays(max_depth=4, max_vocab=4), st.integers(1, 40))
def test_prefix_closed_and_best_first(lp, budget):
    tree = ddtree(lp, budget)
    paths = set(tree.paths())
    for p in paths:
        assert len(p) == 1 or p[:-1] in paths
    scores = path_log_scores(tree, lp)[1:]
    assert np.all(scores[1:] <= scores[:-1])  # pop scores never increase


@given(log_q_arrays(max_depth=3, max_vocab=4, ties=False), st.integers(1, 20), st.data())
def test_surrogate_optimal(lp, budget, data):
    """DDTree Prop. 2: no prefix-closed tree of the same size has a larger surrogate."""
    best = ddtree(lp, budget)
    # a random prefix-closed tree of the same size: grow from random frontier nodes
    L, V = lp.shape
    parent, token, depth, kids = [-1], [-1], [0], {0: set()}
    while len(parent) - 1 < best.size:
        options = [v for v in range(len(parent)) if depth[v] < L and len(kids[v]) < V]
        v = data.draw(st.sampled_from(options))
        tok = data.draw(st.sampled_from(sorted(set(range(V)) - kids[v])))
        kids[v].add(tok)
        kids[len(parent)] = set()
        parent.append(v)
        token.append(tok)
        depth.append(depth[v] + 1)
    other = DraftTree.from_parents(parent, token)
    assert surrogate_length(best, lp) >= surrogate_length(other, lp) - 1e-12


@pytest.mark.parametrize("budget", [1, 15, 64, 256, 1024])
@pytest.mark.parametrize("kind", ["sharp", "flat", "mixed", "ties", "zeros"])
def test_equals_heap_reference_at_scale(budget, kind):
    rng = np.random.default_rng(budget)
    L, V = 15, 4096
    if kind == "sharp":
        lp = _log_softmax(rng.normal(size=(L, V)) * 5)
    elif kind == "flat":
        lp = _log_softmax(rng.normal(size=(L, V)) * 0.3)
    elif kind == "mixed":  # sharp at shallow depths, flat deep (DFlash-like)
        lp = _log_softmax(rng.normal(size=(L, V)) * np.linspace(8, 0.5, L)[:, None])
    elif kind == "ties":
        lp = _log_softmax(rng.integers(0, 3, size=(L, V)).astype(float) * 3)
    else:
        lp = _log_softmax(rng.normal(size=(L, V)) * 3)
        lp[rng.random(size=(L, V)) < 0.5] = -np.inf
    if kind == "zeros":  # truncated rows, not renormalised: scores, not a distribution
        tree = ddtree(lp, budget, root_token=7, check_sums=False)
        mask = tree.attention_mask()
    else:
        tree, mask = ddtree_with_mask(lp, budget, root_token=7)
    parent, token, depth, ref_mask = ddtree_heap_reference(lp, budget)
    assert tree.parent.tolist() == parent
    assert tree.token[1:].tolist() == token[1:] and tree.token[0] == 7
    assert tree.depth.tolist() == depth
    assert np.array_equal(mask, ref_mask)


def test_budget_zero_is_refused_and_a_tiny_space_gives_every_prefix():
    lp = np.log(np.full((2, 2), 0.5))
    with pytest.raises(ValueError, match="budget must be a positive integer; got 0"):
        ddtree(lp, 0, root_token=1)
    assert ddtree(lp, 100).size == 6  # all prefixes: 2 + 4


def test_k_truncation_irrelevant_for_top_b():
    # one depth, V > B: the tree is the top-B tokens in rank order, ties to smaller ids
    lp = np.log(np.array([[0.1, 0.3, 0.3, 0.2, 0.1]]))
    assert [p[0] for p in ddtree(lp, 3).paths()] == [1, 2, 3]


@pytest.mark.parametrize("bad, match", [
    (np.array([[0.0, np.nan]]), r"log_q\[0, 1\] is NaN"),
    (np.array([[-1.0, -2.0], [0.5, -1.0]]), r"log_q\[1, 0\] = 0.5 is a positive"),
    (np.array([[-np.inf, -np.inf]]), r"log_q\[0\] has no finite entry"),
    (np.array([-1.0, -2.0]), r"shape \(L, V\)"),
    (np.array([[-1.0, np.inf]]), r"log_q\[0, 1\] = inf"),
])
def test_bad_log_q(bad, match):
    with pytest.raises(ValueError, match=match):
        ddtree(bad, 4)
    with pytest.raises(ValueError, match=match):
        chain(bad)


@pytest.mark.parametrize("budget", [-1, 2.5, "3", True])
def test_bad_budget(budget):
    with pytest.raises(ValueError, match="budget"):
        ddtree(np.log(np.full((2, 2), 0.5)), budget)


def test_bad_root_token():
    with pytest.raises(ValueError, match="root_token"):
        ddtree(np.log(np.full((2, 2), 0.5)), 2, root_token=-2)


def test_chain():
    lp = np.log(np.array([[0.2, 0.4, 0.4], [0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]))
    t = chain(lp, root_token=2)
    assert t.paths() == [(1,), (1, 0), (1, 0, 2)] and t.root_token == 2
    assert chain(lp, 2).size == 2 and chain(lp, 99).size == 3


@pytest.mark.parametrize("budget", [16, 64, 256])
def test_peaked_rows_regression(budget):
    """Argmax-dominated rows: the sampled threshold must be the certified one (review bug)."""
    lp = np.full((12, 1000), -50.0)
    lp[:, 0] = 0.0
    parent, token, _, _ = ddtree_heap_reference(lp, budget)
    tree = ddtree(lp, budget)
    assert tree.size == budget and tree.parent.tolist() == parent
    rng = np.random.default_rng(budget)
    logits = rng.standard_normal((15, 32768)).astype(np.float32)
    logits[:, 0] += 30
    lp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    parent, token, _, _ = ddtree_heap_reference(lp, budget)
    tree = ddtree(lp, budget)
    assert tree.parent.tolist() == parent and tree.token[1:].tolist() == token[1:]


def test_tiny_positive_log_probs_are_clamped():
    tree = ddtree(np.array([[1e-13, -np.inf], [1e-13, -np.inf]]), 2)
    assert all(tree.parent[v] < v for v in range(1, tree.n_nodes))
    assert tree.paths() == [(0,), (0, 0)]


def _degenerate_log_q(rng, kind: str, L: int, V: int) -> np.ndarray:
    if kind == "sparse":  # top-k-truncated rows: too few finite prefixes to certify a bound
        lp = np.full((L, V), -np.inf)
        for d in range(L):
            f = int(rng.integers(1, 4))
            lp[d, rng.choice(V, f, replace=False)] = np.log(rng.dirichlet(np.ones(f)))
        return lp
    # unnormalised rows with several exact zeros: scores tie across depths
    lp = -rng.integers(0, 4, size=(L, V)).astype(float) * 0.5
    lp[rng.random((L, V)) < 0.1] = -np.inf
    lp[:, 0] = 0.0
    return lp


@pytest.mark.parametrize("kind", ["sparse", "zeros"])
@pytest.mark.parametrize("seed", range(6))
def test_levels_the_threshold_cannot_cut_are_trimmed_exactly(kind, seed, monkeypatch,
                                                             builder_path):
    # Such inputs used to enumerate every prefix (memory blow-up at L = 15, B = 64); a level is
    # now cut to its first B nodes in heap-key order (numpy path; the compiled heap never
    # enumerates a level). Exactness against the reference heap:
    if builder_path == "compiled":
        pytest.skip("numpy-path internals")

    module = _ddtree
    calls = []
    original = module._first_in_level_streamed
    monkeypatch.setattr(module, "_first_in_level_streamed",
                        lambda *a: calls.append(1) or original(*a))
    rng = np.random.default_rng(seed)
    lp = _degenerate_log_q(rng, kind, int(rng.integers(4, 7)), 24)
    for budget in (17, 40):
        tree = ddtree(lp, budget, check_sums=False)  # adversarial scores, not distributions
        parent, token, depth, _ = ddtree_heap_reference(lp, budget)
        assert tree.parent.tolist() == parent
        assert tree.token[1:].tolist() == token[1:]
        assert tree.depth.tolist() == depth
    assert calls, "no level needed trimming; the test no longer covers it"


def test_truncated_rows_at_full_depth_stay_cheap():
    rng = np.random.default_rng(0)
    lp = _degenerate_log_q(rng, "sparse", 15, 64)
    tree = ddtree(lp, 512, check_sums=False)  # every prefix would need ~64^15 nodes
    parent, _, _, _ = ddtree_heap_reference(lp, 512)
    assert tree.parent.tolist() == parent


_HUGE_BUDGET_SCRIPT = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
import numpy as np
from treespec_sim.engine import run_round
from treespec_sim.synth import make_world
w = make_world("math500", seed=0)
ctx = w.sample_context(np.random.default_rng(0))
r = run_round(w, ctx, method="ddtree", budget=1_000_000, temperature=1.0,
              rng=np.random.default_rng(0))
print(r.tree_size, r.expected_tau)
"""


def test_a_million_node_tree_fits_in_an_address_space_limit():
    """B = 10^6 at V = 32768 allocated 8 GiB in one frontier expansion (a tie plateau of
    32768 x 32768 children) and was killed; the level is now streamed: memory grows with the
    tree. Run under a 3 GiB address-space limit in a subprocess."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-c", _HUGE_BUDGET_SCRIPT], capture_output=True,
                         text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    size, tau = res.stdout.split()
    assert int(size) == 1_000_000 and 1.0 < float(tau) <= 16.0


# ------------------------------------- issue 23: raw arrays, checks on, DDTree's own builder
def _dflash_like(rng, L, V, top, bottom):
    logits = rng.standard_normal((L, V)) * np.linspace(top, bottom, L)[:, None]
    return _log_softmax(logits)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("budget", [64, 256, 1024])
@pytest.mark.parametrize("sharpness", [(12.0, 3.0), (8.0, 0.7)])
def test_identical_to_ddtree_torch_builder(dtype, budget, sharpness):
    """Same nodes, same order, same mask as DDTree's builder (torch.topk of float32 marginals,
    heapq pops) on raw arrays of both dtypes, input checks on (bench_ddtree.py's comparison)."""
    pytest.importorskip("torch")
    reference = pytest.importorskip("proofs_check.reference")
    rng = np.random.default_rng(budget)
    lp = _dflash_like(rng, 15, 4096, *sharpness).astype(dtype)
    tree, mask = ddtree_with_mask(lp, budget)
    parent, token, depth, ref_mask = reference.ddtree_torch_reference(lp, budget)
    assert tree.parent.tolist() == parent
    assert tree.token[1:].tolist() == token[1:]
    assert tree.depth.tolist() == depth
    assert np.array_equal(mask, ref_mask)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_rows_mass_is_checked_on_large_arrays(dtype):
    """Above 2^20 entries too: a middle row of logits is refused, not only the first/last."""
    rng = np.random.default_rng(0)
    lp = _dflash_like(rng, 40, 32768, 6.0, 1.0).astype(dtype)  # 1.3 M entries
    lp[17] += 0.5  # sums to e^0.5
    with pytest.raises(ValueError, match=r"log_q\[17\] sums to"):
        ddtree(lp, 64)
    assert ddtree(lp, 64, check_sums=False).size == 64


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_positive_rounding_is_not_copied_and_gives_the_clamped_tree(dtype):
    """Entries in (0, 1e-12] (log-softmax rounding) give the tree of the clamped array,
    including ties at 0 broken by token id, without a clamped copy of the whole array."""
    rng = np.random.default_rng(1)
    lp = _dflash_like(rng, 6, 512, 6.0, 1.0)
    lp[2, 7] = 1e-13  # the row's best token, positive by rounding
    lp[3, 5], lp[3, 9] = 0.0, 1e-13  # a tie at 0 once clamped: token 5 ranks first
    lp[3, np.r_[:5, 6:9, 10:512]] = -np.inf
    lp = lp.astype(dtype)
    for budget in (1, 8, 64, 300):
        got = ddtree(lp, budget, check_sums=False)
        want = ddtree(np.minimum(lp, 0.0), budget, check_sums=False)
        assert got.parent.tolist() == want.parent.tolist()
        assert got.token.tolist() == want.token.tolist()
