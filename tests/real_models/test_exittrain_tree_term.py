"""The public ExitTrain recipe's tree term (real_models._tree_term) and its fine-tune loss."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch

import real_models
from real_models import exittrain as et
from real_models._tree_term import (
    build_trees,
    edge_probs_from_rows,
    node_weights,
    score_trees,
    tree_term,
)
from real_models.validate import load_prompts
from treespec_sim import DraftTree

torch.set_num_threads(1)

# root 0; 1, 2 under the root; 3, 4 under 1; 5 under 3 (depths 1, 1, 2, 2, 3)
PARENT = [-1, 0, 0, 1, 1, 3]
TOKEN = [9, 2, 4, 1, 3, 5]
# p~ of nodes 1..5; node 4's 1e-6 is below the 1e-4 floor
P_EDGE = np.array([1.0, 0.5, 0.2, 0.4, 1e-6, 0.25])


@pytest.fixture(scope="module")
def tree():
    return DraftTree.from_parents(PARENT, TOKEN)


@pytest.fixture(scope="module")
def bundle():
    return real_models.load()


def test_weights_of_a_hand_built_tree(tree):
    # P(v) = product of max(p~, 1e-4) along the path, by hand
    reach = [0.5, 0.2, 0.5 * 0.4, 0.5 * 1e-4, 0.5 * 0.4 * 0.25]
    np.testing.assert_allclose(node_weights(tree, P_EDGE, "P"), reach, rtol=1e-12)
    # rho(v) = clip(1 - sum of the raw p~ of v's children): 1 - 0.4 - 1e-6, 1, 1 - 0.25, 1, 1
    rho = [1 - 0.4 - 1e-6, 1.0, 0.75, 1.0, 1.0]
    np.testing.assert_allclose(node_weights(tree, P_EDGE, "P-rho"),
                               np.multiply(reach, rho), rtol=1e-12)
    np.testing.assert_allclose(node_weights(tree, P_EDGE, "P-rho-depth"),
                               np.multiply(reach, rho) * [1, 1, 2, 2, 3], rtol=1e-12)
    # the floor is a parameter: without it node 4's reach is 0.5e-6
    assert node_weights(tree, P_EDGE, "P", floor=0.0)[3] == pytest.approx(0.5e-6)
    # children whose p~ sum past 1 (rounding) clip rho at 0
    over = P_EDGE.copy()
    over[3], over[4] = 0.7, 0.6
    assert node_weights(tree, over, "P-rho")[0] == 0.0
    with pytest.raises(ValueError, match="weighting"):
        node_weights(tree, P_EDGE, "exit")


def test_edge_probs_read_the_parent_row(tree):
    rows = np.arange(6 * 10, dtype=np.float64).reshape(6, 10) / 100.0
    got = edge_probs_from_rows(tree, rows)
    # node v's p~ is rows[parent[v], token[v]]
    assert got[0] == 1.0
    assert got[1:].tolist() == [rows[0, 2], rows[0, 4], rows[1, 1], rows[1, 3], rows[3, 5]]


def test_tree_term_is_the_weighted_mean_over_all_nodes(tree):
    g = torch.Generator().manual_seed(0)
    log_q = torch.log_softmax(torch.randn(2, 3, 10, generator=g), -1)
    small = DraftTree.from_parents([-1, 0, 1], [7, 6, 8])
    w_big = np.array([0.5, 0.2, 0.2, 5e-5, 0.05])
    w_small = np.array([0.3, 0.1])
    got = float(tree_term(log_q, [tree, small], [w_big, w_small]))
    # direct: sum over the 7 nodes of w(v) * -log q_{depth(v)}(x_v), divided by 7 (not by 2
    # trees, not by the total weight)
    lq = log_q.numpy()
    direct = 0.0
    for i, (t, w) in enumerate([(tree, w_big), (small, w_small)]):
        for v in range(1, t.n_nodes):
            direct += w[v - 1] * -lq[i, t.depth[v] - 1, t.token[v]]
    assert got == pytest.approx(direct / 7, rel=1e-6)
    assert float(tree_term(log_q, [DraftTree.root_only(1)] * 2, [np.zeros(0)] * 2)) == 0.0


def test_gradient_flows_only_through_q(bundle, tree):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(1, 3, 10, generator=g, requires_grad=True)
    log_q = torch.log_softmax(logits, -1)
    w = node_weights(tree, P_EDGE, "P-rho")
    val = tree_term(log_q, [tree], [w])
    (gq,) = torch.autograd.grad(val, log_q, retain_graph=True)
    # d term / d log q[d, x] = -(weights of the nodes at depth d + 1 with token x) / N, else 0
    want = np.zeros((1, 3, 10))
    for v in range(1, tree.n_nodes):
        want[0, tree.depth[v] - 1, tree.token[v]] -= w[v - 1] / tree.size
    np.testing.assert_allclose(gq.numpy(), want, rtol=1e-6, atol=1e-12)
    # the weights are constants: the term is linear in them, with no graph behind them
    assert not isinstance(w, torch.Tensor)
    # the target is frozen and its scoring pass builds no graph
    model = bundle.target.model
    rng = np.random.default_rng(0)
    rows = score_trees(model, rng.integers(0, bundle.vocab_size, size=(1, 8)),
                       np.array([40]), [DraftTree.from_parents([-1, 0], [3, 4])])
    assert isinstance(rows[0], np.ndarray)
    val.backward()
    assert logits.grad is not None and float(logits.grad.abs().sum()) > 0
    assert all(p.grad is None for p in model.parameters())


def test_tree_attention_scores_equal_sequential_scoring(bundle):
    model = bundle.target.model
    prompt = load_prompts(bundle, 1, 64)[0]
    W, L, V = 12, bundle.depth, bundle.vocab_size
    g = torch.Generator().manual_seed(2)
    log_q = torch.log_softmax(torch.randn(2, L, V, generator=g) * 2.5, -1)
    anchors = np.array([30, 50])
    trees = build_trees(log_q, 10, prompt[anchors])
    trees[1] = build_trees(log_q[1:], 6, prompt[anchors[1:]])[0]   # a padded (shorter) tree
    assert trees[0].size == 10 and trees[1].size == 6
    assert any(len(c) >= 2 for c in trees[0].child_lists)           # siblings to hide
    windows = np.stack([prompt[a - W:a] for a in anchors])
    rows = score_trees(model, windows, anchors, trees)
    for t, a, r in zip(trees, anchors, rows, strict=True):
        assert r.shape == (t.n_nodes, V)
        for u in range(t.n_nodes):
            seq = [*prompt[a - W:a + 1], *(int(t.token[v]) for v in t.path_nodes(u))]
            pos = torch.arange(a - W, a - W + len(seq))[None]
            with torch.no_grad():
                lg = model(input_ids=torch.tensor([seq]), position_ids=pos,
                           use_cache=False).logits[0, -1]
            np.testing.assert_allclose(r[u], torch.softmax(lg.double(), -1).numpy(),
                                       atol=1e-5)


def test_zero_tree_weight_is_the_plain_cross_entropy(tree):
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 3, 7, 10, generator=g)
    labels = torch.randint(0, 10, (2, 3, 7), generator=g)
    lp = torch.log_softmax(logits, -1)
    ce = et.plain_term(lp, labels)
    # plain_term is real_models.train's 0.85^(k-1)-weighted cross-entropy
    w = torch.tensor([0.85 ** k for k in range(7)])
    nll = -torch.gather(lp, -1, labels[..., None])[..., 0]
    assert float(ce) == pytest.approx(float((nll * w).sum(-1).mean() / w.sum()), rel=1e-6)
    tt = tree_term(lp.reshape(6, 7, 10)[:1, :3], [tree], [np.ones(5)])
    assert et.public_loss(ce, tt, 0.0) is ce
    assert et.public_loss(ce, None, 0.0) is ce
    assert float(et.public_loss(ce, tt, 0.5)) == pytest.approx(float(ce) + 0.5 * float(tt))


def test_finetune_steps_and_paired_batches(bundle):
    prompts = load_prompts(bundle, 3, 24)
    seqs = et.regenerate(bundle, prompts, 12)
    # greedy: each generated token is the target's argmax after the sequence so far
    with torch.no_grad():
        lg = bundle.target.model(input_ids=torch.from_numpy(seqs[:1])).logits[0]
    np.testing.assert_array_equal(lg[23:-1].argmax(-1).numpy(), seqs[0, 24:])
    data = {"seqs": seqs, "prompt_len": 24}
    kw = dict(steps=2, lr=1e-3, batch=2, anchors_per_seq=2, seed=0, budget=4, window=8)
    before = {k: v.clone() for k, v in bundle.drafter.state_dict().items()}
    m0, i0 = et.finetune(bundle, data, tree_weight=0.0, **kw)
    m0b, _ = et.finetune(bundle, data, tree_weight=0.0, **kw)
    m1, i1 = et.finetune(bundle, data, tree_weight=10.0, weighting="P-rho", **kw)
    m2, i2 = et.finetune(bundle, data, tree_weight=10.0, weighting="P-rho", tree_every=2, **kw)
    s0, s0b, s1 = m0.state_dict(), m0b.state_dict(), m1.state_dict()
    # the tree term at every second anchor only: a different (subsampled) term
    assert i2["tree_every"] == 2 and any(not torch.equal(m2.state_dict()[k], s1[k]) for k in s1)
    assert all(torch.equal(s0[k], s0b[k]) for k in s0)              # deterministic
    assert any(not torch.equal(s0[k], s1[k]) for k in s0)           # the tree term acts
    assert any(not torch.equal(s0[k], before[k]) for k in before)   # training moved weights
    assert all(torch.equal(v, before[k]) for k, v in bundle.drafter.state_dict().items())
    assert i0["weighting"] is None and i1["weighting"] == "P-rho"
    assert 0 < i1["tree_share_of_loss"] < 1 and i1["final_sum_P"] > 0
    assert et.anchor_range(36, 24, 7, 8) == (23, 28)
    with pytest.raises(ValueError, match="no anchor fits"):
        et.anchor_range(30, 24, 7, 8)


def test_cosine_schedule():
    assert et.cosine_lr(0, 200, 1.0, 0.005) == 1.0        # one warm-up step: ceil(1.0)
    assert et.cosine_lr(0, 1000, 1.0, 0.005) == pytest.approx(1 / 5)
    assert et.cosine_lr(4, 1000, 1.0, 0.005) == pytest.approx(1.0)
    assert et.cosine_lr(5 + 995 // 2, 1000, 2.0, 0.005) == pytest.approx(1.0, abs=5e-3)
    assert et.cosine_lr(999, 1000, 1.0, 0.005) < 1e-4


def test_summarize_pairs_by_seed_and_by_prompt():
    evals = {"0": {"16": {"plain": {"0": [1.0, 2.0, 3.0], "1": [2.0, 2.0, 2.0]},
                          "P": {"0": [1.5, 2.0, 3.5], "1": [2.0, 3.0, 2.0]},
                          "base": {"-": [0.0, 1.0, 1.0]}}}}
    out = et.summarize(evals)["0"]["16"]
    # P - plain per seed: seed 0 (0.5, 0, 0.5) mean 1/3; seed 1 (0, 1, 0) mean 1/3
    assert out["P"]["vs_plain"]["per_seed"] == pytest.approx([1 / 3, 1 / 3])
    assert out["P"]["vs_plain"]["mean"] == pytest.approx(1 / 3)
    # both seeds' means equal: the interval over seeds has zero width
    assert out["P"]["vs_plain"]["ci_seeds"] == pytest.approx([1 / 3, 1 / 3])
    lo, hi = out["P"]["vs_plain"]["ci_prompts"]
    assert lo < 1 / 3 < hi
    # the base has no seeds: every seed of an arm is paired with its one decode per prompt
    assert out["plain"]["vs_base"]["per_seed"] == pytest.approx([4 / 3, 4 / 3])
    assert "vs_plain" not in out["plain"] and "vs_base" not in out["base"]
    # the base against the seeded reference: one difference per reference seed
    assert out["base"]["vs_plain"]["per_seed"] == pytest.approx([-4 / 3, -4 / 3])
    assert out["P"]["tau"] == pytest.approx(np.mean([1.75, 2.5, 2.75]))
    assert "| 0 | 16 | P | 2 |" in et.summary_table(et.summarize(evals))
    evals["0"]["16"]["other"] = {"7": [1.0, 1.0, 1.0], "8": [1.0, 1.0, 1.0]}
    with pytest.raises(ValueError, match="share no seed"):
        et.summarize(evals)


def test_tev_cost_times_both_rules_on_the_same_trees(bundle):
    from real_models._tev_cost import tev_cost

    prompts = load_prompts(bundle, 2, 64)
    res = tev_cost(bundle, prompts, budget=8, temperature=1.0, new_tokens=6, repeats=2,
                   rng=np.random.default_rng(0))
    R = len(res["prompt"])
    assert R >= 2 and set(res["prompt"].tolist()) == {0, 1}
    assert res["decide"].shape == res["commit"].shape == (R, 2)
    assert np.all(res["decide"] > 0) and np.all(res["commit"] > 0)
    # both rules are lossless on a deterministic tree: the same exact E[tau] = 1 + sum P(v)
    np.testing.assert_allclose(res["expected_tau"][:, 0], res["expected_tau"][:, 1])
    total = res["decide"] + res["commit"]
    point, lo, hi = res["ratio"]
    assert point == pytest.approx(total[:, 1].sum() / total[:, 0].sum())
    assert lo <= point <= hi
    # DDTree fills its budget (V**L prefixes exist)
    assert np.all(res["tree_size"] == 8)


@pytest.mark.parametrize(("argv", "expected"), [
    (["finetune", "--data", "/no/such.npz", "--out-dir", "d"], "--data /no/such.npz does not"),
    (["finetune", "--data", "x.npz", "--out-dir", "d", "--weighting", "exit"],
     "argument --weighting: invalid choice"),
    (["finetune", "--data", "x.npz", "--out-dir", "d", "--tree-weight", "-1"],
     "--tree-weight must be >= 0.0"),
    (["regen", "--out", "x.npz", "--seqs", "0"],
     "argument --seqs: must be a positive integer; got 0"),
    (["summarize", "--evals", "/no/such.json"], "--evals /no/such.json: not a file"),
    (["tev-cost", "--temperature", "0"], "argument --temperature: must be finite and > 0"),
])
def test_bad_input_of_the_new_commands(argv, expected, capsys, monkeypatch, tmp_path):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded on an error path")

    monkeypatch.setattr(et, "load", refuse)
    monkeypatch.chdir(tmp_path)
    try:
        rc = et.main(argv)
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith(f"python -m real_models.exittrain {argv[0]}: error: ")
    assert expected in err[0]
    assert not list(tmp_path.iterdir())
