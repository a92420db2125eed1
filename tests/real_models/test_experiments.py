"""real_models.experiments and real_models.exittrain on tiny inputs (fast)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from real_models import run_from
from real_models.backend import prefill
from real_models.exittrain import exit_targets
from real_models.experiments import caddtree_experiment, caddtree_table, record_traces, replay
from real_models.profile import CPU_TINY
from real_models.target import LogitsOracle
from real_models.validate import load_prompts
from treespec_sim.exits import exit_law

# The committed CPU profile was measured with one thread (as the CLIs run by default); run with
# one too, whichever other test modules this process imported first.
pytest.importorskip("torch").set_num_threads(1)


@pytest.fixture(scope="module")
def prompts(bundle):
    return load_prompts(bundle, 2, 64)


def test_replay_of_traces_reproduces_greedy_rounds(bundle, prompts):
    tr = record_traces(bundle, prompts[:1], budget=16, temperature=0.0, new_tokens=24)
    R = len(tr["size"])
    assert tr["log_q"].shape == (R, bundle.depth, bundle.vocab_size)
    assert tr["parent"].shape == (R, 17) and np.all(tr["edge"][:, 0] == 1.0)
    rep = replay(tr, [1, 4, 16], bundle.depth)
    # at T = 0 the exact expected tau of the traced tree is the realised tau of that round
    np.testing.assert_allclose(rep["tau"][:, -1], tr["tau"])
    assert np.all(np.diff(rep["tau"], axis=1) >= 0)
    np.testing.assert_allclose(rep["exits"].sum(axis=1), 1.0)


def test_exit_targets_carry_the_exit_mass(bundle, prompts):
    seen = []

    def on_round(rnd, state):
        tree = rnd.tree
        for T in (0.0, 1.0):
            rows = LogitsOracle(state.forward.logits, T)
            w = exit_law(tree, rows)
            got = exit_targets(tree, rows, bundle.depth)
            inner = w[tree.depth < bundle.depth].sum()
            assert abs(sum(x[2] for x in got) - inner) < 1e-2  # entries < 1e-6 dropped
            if T == 0.0:  # one-hot rows: W is the target's token after the deepest hit
                assert len(got) <= 1
        seen.append(tree.size)

    pf = prefill(bundle, prompts[0], with_drafter=True)
    run_from(bundle, pf, 12, method="ddtree", rule="follow", budget=16, temperature=1.0,
             rng=np.random.default_rng(0), on_round=on_round)
    assert seen


def test_caddtree_experiment_table(bundle, prompts):
    run = caddtree_experiment(bundle, prompts, cost_path=CPU_TINY, grid=(2, 8),
                              new_tokens=12)
    assert run["notes"] == [] or all("measured on" in n for n in run["notes"])
    table, rows = caddtree_table(run, n_boot=200)
    names = [r["method"] for r in rows]
    assert names == ["ar", "ddtree@2", "ddtree@8", "caddtree", "exhaustive"]
    assert sum(r["oracle"] for r in rows) == 1 and "oracle" in table
    assert all(r["tok_s_ci"][0] <= r["tok_s"] <= r["tok_s_ci"][1] for r in rows)


def test_exittrain_collect_and_train_steps(bundle, monkeypatch):
    import real_models.exittrain as et

    prompts = load_prompts(bundle, 2, 64)
    monkeypatch.setattr(et, "training_prompts", lambda b, n, length, seed: prompts[:n])
    data = et.collect(bundle, n_seqs=2, prompt_len=64, gen_len=24, budget=16,
                      temperature=0.0, seed=0)
    assert data["seqs"].shape == (2, 88) and len(data["anchors"]) > 2
    assert np.all(data["w_mass"] == 1.0)            # T = 0: one first-miss token per round
    before = {k: v.clone() for k, v in bundle.drafter.state_dict().items()}
    for loss in ("exit", "plain", "combined"):
        model, info = et.train(bundle, data, loss=loss, steps=2, lr=1e-3, batch=2,
                               anchors_per_seq=2, seed=0, exit_weight=0.5)
        assert np.isfinite(info["final_loss"]) and info["final_loss"] > 0
        changed = any(not np.allclose(before[k].numpy(), v.detach().numpy())
                      for k, v in model.state_dict().items() if k in before)
        assert changed
    st = et.marginal_stats({"base": bundle}, data)["base"]
    assert all(np.isfinite(v) for v in st.values())
    assert 0 <= st["entropy"] <= np.log(bundle.vocab_size) and 0 <= st["top1"] <= 1
    # the shipped drafter itself is untouched
    assert all(np.array_equal(before[k].numpy(), v.numpy())
               for k, v in bundle.drafter.state_dict().items() if k in before)
    with pytest.raises(ValueError, match="loss"):
        et.train(bundle, data, loss="other", steps=1, lr=1e-3, batch=2, anchors_per_seq=2,
                 seed=0)


def test_combined_loss_is_plain_plus_weighted_exit_term():
    import torch

    from real_models.exittrain import drafter_loss, exit_term, plain_term

    g = torch.Generator().manual_seed(0)
    b, A, L, V = 2, 3, 7, 11
    logits = torch.randn(b, A, L, V, generator=g)
    labels = torch.randint(0, V, (b, A, L), generator=g)
    W = torch.rand(b, A, L, V, generator=g) * (torch.rand(b, A, L, V, generator=g) < 0.1)

    def grad(fn):
        x = logits.clone().requires_grad_(True)
        val = fn(torch.log_softmax(x, -1))
        (gx,) = torch.autograd.grad(val, x)
        return float(val.detach()), gx

    vp, gp = grad(lambda lp: plain_term(lp, labels))
    ve, ge = grad(lambda lp: exit_term(lp, W))
    for lam in (0.0, 0.3, 3.0):
        vc, gc = grad(lambda lp, lam=lam: drafter_loss(lp, labels, W, loss="combined",
                                                       exit_weight=lam))
        assert vc == pytest.approx(vp + lam * ve, rel=1e-6)
        torch.testing.assert_close(gc, gp + lam * ge)
    # lambda = 0 is the plain loss, which is real_models.train's weighted cross-entropy
    lp = torch.log_softmax(logits, -1)
    w = torch.tensor([0.85 ** k for k in range(L)])
    ce = -torch.gather(lp, -1, labels[..., None])[..., 0]
    ref = (ce * w).sum(-1).mean() / w.sum()
    assert float(drafter_loss(lp, labels, W, loss="combined", exit_weight=0.0)) == \
        pytest.approx(float(ref), rel=1e-6)
    assert float(drafter_loss(lp, labels, W, loss="plain")) == pytest.approx(float(ref), rel=1e-6)
    # both terms are per-token means: a uniform drafter scores log V on each
    flat = torch.zeros(b, A, L, V) - np.log(V)
    assert float(plain_term(flat, labels)) == pytest.approx(np.log(V), rel=1e-6)
    assert float(exit_term(flat, W)) == pytest.approx(np.log(V), rel=1e-6)
    with pytest.raises(ValueError, match="loss"):
        drafter_loss(lp, labels, W, loss="other")


def test_expected_tau_is_the_realised_tau_at_t0(bundle, prompts):
    from real_models.exittrain import expected_tau

    got = []

    def on_round(rnd, state):
        got.append((expected_tau(rnd.tree, LogitsOracle(state.forward.logits, 0.0)), rnd))

    pf = prefill(bundle, prompts[0], with_drafter=True)
    res = run_from(bundle, pf, 16, method="ddtree", rule="follow", budget=16, temperature=0.0,
                   rng=np.random.default_rng(0), on_round=on_round)
    assert len(got) == len(res.rounds)
    np.testing.assert_allclose([e for e, _ in got], [r.tau for r in res.rounds])
