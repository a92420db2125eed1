r"""Exact values of step choosers over the draws, and the exact-switch oracle (tiny V only).

A *shape* (a :class:`~treespec_sim.DraftTree` whose tokens are ignored) is filled by sequential
draws without replacement from ``world.q(path)``; ``world.p(path)`` is the target after
``path``. For a chooser (``NodeView -> step``, :mod:`treespec_sim.verify.univer`) the expected
extra depth of the subtree of shape node ``v`` visited at scale ``s`` after ``path`` is

.. math::
    W(v, s) = \mathbb{E}_{x_1..x_k}\Bigl[\sum_j \Bigl(\prod_{i<j}(1 - s_i)\Bigr)
        \bigl(s_j + W(c_j, s_j)\bigr)\Bigr],\qquad
    s_j = \min\bigl(1, \mu_j(x_{\pi_j}) / \rho_j(x_{\pi_j})\bigr),

over the trials :math:`j` of the chosen step (``coin+STEP``: :math:`s\,W_{\mathrm{STEP}}(v, 1)`),
because a child's subtree emits with probability exactly its scale whatever happens inside it.
So :math:`E[\tau] = 1 + W(\mathrm{root}, 1)` is computed node by node (draws enumerated per node,
not per tree): an implementation independent of the verifier's opportunity sequence, which the
theorems compare against ``expected_length`` averaged over every filled tree.

The *exact switch* takes, at every node, the step of largest :math:`W` — which needs the target
rows at prefixes never drafted, so no verifier can run it: it is the ceiling of the step family
(every realizable chooser is :math:`\le` it). Exponential in the depth; tiny ``V`` only.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from treespec_sim import DraftTree
from treespec_sim.verify.univer import COIN, NodeView, candidate_steps, trials

from .enumerate import draw_tuples

__all__ = ["oracle_chooser", "oracle_value", "rule_value"]

Chooser = Callable[[NodeView], str]


def _draws(q: np.ndarray, k: int):
    for tup, prob in draw_tuples(q, k, replacement=False):
        if prob > 0.0:
            yield np.array(tup), prob


class _Values:
    """Memoised :math:`W(v, \\mathrm{path}, s)` for a chooser (or the oracle's max)."""

    def __init__(self, shape: DraftTree, world, chooser: Chooser | None):
        self.shape, self.world, self.chooser = shape, world, chooser
        size = np.ones(shape.n_nodes, dtype=np.int64)
        for v in range(shape.n_nodes - 1, 0, -1):
            size[shape.parent[v]] += size[v]
        self.size = size
        self.memo: dict[tuple[int, tuple[int, ...], float, str], float] = {}

    def view(self, v: int, path: tuple[int, ...], s: float) -> NodeView:
        kids = self.shape.children(v)
        return NodeView(v, path, s, np.asarray(self.world.p(path), np.float64),
                        np.asarray(self.world.q(path), np.float64),
                        tuple(int(self.size[c]) for c in kids))

    def value(self, v: int, path: tuple[int, ...], s: float) -> float:
        """W under the chooser (or, with no chooser, the best step at every node)."""
        if not self.shape.children(v).size or s <= 0.0:
            return 0.0
        if self.chooser is not None:
            return self.step_value(v, path, s, self.chooser(self.view(v, path, s)))
        return max(self.step_value(v, path, s, st) for st in self.steps(v, s))

    def steps(self, v: int, s: float) -> list[str]:
        cands = candidate_steps(int(self.shape.children(v).size))
        return [st for st in cands if not (st.startswith(COIN) and s >= 1.0)]

    def best_step(self, v: int, path: tuple[int, ...], s: float) -> str:
        best, best_val = "traversal", self.step_value(v, path, s, "traversal")
        for st in self.steps(v, s)[1:]:
            val = self.step_value(v, path, s, st)
            if val > best_val + 1e-12:
                best, best_val = st, val
        return best

    def step_value(self, v: int, path: tuple[int, ...], s: float, step: str) -> float:
        key = (v, path, s, step)
        if key in self.memo:
            return self.memo[key]
        if step.startswith(COIN):
            out = s * self.step_value(v, path, 1.0, step[len(COIN):]) if s < 1.0 else \
                self.step_value(v, path, s, step[len(COIN):])
            self.memo[key] = out
            return out
        kids = self.shape.children(v)
        p = np.asarray(self.world.p(path), np.float64)
        q = np.asarray(self.world.q(path), np.float64)
        total = 0.0
        for tokens, prob in _draws(q, kids.size):
            reach, cur, got = 1.0, s * p, 0.0
            for pos, rho in trials(step, q, tokens):
                x = int(tokens[pos])
                s_c = 1.0 if cur[x] >= rho[x] else float(cur[x] / rho[x])
                if s_c > 0.0:
                    got += reach * (s_c + self.value(int(kids[pos]), (*path, x), s_c))
                if s_c >= 1.0:
                    break
                diff = cur - rho
                r_mass = float(np.clip(-diff, 0.0, None).sum())
                if r_mass <= 1e-15:
                    break
                reach *= 1.0 - s_c
                cur = np.clip(diff, 0.0, None) / r_mass
            total += prob * got
        self.memo[key] = total
        return total


def rule_value(shape: DraftTree, world, chooser: Chooser) -> float:
    r"""Exact :math:`E[\tau]` of ``chooser`` over the draws and the coins, node by node."""
    return 1.0 + _Values(shape, world, chooser).value(0, (), 1.0)


def oracle_value(shape: DraftTree, world, *, root_step: str | None = None) -> float:
    r"""Exact :math:`E[\tau]` of the exact switch (best step at every node, from the world's
    rows at every prefix); ``root_step`` forces the root's step (the oracle below it)."""
    vals = _Values(shape, world, None)
    if root_step is None:
        return 1.0 + vals.value(0, (), 1.0)
    return 1.0 + vals.step_value(0, (), 1.0, root_step)


def oracle_chooser(shape: DraftTree, world) -> Chooser:
    """The exact switch as a chooser (reads the world's rows below the node: test-only)."""
    vals = _Values(shape, world, None)

    def choose(view: NodeView) -> str:
        return vals.best_step(view.node, view.path, view.scale)
    return choose
