"""Trees from conditional proposals (``treespec_sim.policies.conditional``): with a proposal
that ignores the parent (a block-diffusion drafter's marginals) the best-first rule is DDTree's
tree and the width-1 beam its argmax chain; on a drafter's true conditionals the tree is
prefix-closed, its scores never rise from parent to child, and SGLang's beam keeps at most the
budget."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from treespec_sim import synth
from treespec_sim.policies import chain, conditional_tree, ddtree, marginal_proposal


def _paths(tree) -> set:
    return set(tree.paths())


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("budget", [1, 5, 12])
def test_best_first_on_marginals_is_ddtree_and_a_width_one_beam_is_the_chain(seed, budget):
    w = synth.make_world("small", seed=seed)
    ctx = w.sample_context(np.random.default_rng(seed))
    lq = np.asarray(w.draft(ctx))
    prop = marginal_proposal(lq)
    mine = conditional_tree(prop, lq.shape[0], budget, root_token=ctx.last_token)
    assert _paths(mine) == _paths(ddtree(lq, budget, root_token=ctx.last_token))
    beam = conditional_tree(prop, lq.shape[0], lq.shape[0], root_token=ctx.last_token,
                            top_k=1)
    assert beam.paths() == chain(lq, root_token=ctx.last_token).paths()


@pytest.mark.parametrize("top_k", [None, 2, 3])
def test_trees_on_conditionals_are_trees_of_non_increasing_scores(top_k):
    spec = dataclasses.replace(synth.REGIMES["small"], correction_quality=1.0)
    w = synth.make_world(spec, seed=1)
    ctx = w.sample_context(np.random.default_rng(1))

    def prop(d, parent):
        return w.draft_conditional(ctx, d, parent)

    tree = conditional_tree(prop, 4, 9, root_token=ctx.last_token, top_k=top_k)
    assert 1 <= tree.size <= 9
    score = np.zeros(tree.size + 1)
    for v in range(1, tree.size + 1):
        p = int(tree.parent[v])
        parent_tok = ctx.last_token if p == 0 else int(tree.token[p])
        score[v] = score[p] + np.log(prop(int(tree.depth[v]), parent_tok)[tree.token[v]])
        assert score[v] <= score[p] + 1e-12
    if top_k is None:  # best first: the pop order never rises
        assert np.all(np.diff(score[1:]) <= 1e-12)
