r"""The tree term of ExitTrain's public recipe (docs/real_models.md, ExitTrain).

At an anchor ``a`` the drafter's marginals :math:`q_1..q_L` (detached) build a DDTree
(:func:`treespec_sim.policies.ddtree`, the code path of the sweep and the decoder). The frozen
target scores every node in one tree-attention forward over
``[last W context tokens | anchor | nodes]``, each node seeing the context, the anchor and its
own ancestors (an additive 4-D mask, as :meth:`real_models.target.TargetBackend.tree_mask`
builds it for verification, here with the context in the same block instead of a KV cache).
At temperature 1, :math:`\tilde p_v` is the target's probability of node ``v``'s token after
its parent's path. The node weights are

* ``P``: :math:`P(v) = \prod_{u \in \mathrm{path}(v)} \max(\tilde p_u, 10^{-4})` (the
  released recipes' weighting),
* ``P-rho``: :math:`P(v)\,\rho(v)`, :math:`\rho(v) = \mathrm{clip}(1 - \sum_{c \in
  \mathrm{ch}(v)} \tilde p_c, 0, 1)` (the exit mass with the floored reach),
* ``P-rho-depth``: :math:`P(v)\,\rho(v)\,\mathrm{depth}(v)`,

and the term over a batch of trees with ``N`` nodes in all is

.. math::
    \frac{1}{N} \sum_v w(v)\,\bigl(-\log q_{\mathrm{depth}(v)}(x_v)\bigr),

the weights detached (no gradient through the tree, the target or the weights: only through
``q``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from treespec_sim import DraftTree
from treespec_sim.policies import ddtree

from ._deps import require

torch = require("torch")

__all__ = ["FLOOR", "WEIGHTINGS", "build_trees", "edge_probs_from_rows", "node_weights",
           "score_trees", "tree_term"]

#: The weightings of the tree term (module docstring); ``P`` is the released one.
WEIGHTINGS = ("P", "P-rho", "P-rho-depth")
#: The floor of :math:`\tilde p` in the reach product (the released ``dted_alpha``).
FLOOR = 1e-4


def edge_probs_from_rows(tree: DraftTree, rows: np.ndarray) -> np.ndarray:
    r""":math:`\tilde p_v` = ``rows[parent[v], token[v]]`` for every node (entry 0 is 1).

    Parameters
    ----------
    tree : DraftTree
        ``n`` nodes.
    rows : ndarray (n+1, V)
        Row ``u``: the target's next-token distribution after the path to node ``u``.

    Returns
    -------
    ndarray float64 (n+1,)
    """
    out = np.ones(tree.n_nodes, dtype=np.float64)
    if tree.size:
        out[1:] = np.asarray(rows, dtype=np.float64)[tree.parent[1:], tree.token[1:]]
    return out


def node_weights(tree: DraftTree, p_edge: np.ndarray, weighting: str, *,
                 floor: float = FLOOR) -> np.ndarray:
    r"""The weight :math:`w(v)` of every non-root node (module docstring).

    Parameters
    ----------
    tree : DraftTree
        ``n`` nodes.
    p_edge : ndarray (n+1,)
        :math:`\tilde p_v` (:func:`edge_probs_from_rows`); entry 0 is not read.
    weighting : {"P", "P-rho", "P-rho-depth"}
    floor : float
        Lower bound of each factor of the reach product (not of :math:`\rho`, which uses the
        raw :math:`\tilde p`).

    Returns
    -------
    ndarray float64 (n,)
        Weights of nodes ``1..n``.
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {', '.join(WEIGHTINGS)}; got {weighting!r}")
    p = np.asarray(p_edge, dtype=np.float64)
    n = tree.size
    reach = np.ones(n + 1, dtype=np.float64)
    floored = np.maximum(p, floor)
    for v in range(1, n + 1):       # parents precede children (DraftTree)
        reach[v] = reach[tree.parent[v]] * floored[v]
    if weighting == "P":
        return reach[1:]
    child_mass = np.zeros(n + 1, dtype=np.float64)
    np.add.at(child_mass, tree.parent[1:], p[1:])
    rho = np.clip(1.0 - child_mass, 0.0, 1.0)
    w = reach * rho
    if weighting == "P-rho-depth":
        w = w * tree.depth
    return w[1:]


def build_trees(log_q, budget: int, root_tokens: Sequence[int]) -> list[DraftTree]:
    """One DDTree per anchor from the drafter's (detached) log-marginals.

    Parameters
    ----------
    log_q : torch.Tensor (m, L, V)
        Log-probabilities at depths ``1..L`` of ``m`` anchors' blocks.
    budget : int
        Non-root nodes per tree.
    root_tokens : sequence of int (m,)
        The anchor tokens (the trees' roots).
    """
    lq = log_q.detach().to(torch.float32).contiguous().numpy()
    return [ddtree(lq[i], budget, root_token=int(root_tokens[i])) for i in range(lq.shape[0])]


def score_trees(model, windows: np.ndarray, anchor_pos: np.ndarray, trees: Sequence[DraftTree]
                ) -> list[np.ndarray]:
    r"""The frozen target's rows at every tree node, all trees in one batched forward.

    Tree ``i``'s sequence is ``[windows[i] | anchor | nodes]`` with position ids
    ``anchor_pos[i] - W .. anchor_pos[i] - 1``, then ``anchor_pos[i] + depth`` (the anchor is
    the tree's root, ``tree.token[0]``); the context is causal, the anchor and the nodes see
    the whole context and their ancestors-or-self (:meth:`treespec_sim.DraftTree.attention_mask`).
    Shorter trees are padded with slots that see only themselves and that nothing sees.

    Parameters
    ----------
    model : transformers causal LM (frozen, eval mode)
    windows : ndarray int64 (m, W)
        The last ``W`` context tokens before each anchor.
    anchor_pos : ndarray int64 (m,)
        The anchors' positions (``>= W``).
    trees : sequence of DraftTree (m,)

    Returns
    -------
    list of ndarray float64 (n_i+1, V)
        Row ``u`` of tree ``i``: the target's distribution (``T = 1``) after the path to node
        ``u`` (row 0: after the anchor).
    """
    windows = np.asarray(windows, dtype=np.int64)
    m, W = windows.shape
    n1 = max(t.n_nodes for t in trees)
    S = W + n1
    dev = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    ids = np.zeros((m, S), dtype=np.int64)
    pos = np.zeros((m, S), dtype=np.int64)
    vis = np.zeros((m, S, S), dtype=bool)
    causal = np.tril(np.ones((W, W), dtype=bool))
    for i, t in enumerate(trees):
        a = int(anchor_pos[i])
        k = t.n_nodes
        ids[i, :W] = windows[i]
        ids[i, W:W + k] = t.token
        pos[i, :W] = np.arange(a - W, a)
        pos[i, W:W + k] = a + t.depth
        pos[i, W + k:] = a
        vis[i, :W, :W] = causal
        vis[i, W:W + k, :W] = True
        vis[i, W:W + k, W:W + k] = t.attention_mask()
        pad = np.arange(W + k, S)
        vis[i, pad, pad] = True
    mask = torch.zeros((m, 1, S, S), dtype=dtype, device=dev)
    mask.masked_fill_(~torch.from_numpy(vis).to(dev)[:, None], torch.finfo(dtype).min)
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(ids).to(dev), attention_mask=mask,
                       position_ids=torch.from_numpy(pos).to(dev), use_cache=False).logits
        probs = torch.softmax(logits[:, W:].to(torch.float64), dim=-1).cpu().numpy()
    return [probs[i, :t.n_nodes] for i, t in enumerate(trees)]


def tree_term(log_q, trees: Sequence[DraftTree], weights: Sequence[np.ndarray]):
    r""":math:`\frac1N\sum_v w(v)(-\log q_{\mathrm{depth}(v)}(x_v))` over all trees' nodes.

    Parameters
    ----------
    log_q : torch.Tensor (m, L, V)
        The drafter's log-marginals at the ``m`` anchors (with gradient).
    trees : sequence of DraftTree (m,)
    weights : sequence of ndarray (n_i,)
        :func:`node_weights` of each tree (constants: no gradient flows through them).

    Returns
    -------
    torch.Tensor
        A scalar; ``0`` (with a graph) when the trees have no nodes.
    """
    rows, depths, toks, ws = [], [], [], []
    for i, (t, w) in enumerate(zip(trees, weights, strict=True)):
        if t.size == 0:
            continue
        rows.append(np.full(t.size, i, dtype=np.int64))
        depths.append(t.depth[1:] - 1)
        toks.append(t.token[1:])
        ws.append(np.asarray(w, dtype=np.float64))
    if not rows:
        return log_q.sum() * 0.0
    r = torch.from_numpy(np.concatenate(rows))
    d = torch.from_numpy(np.concatenate(depths))
    x = torch.from_numpy(np.concatenate(toks))
    w = torch.from_numpy(np.concatenate(ws)).to(log_q.dtype)
    nll = -log_q[r, d, x]
    return (w * nll).sum() / nll.numel()
