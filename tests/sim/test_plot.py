"""treespec_sim.plot.tree: one label per node, the accepted path, colours, errors."""

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from treespec_sim import DraftTree
from treespec_sim.exits import exit_law, reach_probabilities
from treespec_sim.plot import GID_LABEL, GID_NODES, GID_PATH, tree, tree_layout
from treespec_sim.policies import ddtree, path_probabilities
from treespec_sim.verify import Outcome

#        0
#      /   \
#     1     2
#    / \     \
#   3   4     5
PARENT = [-1, 0, 0, 1, 1, 2]
TOKEN = [9, 0, 1, 2, 3, 0]
V = 4


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture
def small():
    t = DraftTree.from_parents(PARENT, TOKEN)
    rows = np.random.default_rng(0).dirichlet(np.ones(V), size=t.n_nodes)
    return t, rows


def _artist(ax, gid):
    found = [a for a in [*ax.collections, *ax.patches] if a.get_gid() == gid]
    assert len(found) <= 1
    return found[0] if found else None


def test_one_label_per_node_and_returns_axes(small):
    t, rows = small
    ax = tree(t, rows=rows, labels={0: "the", 3: "cat"})
    assert isinstance(ax, matplotlib.axes.Axes)
    texts = [x.get_text() for x in ax.texts if x.get_gid() == GID_LABEL]
    assert len(texts) == t.n_nodes
    assert texts == ["9", "the", "1", "2", "cat", "the"]   # labels map tokens, others numbers


def test_root_label_when_root_token_unknown():
    t = DraftTree.from_parents([-1, 0], [-1, 2])
    ax = tree(t)
    assert [x.get_text() for x in ax.texts if x.get_gid() == GID_LABEL] == ["root", "2"]
    assert _artist(ax, GID_NODES).get_array() is None   # no quantity: a uniform colour


def test_colours_follow_reach_probabilities(small):
    t, rows = small
    ax = tree(t, rows=rows)
    nodes = _artist(ax, GID_NODES)
    reach = reach_probabilities(t, rows)
    np.testing.assert_allclose(nodes.get_array(), reach)
    ax.figure.canvas.draw()                                  # colours are mapped at draw
    face = nodes.get_facecolors()
    assert face.shape == (t.n_nodes, 4)
    luminance = face[:, :3] @ [0.299, 0.587, 0.114]
    assert reach[0] == 1.0 and luminance.argmin() == 0       # root darkest: it is reached surely
    assert np.all(np.diff(luminance[np.argsort(reach)]) <= 1e-12)   # darker = more likely
    assert len(ax.figure.axes) == 2                          # the colour bar
    assert "reach" in ax.figure.axes[1].get_ylabel()


def test_exit_and_path_colours(small):
    t, rows = small
    ax = tree(t, rows=rows, color_by="exit")
    np.testing.assert_allclose(_artist(ax, GID_NODES).get_array(), exit_law(t, rows))
    log_q = np.log(np.random.default_rng(1).dirichlet(np.ones(V), size=2))
    ax = tree(t, log_q=log_q)
    np.testing.assert_allclose(_artist(ax, GID_NODES).get_array(),
                               [1.0, *path_probabilities(t, log_q)])


def test_highlights_exactly_the_outcome_path(small):
    t, rows = small
    ax = tree(t, rows=rows, outcome=Outcome(path=(1, 4), bonus=2, tokens=(0, 3, 2)))
    pos = tree_layout(t)
    segs = _artist(ax, GID_PATH).get_segments()
    drawn = {(tuple(np.round(a, 9)), tuple(np.round(b, 9))) for a, b in segs}
    assert drawn == {(pos[0], pos[1]), (pos[1], pos[4])}
    widths = _artist(ax, GID_NODES).get_linewidths()
    thick = {v for v in range(t.n_nodes) if widths[v] > 1.5}
    assert thick == {1, 4}
    legend = ax.get_legend()
    assert legend is not None and "bonus 2" in legend.get_texts()[0].get_text()
    # nothing accepted: no path drawn, the legend says so
    ax = tree(t, rows=rows, outcome=Outcome(path=(), bonus=1, tokens=(1,)))
    assert _artist(ax, GID_PATH) is None
    assert "nothing accepted" in ax.get_legend().get_texts()[0].get_text()


def test_layout_is_top_down_and_does_not_overlap():
    t = ddtree(np.log(np.random.default_rng(2).dirichlet(np.ones(6), size=4)), 20)
    pos = tree_layout(t)
    assert all(pos[v][1] == -t.depth[v] for v in range(t.n_nodes))
    for d in range(t.max_depth + 1):
        xs = sorted(pos[v][0] for v in range(t.n_nodes) if t.depth[v] == d)
        assert np.all(np.diff(xs) >= 1 - 1e-12)               # one slot apart at least
    for v in range(1, t.n_nodes):                               # children in draw order
        kids = t.children(v)
        assert [pos[int(c)][0] for c in kids] == sorted(pos[int(c)][0] for c in kids)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"rows": np.full((3, V), 1 / V)}, r"rows must have shape \(n\+1, V\) = \(6, V\)"),
    ({"rows": np.full((6, V), 0.5)}, r"^rows: "),
    ({"outcome": Outcome(path=(7,), bonus=0, tokens=(0, 0))}, r"outcome.path\[0\] = 7"),
    ({"outcome": Outcome(path=(1, 5), bonus=0, tokens=(0, 0, 0))},
     r"outcome.path\[1\] = 5 is not a child of node 1"),
    ({"outcome": Outcome(path=(1,), bonus=0, tokens=(3, 0))}, r"outcome.tokens differ"),
    ({"color_by": "exit"}, r"needs the target rows: pass rows="),
    ({"color_by": "path"}, r"pass log_q="),
    ({"color_by": "heat"}, r"color_by must be one of"),
    ({"log_q": np.log(np.full((1, V), 1 / V))}, r"log_q has 1 depths but the tree is 2 deep"),
    ({"log_q": np.log(np.full((2, 3), 1 / 3))}, r"vocabulary of 3 but the tree carries token 3"),
])
def test_bad_input_names_the_argument(small, kwargs, match):
    t, _ = small
    with pytest.raises(ValueError, match=match):
        tree(t, **kwargs)
    with pytest.raises(ValueError, match="tree must be a DraftTree"):
        tree(PARENT)


# ----------------------------------------------------------------------------- the docs
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _usage_block() -> str:
    text = (DOCS / "usage.md").read_text()
    start = text.index("## Look at a tree\n")
    section = text[start: text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1
    return blocks[0]


def test_usage_section_runs_and_matches_the_gallery_script():
    namespace: dict = {}
    exec(compile(_usage_block(), "usage.md", "exec"), namespace)
    rnd, left, right = namespace["rnd"], namespace["left"], namespace["right"]
    assert rnd.tree.size == 24 and rnd.outcome is not None
    for ax in (left, right):
        assert sum(x.get_gid() == GID_LABEL for x in ax.texts) == rnd.tree.n_nodes
    # every line the docs show after their imports is a line of the gallery script's marked
    # region, so the figure in the docs is what the code in the docs draws
    script = (DOCS / "gallery.py").read_text()
    region = script.split("# --- the code shown in docs/usage.md", 1)[1].split("    # ----", 1)[0]
    region_lines = {line.strip() for line in region.splitlines()}
    shown = _usage_block().split("\n\n", 2)[2]   # after the two import groups
    missing = [ln for ln in shown.splitlines() if ln.strip() and ln.strip() not in region_lines]
    assert not missing


def test_gallery_script_writes_its_figure(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("gallery", DOCS / "gallery.py")
    gallery = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gallery)
    out = gallery.gallery(tmp_path / "g.png")
    assert out.exists() and out.stat().st_size > 10_000
    assert (DOCS / "figures" / "tree_gallery.png").exists()   # the committed one
