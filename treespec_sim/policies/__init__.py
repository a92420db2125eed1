"""Tree builders (policies): from drafter log-marginals to a :class:`~treespec_sim.DraftTree`.

Deterministic builders (``chain``, ``ddtree``, ``dynamic_tree``, ``caddtree``,
``exhaustive_budget_tree``, ``longrun_tree``, ``superset``) return a tree, and their batch forms
(``batch_caddtree``, ``batch_exhaustive``) one tree per request, beside the batch baselines
(``fixed_budget_trees``, ``independent_caddtree``, ``tetris_chains``, ``best_fixed_budget``;
private module ``_batch``); sampled ones (``fill_tree``, ``sampled_chain``, ``tsubame``,
``fill_shape``) return a :class:`Draft` (the tree with the proposal rows its tokens were drawn
from). The one table of *methods* that the round loop, the sweep and the real-model decoder
use, with each method's scheme and lossless rules, is :mod:`treespec_sim.methods`.

The builders are written in private modules (``_chain``, ``_ddtree``, ``_caddtree``,
``_tsubame``, ``_superset``: a function and its module never share a name); import them from
this package, ``from treespec_sim.policies import ddtree``. ``conditional``, ``draft``,
``dynamic`` and ``sampled`` are public modules (no function of theirs is called after them).

``prefix_tree`` (:mod:`treespec_sim.tree`) and ``path_probabilities``
(:mod:`treespec_sim.paths`) are written below the builders, which share them with the round loop
and the surrogate; they are re-exported here for the callers that import them from this package.
"""

from __future__ import annotations

from ..paths import path_probabilities
from ..tree import prefix_tree
from ._batch import (
    FixedBudgetChoice,
    batch_theta,
    best_fixed_budget,
    fixed_budget_trees,
    independent_caddtree,
    surrogate_tau_curves,
    tetris_chains,
)
from ._caddtree import (
    BatchCurve,
    CaDDTreePolicy,
    LongRunPolicy,
    batch_budget_curve,
    batch_caddtree,
    batch_exhaustive,
    budget_curve,
    caddtree,
    exhaustive_budget_tree,
    first_non_increase,
    longrun_budget,
    longrun_tree,
    merge_candidates,
    merge_pops,
)
from ._chain import chain
from ._ddtree import ddtree, ddtree_with_mask
from ._superset import superset
from ._tsubame import tsubame, tsubame_shape
from .conditional import conditional_tree
from .draft import Draft
from .dynamic import dynamic_tree
from .sampled import (
    SAMPLING_SCHEMES,
    fill_shape,
    fill_tree,
    k_ary_shape,
    marginal_proposal,
    sampled_chain,
    tempered,
)

__all__ = [
    "SAMPLING_SCHEMES",
    "BatchCurve",
    "CaDDTreePolicy",
    "Draft",
    "FixedBudgetChoice",
    "LongRunPolicy",
    "batch_budget_curve",
    "batch_caddtree",
    "batch_exhaustive",
    "batch_theta",
    "best_fixed_budget",
    "budget_curve",
    "caddtree",
    "chain",
    "conditional_tree",
    "ddtree",
    "ddtree_with_mask",
    "dynamic_tree",
    "exhaustive_budget_tree",
    "fill_shape",
    "fill_tree",
    "first_non_increase",
    "fixed_budget_trees",
    "independent_caddtree",
    "k_ary_shape",
    "longrun_budget",
    "longrun_tree",
    "marginal_proposal",
    "merge_candidates",
    "merge_pops",
    "path_probabilities",
    "prefix_tree",
    "sampled_chain",
    "superset",
    "surrogate_tau_curves",
    "tempered",
    "tetris_chains",
    "tsubame",
    "tsubame_shape",
]
