"""real_models: tree verification, the DFlash drafter, decoding, bad input (shipped tiny models)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import real_models  # noqa: E402
from real_models import bundle as bundle_mod  # noqa: E402
from real_models import check_request, decode, generate, run_from  # noqa: E402
from real_models.backend import DecodeState, Drafting, ModelBackend, prefill  # noqa: E402
from real_models.target import logits_to_rows  # noqa: E402
from real_models.validate import (  # noqa: E402
    TREE_LOGIT_TOL,
    TreeRowCheck,
    law_bins,
    law_test,
    load_prompts,
)
from treespec_sim import DraftTree, engine  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def prompts(bundle):
    return load_prompts(bundle, 4, 64)


# ---------------------------------------------------------------------------- package
def test_import_is_lazy():
    code = "import real_models, sys; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_functions_are_the_private_modules_functions():
    """``real_models.decode`` is the function of the private module ``real_models._decode``
    (no submodule shares its name, so importing one never rebinds it)."""
    from real_models import _decode

    assert real_models.decode is _decode.decode and real_models.generate is _decode.generate
    real_models.__dict__.pop("decode", None)      # uncached: through the lazy loader again
    assert real_models.decode is _decode.decode
    assert real_models.ModelBackend is ModelBackend


def test_shipped_checkpoints_are_small_and_documented():
    total = sum(f.stat().st_size for d in (bundle_mod.TINY_TARGET, bundle_mod.TINY_DRAFTER)
                for f in d.iterdir())
    assert total <= 20 * 2 ** 20
    rec = json.loads((bundle_mod.TINY_DRAFTER / "training.json").read_text())
    assert rec["seed"] == 0 and len(rec["corpus"]["sha256"]) == 64
    assert rec["corpus"]["held_out_files"] > 0
    tok = json.loads((bundle_mod.TINY_TARGET / "tokenizer.json").read_text())
    assert len(tok["model"]["vocab"]) >= 512


def test_prompts_come_from_held_out_files():
    from real_models.train import is_held_out

    items = json.loads((bundle_mod.TINY_TARGET.parent / "heldout_prompts.json").read_text())
    assert items["prompts"] and all(is_held_out(p["file"]) for p in items["prompts"])


def test_drafter_checkpoint_has_the_dflash_layout():
    from safetensors import safe_open

    cfg = json.loads((bundle_mod.TINY_DRAFTER / "config.json").read_text())
    assert {"block_size", "num_target_layers", "dflash_config"} <= set(cfg)
    assert {"target_layer_ids", "mask_token_id"} <= set(cfg["dflash_config"])
    with safe_open(str(bundle_mod.TINY_DRAFTER / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    per_layer = ["input_layernorm", "post_attention_layernorm", "self_attn.q_proj",
                 "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm",
                 "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
    expected = {"fc.weight", "hidden_norm.weight", "norm.weight"} | {
        f"layers.{i}.{n}.weight" for i in range(cfg["num_hidden_layers"]) for n in per_layer}
    assert keys == expected  # no embedding or LM head of its own


# ---------------------------------------------------------------------------- rows
def test_logits_to_rows():
    lg = torch.tensor([[1.0, 3.0, 3.0, -2.0], [0.0, 0.0, 0.0, 0.0]])
    r0 = logits_to_rows(lg, 0.0)
    assert r0.dtype == np.float64
    np.testing.assert_array_equal(r0, [[0, 1, 0, 0], [1, 0, 0, 0]])  # first maximal index
    r1 = logits_to_rows(lg, 0.5)
    np.testing.assert_allclose(r1.sum(axis=1), 1.0, atol=1e-12)
    p = np.exp(2 * np.array([1.0, 3.0, 3.0, -2.0]))
    np.testing.assert_allclose(r1[0], p / p.sum(), rtol=1e-12)


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_lazy_logits_oracle_equals_dense_rows(temperature):
    from real_models.target import LogitsOracle
    from treespec_sim.rows import ArrayOracle
    from treespec_sim.verify import verify

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 50, generator=g) * 3
    logits[2, 7] = logits[2].max() + 1.0
    tree = DraftTree.from_parents([-1, 0, 0, 1, 2, 2, 4], [3, 7, 9, 1, 7, 8, 2])
    lazy = LogitsOracle(logits, temperature)
    dense = logits_to_rows(logits, temperature)
    for v in range(tree.n_nodes):
        np.testing.assert_allclose(lazy.row(v), dense[v], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(lazy.edge_probs(tree), ArrayOracle(dense, tree).edge_probs(tree),
                               rtol=1e-12, atol=1e-15)
    for rule in ("follow", "tev"):
        a = verify(tree, lazy, rule=rule, rng=np.random.default_rng(5))
        b = verify(tree, dense, rule=rule, rng=np.random.default_rng(5))
        assert a == b


# ---------------------------------------------------------------------------- target
def _row_check(chk: TreeRowCheck):
    """The engine's ``on_round(round, state)`` feeding a :class:`TreeRowCheck`."""
    return lambda rnd, state: chk(rnd.tree, state.forward, state.tokens)


def test_tree_rows_equal_sequential_rows_over_rounds(bundle, prompts):
    chk = TreeRowCheck(bundle)
    pf = prefill(bundle, prompts[1], with_drafter=True)
    run_from(bundle, pf, 24, method="ddtree", rule="follow", budget=64, temperature=0.0,
             rng=np.random.default_rng(0), on_round=_row_check(chk))
    assert chk.rounds >= 3 and chk.max_depth >= 3
    assert chk.worst <= TREE_LOGIT_TOL[str(bundle.dtype)]


def test_tree_row_check_catches_a_causal_mask(bundle, prompts, monkeypatch):
    """A plain causal mask over the tree block (siblings see each other) must be caught."""
    target = bundle.target

    def causal(tree, start):
        n1 = tree.n_nodes
        mask = torch.zeros((1, 1, n1, start + n1), dtype=target.dtype)
        tri = torch.tril(torch.ones(n1, n1, dtype=torch.bool))
        mask[0, 0, :, start:].masked_fill_(~tri, torch.finfo(target.dtype).min)
        return mask

    monkeypatch.setattr(target, "tree_mask", causal)
    chk = TreeRowCheck(bundle)
    pf = prefill(bundle, prompts[1], with_drafter=True)
    run_from(bundle, pf, 8, method="ddtree", rule="follow", budget=64, temperature=0.0,
             rng=np.random.default_rng(0), on_round=_row_check(chk))
    assert chk.worst > 100 * TREE_LOGIT_TOL[str(bundle.dtype)]


def test_commit_compacts_to_a_non_contiguous_path(bundle, prompts):
    target = bundle.target
    p = prompts[2]
    target.prefill(p[:-1], want_features=False)
    start = target.length
    #   root -> 1 (a), 2 (b); 2 -> 3 (c), 4 (d); 4 -> 5 (e)
    tree = DraftTree.from_parents([-1, 0, 0, 2, 2, 4], [int(p[-1]), 11, 12, 13, 14, 15])
    target.verify_forward(tree, want_features=False)
    target.commit(start, [0, 2, 4, 5])
    assert target.length == start + 4
    nxt = DraftTree.root_only(7)
    got = target.verify_forward(nxt, want_features=False).logits[0]
    ref = target.sequential_logits([*p.tolist(), 12, 14, 15, 7])[-1]
    assert float((got - ref).abs().max()) <= TREE_LOGIT_TOL[str(bundle.dtype)]


# ---------------------------------------------------------------------------- drafter
def test_drafter_cache_equals_one_pass_training_forward(bundle, prompts):
    """Incremental context K/V (inference) == the training forward over the whole context."""
    drafter, target = bundle.drafter, bundle.target
    p = prompts[0]
    feats = target.prefill(p, want_features=True)            # (1, P, k d)
    from real_models.drafter import DraftCache

    cache = DraftCache(len(drafter.layers))
    cut = 40
    with torch.inference_mode():
        drafter.extend_cache(cache, feats[:, :cut], torch.arange(cut)[None])
        drafter.extend_cache(cache, feats[:, cut:-1], torch.arange(cut, p.size - 1)[None])
        log_q, logits = Drafting(bundle).log_q(cache, int(p[-1]), p.size - 1)
        K = bundle.block_size
        block = torch.full((1, K), bundle.spec.mask_token_id)
        block[0, 0] = int(p[-1])
        emb = target.model.get_input_embeddings()(block)
        pos = torch.arange(p.size - 1, p.size - 1 + K)[None]
        ctx_pos = torch.arange(p.size - 1)[None]
        mask = torch.ones((1, 1, K, p.size - 1 + K), dtype=torch.bool)
        h = drafter.forward_train(emb, pos, feats[:, :-1], ctx_pos, mask)
        ref = drafter.logits(h[:, 1:], target.model.get_output_embeddings())[0]
    assert log_q.shape == (bundle.depth, bundle.vocab_size)
    assert float((ref - logits).abs().max()) < 1e-4


def test_drafter_save_load_roundtrip(bundle, tmp_path):
    from real_models.drafter import DFlashDrafter

    cfg = json.loads((bundle_mod.TINY_DRAFTER / "config.json").read_text())
    bundle.drafter.save_pretrained(tmp_path, cfg)
    again = DFlashDrafter.from_pretrained(tmp_path)
    for (k, a), (k2, b) in zip(bundle.drafter.state_dict().items(),
                               again.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(a, b)


# ---------------------------------------------------------------------------- decoding
@pytest.mark.parametrize(("method", "budget", "rule"), [
    ("chain", None, "follow"), ("ddtree", 64, "follow"), ("ddtree", 16, "tev"),
    ("caddtree", 32, "follow"), ("exhaustive", 32, "tev"),
    ("sampled-ddtree", 16, "follow")])  # at T = 0 its top-k fill (a sampled rule is refused)
def test_greedy_speculative_equals_autoregressive(bundle, prompts, method, budget, rule):
    for p in prompts[:2]:
        ar = generate(bundle, p, 40, method="ar")
        assert generate(bundle, p, 40, method=method, budget=budget, rule=rule) == ar


def test_smaller_block_than_trained(prompts):
    small = bundle_mod.load(block_size=4)
    assert small.depth == 3
    r = decode(small, prompts[0], 24, method="ddtree", budget=16)
    assert max(x.tau for x in r.rounds) <= 4
    assert r.tokens == generate(small, prompts[0], 24, method="ar")


def test_ddtree_quality_bar(bundle, prompts):
    """The shipped drafter reaches tau >= 3 with DDTree at B = 64, T = 0 on held-out prompts."""
    taus = [decode(bundle, p, 64, method="ddtree", budget=64).tau for p in prompts]
    assert np.mean(taus) >= 3.0, taus


@pytest.mark.parametrize("rule", ["rrs", "rrsw", "traversal", "univer"])
def test_sampled_trees_decode(bundle, prompts, rule):
    r = decode(bundle, prompts[0], 24, method="sampled-ddtree", budget=16, temperature=1.0,
               rule=rule, seed=3)
    assert len(r.tokens) == 24 and all(0 <= t < bundle.vocab_size for t in r.tokens)
    again = decode(bundle, prompts[0], 24, method="sampled-ddtree", budget=16,
                   temperature=1.0, rule=rule, seed=3)
    assert again.tokens == r.tokens          # same seed, same tokens


def test_law_check_passes_for_ddtree_and_catches_a_wrong_temperature(bundle, prompts):
    T, n = 1.0, 300
    bin_of, probs = law_bins(bundle, prompts[3], T, n)
    assert probs.size >= 4
    pf = prefill(bundle, prompts[3], with_drafter=True)

    def samples(temperature, seed):
        rng = np.random.default_rng(seed)
        return [run_from(bundle, pf, 2, method="ddtree", rule="follow", budget=16,
                         temperature=temperature, rng=rng).tokens for _ in range(n)]

    _, p_ok, _ = law_test(samples(T, 1), bin_of, probs)
    _, p_bad, _ = law_test(samples(0.4, 2), bin_of, probs)   # a sampler at the wrong T
    assert p_ok >= 1e-3
    assert p_bad < 1e-3


def test_round_statistics(bundle, prompts):
    r = decode(bundle, prompts[0], 32, method="ddtree", budget=64)
    assert sum(x.tau for x in r.rounds) >= 32
    assert all(x.tree_size == 64 for x in r.rounds)
    assert all(min(x.draft, x.build, x.verify, x.decide, x.commit) >= 0 for x in r.rounds)
    assert r.prefill_s > 0 and r.decode_s > 0


# ---------------------------------------------------------------------------- the round loop
def test_decode_runs_every_round_through_the_engine(bundle, prompts, monkeypatch):
    """Each real-model round is one ``treespec_sim.engine.run_round`` call; its statistics are
    the engine's stage timings (sub-steps moved between stages, the total kept)."""
    seen, backends = [], []
    run_round = engine.run_round

    def spy(backend, *args, **kwargs):
        rnd = run_round(backend, *args, **kwargs)
        seen.append(rnd)
        backends.append(backend)
        return rnd

    monkeypatch.setattr(engine, "run_round", spy)
    r = decode(bundle, prompts[0], 24, method="ddtree", budget=16, temperature=1.0, seed=1)
    assert len(seen) == len(r.rounds) >= 2
    assert all(isinstance(be, ModelBackend) for be in backends)
    for rnd, st in zip(seen, r.rounds, strict=True):
        assert (st.tau, st.tree_size) == (rnd.sampled_tau, rnd.tree_size)
        assert set(rnd.timings) == set(engine.STAGES)
        assert st.total == pytest.approx(sum(rnd.timings.values()), rel=1e-9, abs=1e-12)
    assert r.tokens == [t for rnd in seen for t in rnd.outcome.tokens][:24]
    seen.clear()
    assert decode(bundle, prompts[0], 8, method="ar").rounds and not seen  # no tree, no loop


def test_model_backend_is_an_engine_backend(bundle, prompts):
    be = ModelBackend(bundle)
    assert isinstance(be, engine.Backend)
    ctx = be.start(prompts[0])
    assert isinstance(ctx, DecodeState) and ctx.last_token == int(prompts[0][-1])
    assert be.context_length(ctx) == bundle.target.length == prompts[0].size - 1
    rnd = engine.run_round(be, ctx, method="ddtree", budget=16, rng=np.random.default_rng(0))
    # T = 0: one-hot rows, so the exact E[tau] of the tree is the sampled tau
    assert rnd.expected_tau == rnd.sampled_tau
    with pytest.raises(ValueError, match="uncommitted"):
        be.draft(ctx)
    ctx = engine.commit(be, ctx, rnd)
    assert be.context_length(ctx) == bundle.target.length == prompts[0].size - 1 + rnd.sampled_tau
    assert ctx.draft_cache.length == be.context_length(ctx)
    with pytest.raises(TypeError, match="from a prompt"):
        be.sample_context(np.random.default_rng(0))
    be.start(prompts[1])                               # another sequence resets the KV cache
    with pytest.raises(ValueError, match="stale"):
        engine.run_round(be, ctx, method="ddtree", budget=16, rng=np.random.default_rng(0))


def test_cost_aware_methods_read_costs_at_the_context_length(bundle, prompts):
    class Recording:
        """A latency model that records the context lengths it is read at."""

        def __init__(self):
            self.ells = []

        def draft_cost(self, ell=None):
            self.ells.append(ell)
            return 1e-3

        def verify_cost(self, n, ell=None):
            self.ells.append(ell)
            return 1e-3 + 1e-5 * np.asarray(n, dtype=np.float64)

    cost = Recording()
    r = decode(bundle, prompts[0], 16, method="caddtree", budget=16, cost=cost)
    starts = prompts[0].size - 1 + np.concatenate([[0], np.cumsum([x.tau for x in r.rounds])])
    # every read of a round is at its start (the cache length), in order
    assert list(dict.fromkeys(cost.ells)) == starts[:-1].tolist()
    assert r.tokens == generate(bundle, prompts[0], 16, method="ar")


# ---------------------------------------------------------------------------- bad input
def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit(path: Path, **changes) -> None:
    cfg = json.loads(path.read_text())
    for k, v in changes.items():
        if k == "dflash_config":
            cfg[k].update(v)
        else:
            cfg[k] = v
    path.write_text(json.dumps(cfg))


def test_missing_files(tmp_path):
    t = _copy(bundle_mod.TINY_TARGET, tmp_path / "t")
    (t / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"target directory .* missing config\.json"):
        bundle_mod.load(t, bundle_mod.TINY_DRAFTER)
    d = _copy(bundle_mod.TINY_DRAFTER, tmp_path / "d")
    (d / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"drafter directory .* has no weights"):
        bundle_mod.load(bundle_mod.TINY_TARGET, d)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        bundle_mod.load(tmp_path / "nowhere", bundle_mod.TINY_DRAFTER)


@pytest.mark.parametrize(("changes", "message"), [
    ({"vocab_size": 2048}, "vocabulary mismatch"),
    ({"hidden_size": 256}, "hidden size mismatch"),
    ({"dflash_config": {"block_size": 16}}, "block size mismatch"),
    ({"num_target_layers": 36}, "num_target_layers"),
    ({"dflash_config": {"target_layer_ids": [1, 40]}}, "reach past"),
    ({"dflash_config": {"selector_rank": 256}}, "DFlash2"),
    ({"block_size": 1}, "block_size must be an integer >= 2"),
    ({"dflash_config": {"mask_token_id": None}}, "missing dflash_config.mask_token_id"),
    ({"architectures": ["Qwen3DSparkModel"]}, "not a DFlash drafter"),
    ({"layer_types": ["sliding_attention", "full_attention"]}, "no sliding window"),
])
def test_incompatible_drafter_config(tmp_path, changes, message):
    d = _copy(bundle_mod.TINY_DRAFTER, tmp_path / "d")
    _edit(d / "config.json", **changes)
    with pytest.raises(ValueError, match=message):
        bundle_mod.load(bundle_mod.TINY_TARGET, d)


def test_dflash_keys_may_sit_at_the_top_level(tmp_path):
    """DFlash's _draft_value reads dflash_config first, then the top level; so does load."""
    d = _copy(bundle_mod.TINY_DRAFTER, tmp_path / "d")
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(cfg.pop("dflash_config"))
    (d / "config.json").write_text(json.dumps(cfg))
    b = bundle_mod.load(bundle_mod.TINY_TARGET, d)
    assert b.spec.target_layer_ids == (1, 4) and b.spec.mask_token_id == 1


def test_requested_block_size_out_of_range():
    with pytest.raises(ValueError, match="block size mismatch"):
        bundle_mod.load(block_size=99)


def test_target_must_be_qwen3(tmp_path):
    t = _copy(bundle_mod.TINY_TARGET, tmp_path / "t")
    _edit(t / "config.json", model_type="llama", architectures=["LlamaForCausalLM"])
    with pytest.raises(ValueError, match="Qwen3ForCausalLM"):
        bundle_mod.load(t, bundle_mod.TINY_DRAFTER)


def test_bad_requests_fail_before_generation(bundle, prompts, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("a forward ran")

    monkeypatch.setattr(bundle.target, "prefill", boom)
    long_prompt = np.zeros(bundle.max_positions - 10, dtype=np.int64)
    with pytest.raises(ValueError, match="prompt too long for the context"):
        decode(bundle, long_prompt, 8, method="ddtree", budget=8)
    cases = [
        (dict(method="nope"), "unknown method"),
        (dict(method="ddtree"), "needs a budget"),
        (dict(method="chain", rule="rrsw"), "not lossless"),
        (dict(method="ar", rule="tev"), "not lossless"),
        (dict(method="sampled-tree[2x4]", temperature=1.0, rule="tev"), "not lossless"),
        (dict(method="ar", temperature=-1.0), "temperature"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            decode(bundle, prompts[0], 8, **kwargs)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decode(bundle, [1, bundle.vocab_size], 8, method="ar")
    with pytest.raises(ValueError, match="at least 2 token ids"):
        check_request(bundle, [5], 8, "ar", None, 0.0, None)


def test_validate_cli_bad_input_exit_code(tmp_path):
    from real_models.validate import main

    assert main(["--target", str(tmp_path / "missing")]) == 2


def test_gpu_script_is_harmless_without_a_gpu(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the script would run the validation")
    script = Path(bundle_mod.__file__).resolve().parent / "gpu_validate.sh"
    res = subprocess.run(["bash", str(script), str(tmp_path)], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable}, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "no CUDA GPU" in res.stdout
