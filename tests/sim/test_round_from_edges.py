"""``Round.from_edges``: a round rebuilt from a tree and its recorded target edge probabilities.

Expected values are worked by hand on a four-node tree, or come from the round of the same tree
built from target rows (whose ``follow`` E[tau] is the verifier's own ``expected_length``, a
different computation from ``1 + coverage``).
"""

import numpy as np
import pytest

from treespec_sim import DraftTree
from treespec_sim.engine import Round, run_round
from treespec_sim.exits import EXIT_CAUSES
from treespec_sim.policies.draft import Draft
from treespec_sim.synth import make_world

EXACT = 1e-12

# root ─┬─ 1 (token 0) ── 3 (token 2)
#       └─ 2 (token 1)
PARENT = [-1, 0, 0, 1]
TOKEN = [5, 0, 1, 2]
# target rows (V = 3): row v = the target's law after the path to node v
ROWS = np.array([[0.5, 0.3, 0.2],
                 [0.1, 0.5, 0.4],
                 [0.2, 0.2, 0.6],
                 [1 / 3, 1 / 3, 1 / 3]])
EDGES = [1.0, 0.5, 0.3, 0.4]  # row[parent][token] per node, 1 at the root


def _tree() -> DraftTree:
    return DraftTree.from_parents(PARENT, TOKEN)


def _hand() -> Round:
    return Round.from_edges(_tree(), EDGES, depth_limit=2)


def test_hand_built_tree_by_hand():
    rnd = _hand()
    # reach P = (1, .5, .3, .5 * .4); coverage .5 + .3 + .2 = 1
    np.testing.assert_allclose(rnd.exits_reach, [1.0, 0.5, 0.3, 0.2], rtol=0, atol=EXACT)
    assert rnd.coverage == pytest.approx(1.0, abs=EXACT)
    assert rnd.expected_tau == pytest.approx(2.0, abs=EXACT)
    # exits: root (inner) .2 uncovered; node 1 (inner) .5 * .6 uncovered; node 2 (leaf, depth
    # 1 < L) .3 budget; node 3 (leaf at L = 2) .2 depth_cap
    want = np.zeros((3, len(EXIT_CAUSES)))
    want[0, 0], want[1, 0], want[1, 1], want[2, 2] = 0.2, 0.3, 0.3, 0.2
    np.testing.assert_allclose(rnd.exits.by_depth_cause, want, rtol=0, atol=EXACT)
    np.testing.assert_allclose(rnd.tau_curve, [1.0, 1.5, 1.8, 2.0], rtol=0, atol=EXACT)
    assert (rnd.rule, rnd.rows, rnd.outcome, rnd.method) == ("follow", None, None, "recorded")


def test_prefix_of_a_recorded_round_by_hand():
    sub = _hand().at_budget(1)  # nodes 0, 1: root exits .5 (inner), node 1 .5 (leaf, budget)
    assert sub.tree_size == 1
    assert sub.expected_tau == pytest.approx(1.5, abs=EXACT)
    np.testing.assert_allclose(sub.exits.by_depth_cause[:2], [[0.5, 0, 0], [0, 0.5, 0]],
                               rtol=0, atol=EXACT)


def test_hand_built_tree_equals_the_round_from_rows():
    tree = _tree()
    from_rows = Round("x", "follow", 0.0, Draft(tree), None, ROWS, 2)
    rnd = _hand()
    np.testing.assert_allclose(from_rows.edges, EDGES, rtol=0, atol=EXACT)
    assert rnd.expected_tau == pytest.approx(from_rows.expected_tau, abs=EXACT)
    np.testing.assert_allclose(rnd.exits.by_depth_cause, from_rows.exits.by_depth_cause,
                               rtol=0, atol=EXACT)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_engine_round_rebuilt_from_its_edges(temperature):
    world = make_world("small", seed=4)
    rng = np.random.default_rng(7)
    for _ in range(5):
        ctx = world.sample_context(rng)
        rnd = run_round(world, ctx, method="ddtree", budget=24, rule="follow",
                        temperature=temperature, rng=rng, sample=False)
        again = Round.from_edges(rnd.tree, rnd.edges, depth_limit=rnd.depth_limit,
                                 temperature=temperature, log_q=np.asarray(rnd.log_q))
        # expected_length (the verifier) on the rows vs 1 + coverage from the edges
        assert again.expected_tau == pytest.approx(rnd.expected_tau, abs=EXACT)
        np.testing.assert_array_equal(again.exits.by_depth_cause, rnd.exits.by_depth_cause)
        assert again.surrogate == pytest.approx(rnd.surrogate, abs=EXACT)
        for b in (1, 5, 24):
            assert again.at_budget(b).expected_tau == pytest.approx(
                run_round(world, ctx, method="ddtree", budget=b, rule="follow",
                          temperature=temperature, rng=rng, sample=False).expected_tau,
                abs=EXACT)


def test_edges_are_copied_and_read_only():
    edges = np.array(EDGES)
    rnd = Round.from_edges(_tree(), edges, depth_limit=3)
    edges[1] = 0.0
    assert rnd.edges[1] == 0.5
    with pytest.raises(ValueError):
        rnd.edges[1] = 0.1
    assert rnd.edges.dtype == np.float64
    f32 = Round.from_edges(_tree(), np.array(EDGES, dtype=np.float32), depth_limit=3)
    assert f32.edges.dtype == np.float64


def test_only_follow_and_no_surrogate_without_log_q():
    rnd = _hand()
    with pytest.raises(ValueError, match="only rule 'follow'"):
        rnd.expected_tau_under("tev")
    with pytest.raises(ValueError, match="log_q"):
        _ = rnd.surrogate
    with pytest.raises(ValueError, match="sample"):
        _ = rnd.sampled_tau


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"tree": [-1, 0]}, "tree must be a DraftTree"),
    ({"edges": [1.0, 0.5, 0.3]}, r"edges must have shape \(4,\)"),
    ({"edges": [[1.0, 0.5, 0.3, 0.4]]}, r"edges must have shape \(4,\)"),
    ({"edges": [1.0, 0.5, np.nan, 0.4]}, r"edges\[2\]"),
    ({"edges": [1.0, -0.1, 0.3, 0.4]}, r"edges\[1\]"),
    ({"edges": [1.0, 0.5, 0.3, 1.5]}, r"edges\[3\]"),
    ({"edges": [0.9, 0.5, 0.3, 0.4]}, r"edges\[0\]"),
    ({"edges": ["a", "b", "c", "d"]}, "edges"),
    ({"depth_limit": 1}, "depth_limit = 1 is below"),
    ({"depth_limit": 2.0}, "depth_limit"),
    ({"depth_limit": 0}, "depth_limit"),
    ({"temperature": -1.0}, "temperature"),
    ({"log_q": np.log(np.full((1, 3), 1 / 3))}, "log_q has 1 depths"),
    ({"log_q": np.log(np.full((2, 2), 0.5))}, r"tree.token\[3\] = 2 is outside log_q"),
    ({"log_q": np.zeros((2, 3))}, "log_q"),  # logits, not log-probabilities
])
def test_bad_input_names_the_argument(kwargs, match):
    args = {"tree": _tree(), "edges": EDGES, "depth_limit": 2, **kwargs}
    tree, edges = args.pop("tree"), args.pop("edges")
    with pytest.raises(ValueError, match=match):
        Round.from_edges(tree, edges, **args)


def test_duplicate_siblings_are_refused():
    tree = DraftTree.from_parents_multiset([-1, 0, 0], [0, 3, 3])
    with pytest.raises(ValueError, match="duplicate siblings"):
        Round.from_edges(tree, [1.0, 0.2, 0.2], depth_limit=1)
