"""What a new user hits first (issue 17): inputs as real models give them, no silent wrong answers.

Each test here failed on the code before the issue was taken (the bullet it covers is named).
"""

import numpy as np
import pytest
from scipy.special import log_softmax

from treespec_sim import DraftTree
from treespec_sim.exits import coverage, exit_law
from treespec_sim.marginals import DenseLogMarginals
from treespec_sim.policies import chain, ddtree
from treespec_sim.synth import make_world
from treespec_sim.verify import expected_length, verify

torch = pytest.importorskip("torch")


def _logits(L=5, V=64, seed=0):
    return np.random.default_rng(seed).normal(size=(L, V)) * 3


# ------------------------------------------------------------ wrong answers without a word
def test_max_shifted_logits_are_refused_not_ranked():
    """Bullet: `ddtree` accepted max-shifted logits (all <= 0) and built a different tree."""
    z = _logits()
    shifted = z - z.max(axis=1, keepdims=True)
    with pytest.raises(ValueError, match=r"log_q\[0\] sums to .* not 1 .*log_softmax"):
        ddtree(shifted, 16)
    with pytest.raises(ValueError, match="sums to"):
        DenseLogMarginals(shifted)
    with pytest.raises(ValueError, match="sums to"):
        chain(shifted)
    # the normalised version is accepted, and it is what the message says to pass
    assert ddtree(log_softmax(z, axis=1), 16).size == 16


def test_lazy_rows_of_another_tree_are_refused():
    """Bullet: rows built for one tree were accepted for another of the same size."""
    world = make_world("mid-entropy", seed=0, vocab_size=256)
    ctx = world.sample_context(np.random.default_rng(0))
    log_q = world.draft(ctx)
    tree = ddtree(log_q, 8, root_token=ctx.last_token)
    other = DraftTree.from_parents(np.arange(-1, 8), [ctx.last_token] + [5] * 8)  # a chain
    assert other.n_nodes == tree.n_nodes
    rows = world.target_oracle(ctx, tree, 1.0)
    assert coverage(tree, rows) > 0  # its own tree: fine
    for fn in (coverage, exit_law, lambda t, r: expected_length(t, r, rule="follow")):
        with pytest.raises(ValueError, match="built for another tree"):
            fn(other, rows)


def test_root_token_outside_the_vocabulary_is_refused():
    """Bullet: `root_token` outside the vocabulary was accepted."""
    lp = log_softmax(_logits(V=16), axis=1)
    for build in (lambda: ddtree(lp, 4, root_token=16), lambda: chain(lp, root_token=99),
                  lambda: ddtree(DenseLogMarginals(lp), 4, root_token=16)):
        with pytest.raises(ValueError, match=r"root_token = \d+ is outside the vocabulary"):
            build()
    assert ddtree(lp, 4, root_token=15).root_token == 15


# ---------------------------------------------------- breaks where a user would not expect it
def test_float32_softmax_rows_at_full_vocabulary_are_accepted():
    """Bullet: float32 rows from torch.softmax at V = 32768 were rejected (sum 1 + 8e-7)."""
    V = 32768
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, V, generator=gen) * 4
    rows32 = torch.softmax(logits, dim=-1)  # float32
    tree = DraftTree.from_parents([-1, 0, 1], [0, int(rows32[0].argmax()),
                                                int(rows32[1].argmax())])
    exact = torch.softmax(logits.double(), dim=-1).numpy()
    for rows in (rows32, rows32.numpy(), rows32.double(), rows32.to(torch.bfloat16),
                 rows32.to(torch.float16)):
        got = expected_length(tree, rows, rule="follow")
        tol = 1e-5 if rows.dtype in (torch.float32, np.float32, torch.float64) else 3e-2
        assert got == pytest.approx(expected_length(tree, exact, rule="follow"), abs=tol)
        verify(tree, rows, rule="follow", rng=np.random.default_rng(0))
    # rows that sum to 2 still fail, at every dtype
    for bad in (2 * rows32, (2 * rows32).to(torch.bfloat16), 2 * exact):
        with pytest.raises(ValueError, match=r"sums to .* not 1"):
            expected_length(tree, bad, rule="follow")


def test_bfloat16_and_float16_log_probabilities_are_accepted():
    """Bullet: bfloat16 log-probabilities gave `TypeError: Got unsupported ScalarType`."""
    z = torch.tensor(_logits(V=512), dtype=torch.float32)
    for dtype in (torch.bfloat16, torch.float16):
        lp = torch.log_softmax(z, dim=-1).to(dtype)
        tree = ddtree(lp, 24)
        # the same tree as the float64 array of the same (rounded) values
        want = ddtree(lp.double().numpy(), 24, check_sums=False)
        assert tree == want and tree.size == 24
        assert chain(lp).size == 5
    assert ddtree(torch.log_softmax(z, dim=-1), 24) == ddtree(
        torch.log_softmax(z, dim=-1).numpy(), 24)
    assert ddtree(log_softmax(_logits(V=512), axis=1).tolist(), 24).size == 24  # a list


# ------------------------------------------------------------------------ small things
def test_cost_models_print_in_one_short_line():
    """Bullet: print(get_cost_model('a800-qwen3-8b')) printed 62,738 characters."""
    from treespec_sim.cost import PRESETS, get_cost_model

    for name in PRESETS:
        text = repr(get_cost_model(name))
        assert len(text) < 300 and "\n" not in text and name in text


def test_latency_file_without_its_kind_names_what_is_missing(tmp_path):
    """Bullet: a latency JSON without the model key gave `unknown latency model kind None`."""
    from treespec_sim.cost import get_cost_model

    path = tmp_path / "mine.json"
    path.write_text('{"draft_s": 0.001, "floor_s": 0.005}')
    with pytest.raises(ValueError,
                       match=r"mine.json: latency model: no 'cost_model' key .*Latency files"):
        get_cost_model(path)


def test_clamped_or_ignored_context_length_warns():
    from treespec_sim.cost import PiecewiseLinearCost, get_cost_model

    table = get_cost_model("a800-qwen3-8b")
    with pytest.warns(UserWarning, match="outside the measured range"):
        table.verify_cost(8, 20000)
    piecewise = PiecewiseLinearCost((1, 64), (0.01, 0.02), 0.001)
    with pytest.warns(UserWarning, match="no context axis"):
        piecewise.verify_cost(8, 4000)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table.verify_cost(8, 4000)  # inside the range: no warning
        piecewise.verify_cost(8)  # no context given: nothing ignored
