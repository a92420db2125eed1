import networkx as nx
import numpy as np
import pytest
from hypothesis import given

from proofs_check.strategies import trees
from treespec_sim import DraftTree


@given(trees(max_nodes=12, vocab=4))
def test_invariants(tree):
    n1 = tree.n_nodes
    assert tree.size == n1 - 1
    assert tree.parent[0] == -1 and tree.depth[0] == 0
    for v in range(1, n1):
        assert 0 <= tree.parent[v] < v
        assert tree.depth[v] == tree.depth[tree.parent[v]] + 1
    paths = tree.paths()
    assert len(paths) == tree.size
    for v in range(1, n1):
        p = tree.parent[v]
        assert paths[v - 1] == (paths[p - 1] if p else ()) + (tree.token[v],)
        assert len(paths[v - 1]) == tree.depth[v]
    # children in node order, partitioning the non-root nodes
    kids = [c for v in range(n1) for c in tree.children(v)]
    assert sorted(kids) == list(range(1, n1))
    for v in range(n1):
        assert list(tree.children(v)) == [u for u in range(1, n1) if tree.parent[u] == v]
    # ancestor-only mask, recomputed by walking up
    mask = tree.attention_mask()
    for i in range(n1):
        anc = {0, i, *tree.path_nodes(i)}
        assert set(np.flatnonzero(mask[i])) == anc
    assert np.array_equal(tree.position_ids(7), 7 + tree.depth)
    g = tree.to_networkx()
    assert nx.is_arborescence(g) and g.number_of_nodes() == n1
    assert all(g.nodes[v]["token"] == tree.token[v] for v in range(n1))
    # value semantics
    again = DraftTree.from_parents(list(tree.parent), list(tree.token))
    assert again == tree and hash(again) == hash(tree)
    with pytest.raises(ValueError):
        tree.parent[0] = 3  # read-only


def test_root_only():
    t = DraftTree.root_only(5)
    assert t.size == 0 and t.paths() == [] and t.attention_mask().tolist() == [[True]]
    assert t.root_token == 5


@pytest.mark.parametrize("parent, token, match", [
    ([-1, 0, 2], [0, 1, 1], r"parent\[2\] = 2"),
    ([-1, 0, 0, 5], [0, 1, 2, 3], r"parent\[3\] = 5"),
    ([0, 0], [0, 1], r"parent\[0\] must be -1"),
    ([-1, -1], [0, 1], r"parent\[1\] = -1"),
    ([-1, 0], [0, -2], r"token\[1\] = -2"),
    ([-1, 0], [-3, 1], r"token\[0\]"),
    ([-1, 0, 0], [0, 4, 4], r"nodes 1 and 2 are siblings"),
    ([-1, 0], [0, 1, 2], r"same length"),
    ([[-1, 0]], [[0, 1]], r"one-dimensional"),
    ([-1, 0.5], [0, 1], r"parent must contain integers"),
    ([], [], r"at least the root"),
])
def test_bad_input(parent, token, match):
    with pytest.raises(ValueError, match=match):
        DraftTree.from_parents(parent, token)


def test_multiset_allows_duplicate_siblings():
    t = DraftTree.from_parents_multiset([-1, 0, 0], [0, 4, 4])
    assert t.has_duplicate_siblings
    assert not DraftTree.from_parents([-1, 0, 0], [0, 4, 5]).has_duplicate_siblings
