r"""Look at a draft tree: :func:`tree` draws one, top-down, coloured by a per-node quantity.

The colour is one of

``"reach"``
    :math:`P(v)`, the target's probability of reaching node ``v``
    (:func:`treespec_sim.exits.reach_probabilities`; needs the target ``rows``). The root is 1.
``"exit"``
    :math:`w(v) = P(v)\rho(v)`, the probability that a target continuation leaves the tree at
    ``v`` (:func:`treespec_sim.exits.exit_law`; needs ``rows``). Sums to 1 over the nodes.
``"path"``
    :math:`q(v)`, the drafter's probability of the path to ``v``
    (:func:`treespec_sim.paths.path_probabilities`; needs ``log_q``). The root is 1.

The accepted path of a sampled :class:`~treespec_sim.verify.Outcome` is drawn as a thick red
line with red node outlines. matplotlib and networkx are imported inside the functions (heavy,
and only plots need them); without a display matplotlib falls back to its Agg backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from .exits import exit_law, reach_probabilities
from .marginals import LazyLogMarginals
from .paths import path_probabilities
from .tree import DraftTree
from .validation import check_log_q

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.axes import Axes

    from .verify import Outcome

__all__ = ["COLOR_BY", "figure_legend", "tree", "tree_layout"]

#: What :func:`tree` can colour nodes by -> the colour bar's label.
COLOR_BY = {
    "reach": "target reach probability P(v)",
    "exit": "exit mass w(v) (target leaves the tree at v)",
    "path": "drafter path probability q(v)",
}

#: gid of the artists :func:`tree` draws (tests and callers find them by it).
GID_NODES, GID_EDGES, GID_PATH, GID_LABEL = ("treespec-nodes", "treespec-edges",
                                             "treespec-path", "treespec-node-label")
_PATH_COLOR = "crimson"


def tree_layout(t: DraftTree) -> dict[int, tuple[float, float]]:
    """Top-down positions of every node: ``{node: (x, y)}`` with ``y = -depth``.

    Leaves take consecutive integer ``x`` in depth-first order (siblings in node order, which
    is the draw order of sampled trees), and an inner node sits midway between its first and
    last child, so no two nodes overlap and subtrees never cross. This is the layout graphviz's
    ``dot`` would give a tree, computed here because networkx has no tree layout of its own.

    Parameters
    ----------
    t : DraftTree

    Returns
    -------
    dict int -> (float, float)
        A networkx-style ``pos`` mapping.
    """
    children: list[list[int]] = [[] for _ in range(t.n_nodes)]
    for v in range(1, t.n_nodes):
        children[int(t.parent[v])].append(v)
    x = np.zeros(t.n_nodes)
    next_leaf = 0.0
    # Iterative post-order (deep trees would overflow Python's recursion limit).
    stack: list[tuple[int, bool]] = [(0, False)]
    while stack:
        v, done = stack.pop()
        if not children[v]:
            x[v], next_leaf = next_leaf, next_leaf + 1.0
        elif done:
            x[v] = (x[children[v][0]] + x[children[v][-1]]) / 2
        else:
            stack.append((v, True))
            stack.extend((c, False) for c in reversed(children[v]))
    return {v: (float(x[v]), -float(t.depth[v])) for v in range(t.n_nodes)}


def _check_rows(t: DraftTree, rows: Any) -> Any:
    """Rows must have one row per node (root included); an oracle is checked by its shape."""
    shape = getattr(rows, "shape", None)
    if shape is None:
        rows = np.asarray(rows, dtype=np.float64)
        shape = rows.shape
    if len(shape) != 2 or shape[0] != t.n_nodes:
        raise ValueError(f"rows must have shape (n+1, V) = ({t.n_nodes}, V), one target row "
                         f"per node of the tree (root included); got shape {tuple(shape)}")
    return rows


def _check_outcome(t: DraftTree, outcome: Any) -> tuple[int, ...]:
    """The outcome's path must be a root path of this tree carrying the outcome's tokens."""
    path = tuple(int(v) for v in getattr(outcome, "path", ()))
    if not hasattr(outcome, "path"):
        raise ValueError(f"outcome must be an Outcome (with a .path of node ids); got "
                         f"{type(outcome).__name__}")
    parent = 0
    for i, v in enumerate(path):
        if not 1 <= v < t.n_nodes:
            raise ValueError(f"outcome.path[{i}] = {v} is not a node of the tree (non-root "
                             f"nodes are 1..{t.n_nodes - 1}); was it sampled on another tree?")
        if int(t.parent[v]) != parent:
            raise ValueError(f"outcome.path[{i}] = {v} is not a child of "
                             f"{'the root' if parent == 0 else f'node {parent}'} (its parent "
                             f"is {int(t.parent[v])}): outcome.path is not a path of this tree")
        parent = v
    tokens = getattr(outcome, "tokens", None)
    if tokens is not None and tuple(tokens[: len(path)]) != tuple(int(x) for x in t.token[
            list(path)]):
        raise ValueError("outcome.tokens differ from the tree's tokens along outcome.path: "
                         "the outcome was sampled on another tree")
    return path


def _values(t: DraftTree, color_by: str | None, rows: Any, log_q: Any
            ) -> tuple[str | None, np.ndarray | None]:
    if color_by is None:
        color_by = "reach" if rows is not None else "path" if log_q is not None else None
    if color_by is None:
        return None, None
    if color_by not in COLOR_BY:
        raise ValueError(f"color_by must be one of {', '.join(map(repr, COLOR_BY))}; got "
                         f"{color_by!r}")
    if color_by in ("reach", "exit"):
        if rows is None:
            raise ValueError(f"color_by={color_by!r} needs the target rows: pass rows=")
        try:
            values = (reach_probabilities if color_by == "reach" else exit_law)(t, rows)
        except ValueError as exc:  # name the argument the caller knows
            raise ValueError(f"rows: {exc}") from None
        return color_by, values
    if log_q is None:
        raise ValueError("color_by='path' needs the drafter's log-probabilities: pass log_q=")
    lp = log_q if isinstance(log_q, LazyLogMarginals) else check_log_q(log_q, "log_q")[0]
    depth, vocab = lp.shape
    if depth < t.max_depth:
        raise ValueError(f"log_q has {depth} depths but the tree is {t.max_depth} deep")
    if t.size and int(t.token[1:].max()) >= vocab:
        raise ValueError(f"log_q has a vocabulary of {vocab} but the tree carries token "
                         f"{int(t.token[1:].max())}")
    return color_by, np.concatenate([[1.0], path_probabilities(t, lp)])


def tree(t: DraftTree, *, rows: Any = None, log_q: Any = None, ax: Axes | None = None,
         outcome: Outcome | None = None, color_by: str | None = None,
         labels: Mapping[int, str] | None = None, cmap: str = "Blues",
         colorbar: bool = True) -> Axes:
    """Draw a draft tree top-down: token labels, colour by a per-node quantity, accepted path.

    Parameters
    ----------
    t : DraftTree
    rows : ndarray (n+1, V) or target oracle, optional
        The target's law after the path to each node (e.g. ``Round.rows``); needed for
        ``color_by="reach"`` (the default when given) and ``"exit"``.
    log_q : ndarray (L, V) or LazyLogMarginals, optional
        The drafter's log-marginals (``Round.log_q``); needed for ``color_by="path"`` (the
        default when ``rows`` is not given).
    ax : matplotlib Axes, optional
        Where to draw; a new figure sized to the tree otherwise.
    outcome : Outcome, optional
        A sampled verification of ``t``; its accepted path is drawn in red and the legend
        names the accepted tokens and the bonus token.
    color_by : {"reach", "exit", "path"}, optional
        See the module docstring; default ``"reach"`` with ``rows``, ``"path"`` with ``log_q``
        only, and a uniform colour with neither.
    labels : mapping int -> str, optional
        Text for a token (e.g. a tokenizer's decoding); other tokens print as numbers, an
        unknown root token (-1) as "root".
    cmap : str
        A sequential matplotlib colour map; high values are dark ("Blues": the root is darkest).
    colorbar : bool
        Draw a colour bar labelled with the quantity (when there is one).

    Returns
    -------
    matplotlib.axes.Axes
        Nodes are one scatter collection (gid ``"treespec-nodes"``, its array the plotted
        values), one text label per node (gid ``"treespec-node-label"``), the edges (gid
        ``"treespec-edges"``) and the accepted path (gid ``"treespec-path"``).

    Raises
    ------
    ValueError
        ``rows`` of the wrong shape or not probability rows, ``log_q`` too shallow or too
        narrow for the tree's tokens, an unknown ``color_by`` or one whose input is missing, an
        ``outcome`` whose path is not a root path of ``t``.
    """
    if not isinstance(t, DraftTree):
        raise ValueError(f"tree must be a DraftTree; got {type(t).__name__}")
    if rows is not None:
        rows = _check_rows(t, rows)
    path = _check_outcome(t, outcome) if outcome is not None else ()
    color_by, values = _values(t, color_by, rows, log_q)
    labels = dict(labels or {})

    plt = _pyplot()
    pos = tree_layout(t)
    width = max(xy[0] for xy in pos.values()) + 1
    if ax is None:
        _, ax = plt.subplots(figsize=(min(24.0, max(4.0, 0.5 * width + 2.0)),
                                      max(2.5, 0.85 * (t.max_depth + 1) + 1.0)))
    _draw_edges(ax, t, pos, path)
    xy = np.array([pos[v] for v in range(t.n_nodes)])
    sc, norm = _draw_nodes(ax, t, xy, values, color_by, plt.get_cmap(cmap), path)
    _draw_labels(ax, t, xy, labels, values, norm)
    if values is not None and colorbar:
        ax.figure.colorbar(sc, ax=ax, label=COLOR_BY[color_by], fraction=0.035, pad=0.02)
    if outcome is not None:
        _draw_accepted_legend(ax, t, path, getattr(outcome, "bonus", None), labels)
    _depth_axis(ax, t, width, room_for_legend=outcome is not None)
    return ax


def _pyplot():
    """``matplotlib.pyplot``, on the Agg backend when headless and no backend is chosen yet
    (rather than failing on a GUI backend)."""
    import sys

    import matplotlib

    if "matplotlib.pyplot" not in sys.modules and not _has_display():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw_edges(ax: Axes, t: DraftTree, pos: dict[int, tuple[float, float]],
                path: tuple[int, ...]) -> None:
    """The tree's edges in grey, and the accepted ``path`` (node ids) over them in red."""
    import networkx as nx

    g = t.to_networkx()
    edges = nx.draw_networkx_edges(g, pos, ax=ax, arrows=False, edge_color="0.55", width=1.0)
    edges.set_gid(GID_EDGES)
    edges.set_zorder(1)
    if path:
        chain = [0, *path]
        hl = nx.draw_networkx_edges(g, pos, edgelist=list(pairwise(chain)),
                                    ax=ax, arrows=False, edge_color=_PATH_COLOR, width=3.0)
        hl.set_gid(GID_PATH)
        hl.set_zorder(2)


def _draw_nodes(ax: Axes, t: DraftTree, xy: np.ndarray, values: np.ndarray | None,
                color_by: str | None, cm, path: tuple[int, ...]):
    """The node discs at ``xy`` ``(n+1, 2)``, coloured by ``values`` (uniform if None), the
    accepted path's outlined in red: the scatter collection and its colour norm (or None)."""
    from matplotlib.colors import Normalize, to_rgba

    if values is None:
        norm = None
        sc = ax.scatter(xy[:, 0], xy[:, 1], s=440, c=[cm(0.35)], edgecolors="0.3",
                        linewidths=0.8, zorder=3)
    else:
        # Reach and path probabilities live on [0, 1] (root = 1); exit mass is spread over
        # the nodes, so its scale stops at the largest exit to keep small exits visible.
        vmax = 1.0 if color_by != "exit" else max(float(values.max()), 1e-12)
        norm = Normalize(0.0, vmax)
        sc = ax.scatter(xy[:, 0], xy[:, 1], s=440, c=values, cmap=cm, norm=norm,
                        edgecolors="0.3", linewidths=0.8, zorder=3)
    sc.set_gid(GID_NODES)
    if path:
        on = np.array(path)
        widths = np.full(t.n_nodes, 0.8)
        widths[on] = 2.5
        colors = np.array([to_rgba("0.3")] * t.n_nodes)
        colors[on] = to_rgba(_PATH_COLOR)
        sc.set_linewidths(widths)
        sc.set_edgecolors(colors)
    return sc, norm


def _draw_labels(ax: Axes, t: DraftTree, xy: np.ndarray, labels: Mapping[int, str],
                 values: np.ndarray | None, norm) -> None:
    """Each node's token (``labels``' text, else its id; an unknown root token: "root")."""
    for v in range(t.n_nodes):
        tok = int(t.token[v])
        text = labels.get(tok, "root" if (v == 0 and tok < 0) else str(tok))
        # Dark nodes get white text; the threshold is where "Blues"/"viridis" turn dark.
        dark = values is not None and norm(values[v]) > 0.55
        ax.text(xy[v, 0], xy[v, 1], text, ha="center", va="center", zorder=4,
                fontsize=8 if len(text) <= 3 else 6.5, color="white" if dark else "black",
                gid=GID_LABEL)


def _draw_accepted_legend(ax: Axes, t: DraftTree, path: tuple[int, ...], bonus: int | None,
                          labels: Mapping[int, str]) -> None:
    """A legend naming the accepted tokens and the bonus token."""
    from matplotlib.lines import Line2D

    acc = " ".join(labels.get(int(t.token[v]), str(int(t.token[v]))) for v in path)
    text = f"accepted: {acc}" if path else "nothing accepted"
    if bonus is not None:
        text += f" + bonus {labels.get(int(bonus), str(int(bonus)))}"
    ax.legend(handles=[Line2D([], [], color=_PATH_COLOR, lw=3, label=text)],
              loc="lower left", fontsize=8, framealpha=0.9)


def _depth_axis(ax: Axes, t: DraftTree, width: float, *, room_for_legend: bool) -> None:
    """A depth axis on the left, no other ticks or spines, limits around the discs."""
    depths = np.arange(t.max_depth + 1)
    # networkx's drawing hides both axes' ticks; the depth axis is worth keeping.
    ax.tick_params(axis="y", left=True, labelleft=True)
    ax.set_yticks(-depths, [str(d) for d in depths])
    ax.set_ylabel("depth")
    ax.set_xticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    # Room for the node discs and a legend row below the deepest level.
    ax.set_xlim(-0.7, width - 0.3)
    ax.set_ylim(-t.max_depth - (1.1 if room_for_legend else 0.5), 0.5)


def figure_legend(fig, handles: list, labels: list[str], *, title: str = "",
                  fontsize: float = 8.0, max_cols: int = 5):
    """One legend for a whole figure, below its panels and inside the canvas.

    The figure must use constrained layout (``layout="constrained"``), which makes room for an
    ``"outside lower center"`` legend. Columns and the title's line breaks are chosen from the
    figure's width so that the legend never runs off the canvas (a ``tight_layout`` figure
    legend is clipped or covers the panels).
    """
    import textwrap

    width_in = fig.get_figwidth()
    char_in = 0.6 * fontsize / 72          # a proportional font's average glyph width
    entry_in = max((len(x) for x in labels), default=1) * char_in + 0.7   # + handle
    ncol = max(1, min(max_cols, len(labels), int(0.95 * width_in // entry_in)))
    if title:
        title = textwrap.fill(title, width=max(20, int(0.95 * width_in / char_in)))
    return fig.legend(handles, labels, loc="outside lower center", ncol=ncol,
                      fontsize=fontsize, title=title or None, title_fontsize=fontsize)


def _has_display() -> bool:
    """Whether an interactive backend could open a window."""
    import os
    import sys

    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
