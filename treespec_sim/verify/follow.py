r"""Predraw-and-follow verification (DDTree's verifier) for deterministic trees.

One target token is drawn at every node (argmax at T = 0, a sample otherwise); the walk starts
at the root and moves to the child carrying the drawn token until no child does; the token
drawn at the last node is the bonus (DDTree ``follow_verified_tree``). Drawing lazily, only at
the nodes the walk visits, has the same law and costs ``O(depth * V)``.

Lossless: the emitted tokens are consecutive exact target draws. Saturated (TEV Cor. 1): the
walk exits at ``v`` with probability :math:`w(v)`, so :math:`E[\tau] = 1 + C_p(T)`.
"""

from __future__ import annotations

import numpy as np

from .._sampling import sample_categorical
from ..rows import TargetOracle
from ..tree import DraftTree
from .outcome import Outcome

__all__ = ["follow_sample"]


def follow_sample(tree: DraftTree, oracle: TargetOracle, rng: np.random.Generator) -> Outcome:
    """Sample one round of predraw-and-follow verification."""
    path: list[int] = []
    v = 0
    while True:
        y = sample_categorical(oracle.row(v), rng)
        kids = tree.children(v)
        match = kids[tree.token[kids] == y]
        if match.size == 0:
            return Outcome.from_path(tree, tuple(path), y)
        v = int(match[0])  # first matching child in node order (duplicates: never reached)
        path.append(v)
