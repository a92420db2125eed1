r"""TEV: exit-law verification for deterministic trees.

Hu et al., *Where Draft Trees Lose Target Mass* (arXiv 2610.11750), Sec. 4: sample the exit
node :math:`v \sim w` from the exit law, accept its path, then draw the bonus from the node's
residual :math:`r_v(y) \propto p_v(y)\,[y \notin \mathrm{children}(v)]`.

Lossless because :math:`w(v)\,r_v(y) = P(v)\,p_v(y)` for every uncovered ``y``: exactly the
target probability of the emitted string. The exit law is computed level-parallel (one gather
and a cumulative product per depth), which is the point of the method.
"""

from __future__ import annotations

import numpy as np

from .._sampling import sample_categorical
from ..exits import exit_law
from ..rows import TargetOracle
from ..tree import DraftTree
from .outcome import Outcome

__all__ = ["residual_row", "tev_sample"]

#: Largest exit mass that may be pure rounding (rows are accepted within 1e-9 of summing to 1).
_ROUNDING_EXIT = 1e-8


def residual_row(tree: DraftTree, oracle: TargetOracle, v: int) -> np.ndarray:
    """Target row at ``v`` with the tokens of ``v``'s children removed (unnormalised)."""
    row = np.array(oracle.row(v), dtype=np.float64)
    row[tree.token[tree.children(v)]] = 0.0
    return row


def tev_sample(tree: DraftTree, oracle: TargetOracle, rng: np.random.Generator) -> Outcome:
    """Sample one round of TEV verification."""
    w = exit_law(tree, oracle)
    while True:
        v = sample_categorical(w, rng)
        resid = residual_row(tree, oracle, v)
        if resid.sum() > 0.0:
            break
        # An exit at v with no residual mass: w(v) is rounding of 1 - (sum of child mass), e.g.
        # for rows that sum to 1 - 1e-10. Such an exit has (numerically) zero probability.
        if w[v] > _ROUNDING_EXIT:
            raise ValueError(f"node {v} has exit mass {w[v]!r} but its target row has no mass "
                             f"outside its children's tokens")
        w = w.copy()
        w[v] = 0.0
    return Outcome.from_path(tree, tree.path_nodes(v), sample_categorical(resid, rng))
