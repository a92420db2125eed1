r"""Sibling-order walks: the shape shared by sample-and-match and the per-child ratio rule.

A *walk* starts at the root; at each node it moves to at most one child, chosen among the
node's children in sibling (node) order, and stops at the first node where it moves to none,
emitting that node's path and a *bonus* token. One :class:`NodeStep` per node says everything
the law of the walk needs: the absolute probability :math:`a_i` of moving to each child (given
the walk reached the node), and the law of the bonus when it moves to none (which has
probability :math:`1 - \sum_i a_i`).

The rules written on it (:mod:`.match`, :mod:`.ratio`) differ only in their node step; the
sampler, the exact round law, the exact :math:`E[\tau]` and the exact law of the first emitted
token are the four functions here, written once:

.. math::
    E[\tau] = 1 + A(0),\quad A(v) = \sum_i a_i(v)\,\bigl(1 + A(c_i)\bigr).

The sampler draws one uniform per visited node and takes the first child whose cumulative
:math:`a` exceeds it (SGLang's single coin per node for sample-and-match; for a rule with one
coin per child the law is the same), and one more draw for the bonus.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._sampling import sample_categorical
from ..tree import DraftTree
from .outcome import Outcome

__all__ = ["ROUNDING_STOP", "NodeStep", "StepFn", "make_step", "walk_expected_length",
           "walk_first_token_law", "walk_round_law", "walk_sample"]

#: A stop probability at most this large whose bonus law has no mass is rounding (rows are
#: accepted within 1e-9 of summing to 1): the walk never stops there.
ROUNDING_STOP = 1e-8


@dataclass(frozen=True)
class NodeStep:
    """What a walk does at one node.

    Attributes
    ----------
    accept : ndarray float64 (k,)
        Absolute probability of moving to each child, in sibling order (``sum <= 1``).
    residual : ndarray float64 (V,) or None
        The bonus law when the walk moves to no child, normalised; None when that happens with
        probability 0.
    """

    accept: np.ndarray
    residual: np.ndarray | None

    @property
    def stop(self) -> float:
        """Probability of moving to no child."""
        return 0.0 if self.residual is None else max(0.0, 1.0 - float(self.accept.sum()))


#: ``step(v) -> NodeStep`` for every node of the tree being walked.
StepFn = Callable[[int], NodeStep]


def make_step(accept: np.ndarray, bonus_weights: np.ndarray, node: int) -> NodeStep:
    """A :class:`NodeStep` from absolute child probabilities and unnormalised bonus weights.

    A stop probability of at most :data:`ROUNDING_STOP` with bonus weights of no mass is
    rounding: the children's probabilities are rescaled to sum to 1. A larger stop probability
    with no bonus mass raises ``ValueError`` naming ``node``.
    """
    accept = np.clip(np.asarray(accept, dtype=np.float64), 0.0, 1.0)
    stop = 1.0 - float(accept.sum())
    mass = float(bonus_weights.sum())
    if mass > 0.0 and stop > 0.0:
        return NodeStep(accept, bonus_weights / mass)
    if stop > ROUNDING_STOP:
        raise ValueError(f"node {node}: the walk stops with probability {stop!r} but its bonus "
                         "law has no mass")
    total = float(accept.sum())
    return NodeStep(accept / total if total > 0 else accept, None)


def walk_sample(tree: DraftTree, step: StepFn, rng: np.random.Generator) -> Outcome:
    """One round: one uniform per visited node, then a bonus draw."""
    path: list[int] = []
    v = 0
    while True:
        st = step(v)
        kids = tree.children(v)
        if kids.size:
            cdf = np.cumsum(st.accept)
            i = int(np.searchsorted(cdf, rng.random(), side="right"))
            if i >= kids.size and st.residual is None:  # u above a total rounded below 1
                i = int(np.flatnonzero(st.accept > 0)[-1])
            if i < kids.size:
                v = int(kids[i])
                path.append(v)
                continue
        if st.residual is None:
            raise ValueError(f"node {v}: the walk stopped where its bonus law has no mass")
        return Outcome.from_path(tree, tuple(path), sample_categorical(st.residual, rng))


def walk_round_law(tree: DraftTree, step: StepFn) -> dict[tuple[int, ...], float]:
    """Exact law of the emitted tokens ``(path tokens..., bonus)``."""
    law: dict[tuple[int, ...], float] = {}

    def visit(v: int, prefix: tuple[int, ...], prob: float) -> None:
        st = step(v)
        for c, a in zip(tree.children(v).tolist(), st.accept.tolist(), strict=True):
            if a > 0.0:
                visit(c, (*prefix, int(tree.token[c])), prob * a)
        if st.residual is not None and st.stop > 0.0:
            for y in np.flatnonzero(st.residual > 0).tolist():
                key = (*prefix, y)
                law[key] = law.get(key, 0.0) + prob * st.stop * float(st.residual[y])

    visit(0, (), 1.0)
    return law


def walk_expected_length(tree: DraftTree, step: StepFn) -> float:
    r"""Exact :math:`E[\tau]`, bonus included (one bottom-up pass)."""
    below = np.zeros(tree.n_nodes)
    for v in range(tree.n_nodes - 1, -1, -1):
        kids = tree.children(v)
        if kids.size:
            below[v] = float(np.dot(step(v).accept, 1.0 + below[kids]))
    return float(1.0 + below[0])


def walk_first_token_law(tree: DraftTree, step: StepFn, vocab: int) -> np.ndarray:
    """Exact law of the first emitted token, float64 (V,): the root's step only."""
    st = step(0)
    law = np.zeros(vocab)
    np.add.at(law, tree.token[tree.children(0)], st.accept)
    if st.residual is not None:
        law += st.stop * st.residual
    return law
