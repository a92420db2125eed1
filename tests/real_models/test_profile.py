"""real_models.profile: the latency file, its metadata checks, random-architecture bundles."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch

import real_models.profile as profile_mod
from real_models import decode
from real_models.profile import (
    ARCHS,
    CPU_TINY,
    ProfileMismatch,
    build_random_bundle,
    check_profile,
    load_profile,
    model_signature,
    profile_bundle,
    small_arch,
    to_cost_model,
)
from treespec_sim.cost import TabulatedCost, fit_monotone_convex, get_cost_model

ROOT = Path(__file__).resolve().parents[2]

SMALL_ARCH = {"name": "small", "target": dict(
    vocab_size=64, head_dim=8, num_attention_heads=2, num_key_value_heads=1,
    max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=10000.0, attention_bias=False,
    initializer_range=0.02, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
    tie_word_embeddings=True),
    "drafter_layers": 1, "block_size": 4, "mask_token_id": 1, "target_layer_ids": [0, 2]}


@pytest.fixture(scope="module")
def tiny_profile(bundle):
    res = profile_bundle(bundle, node_counts=(1, 4, 16), context_lengths=(8, 40), warmup=0,
                         repeats=2)
    return to_cost_model(bundle, res, name="t", warmup=0, repeats=2)


def test_profile_roundtrip_schema_and_metadata(tiny_profile, bundle, tmp_path):
    d = tiny_profile.to_dict()
    assert d["schema"] == "treespec-latency/1" and d["cost_model"] == "tabulated"
    assert d["device"] == "cpu" and d["model"] == "tiny-target + tiny-drafter"
    assert d["target_arch"] == model_signature(bundle)["target_arch"]
    assert set(d["raw_verify_s"]) == {"8", "40"} and d["torch"]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(d))
    m = get_cost_model(str(path))
    assert isinstance(m, TabulatedCost) and m.is_convex
    v = m.verify_cost(np.arange(1, 40), 20)
    assert np.all(np.diff(v) >= 0) and m.draft_cost() > 0
    model, notes = load_profile(path, bundle)
    assert notes == [] and model.node_counts == (1, 4, 16)


def test_committed_cpu_profile_matches_tiny_models(bundle):
    data = json.loads(CPU_TINY.read_text())
    assert data["device"] == "cpu" and data["node_counts"][-1] >= 256
    assert len(data["context_lengths"]) >= 3
    assert data["target_arch"] == model_signature(bundle)["target_arch"]
    assert data["drafter_arch"] == model_signature(bundle)["drafter_arch"]
    m = get_cost_model(str(CPU_TINY))
    assert m.is_convex
    # the fit must stay close to the raw medians it was fitted to
    for c in data["context_lengths"]:
        raw = np.asarray(data["raw_verify_s"][str(c)])
        fit = np.asarray(data["verify_cost_s"][str(c)])
        assert np.max(np.abs(fit - raw) / raw) < 0.25


def _tamper(tiny_profile, tmp_path, **changes):
    d = tiny_profile.to_dict()
    d.update(changes)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    return p


def test_bad_latency_files(tiny_profile, bundle, tmp_path):
    with pytest.raises(ValueError, match="schema"):
        load_profile(_tamper(tiny_profile, tmp_path, schema="other/2"), bundle)
    with pytest.raises(ValueError, match="schema"):
        check_profile({"node_counts": [1]}, bundle)
    with pytest.raises(ProfileMismatch, match="device"):
        load_profile(_tamper(tiny_profile, tmp_path, device="cuda"), bundle)
    arch = dict(model_signature(bundle)["target_arch"], num_hidden_layers=36)
    with pytest.raises(ProfileMismatch, match="target_arch"):
        load_profile(_tamper(tiny_profile, tmp_path, target_arch=arch), bundle)
    with pytest.raises(ProfileMismatch, match="dtype"):
        load_profile(_tamper(tiny_profile, tmp_path, dtype="torch.bfloat16"), bundle)
    with pytest.warns(UserWarning, match="MISMATCH"):
        _, notes = load_profile(_tamper(tiny_profile, tmp_path, device="cuda"), bundle,
                                on_mismatch="warn")
    assert notes and "cuda" in notes[0]
    with pytest.warns(UserWarning, match="measured on"):
        _, notes = load_profile(_tamper(tiny_profile, tmp_path, device_name="Other CPU"), bundle)
    assert "Other CPU" in notes[0]
    d = {k: v for k, v in tiny_profile.to_dict().items()
         if k not in ("device", "device_name", "model", "target_arch", "drafter_arch")}
    notes = check_profile(d, bundle)
    assert any("no 'device'" in n for n in notes) and any("no 'model'" in n for n in notes)


def test_decode_checks_cost_file(tiny_profile, bundle, tmp_path):
    prompt = np.arange(3, 40)
    bad = _tamper(tiny_profile, tmp_path, device="cuda")
    with pytest.raises(ProfileMismatch):
        decode(bundle, prompt, 8, method="caddtree", budget=16, cost=str(bad))
    with pytest.warns(UserWarning):
        res = decode(bundle, prompt, 8, method="caddtree", budget=16,
                                 cost=str(bad), cost_mismatch="warn")
    assert len(res.tokens) == 8 and any("MISMATCH" in n for n in res.notes)
    ok = decode(bundle, prompt, 8, method="exhaustive", budget=16,
                            cost=str(CPU_TINY))
    ref = decode(bundle, prompt, 8, method="ar")
    assert ok.tokens == ref.tokens


def test_random_arch_bundle_profiles_on_cpu():
    b = build_random_bundle(SMALL_ARCH, device="cpu", dtype="float32")
    assert b.block_size == 4 and b.drafter is not None and b.tokenizer is None
    res = profile_bundle(b, node_counts=(1, 8), context_lengths=(4, 16), warmup=0, repeats=1)
    assert res.raw_verify_s.shape == (2, 2) and np.all(res.raw_verify_s > 0)
    d = to_cost_model(b, res).to_dict()
    assert d["target_arch"]["num_hidden_layers"] == 3 and d["drafter_arch"]["block_size"] == 4
    with pytest.raises(ValueError, match="unknown arch"):
        build_random_bundle("qwen3-999b", device="cpu")
    with pytest.raises(ValueError, match="fit"):
        profile_bundle(b, node_counts=(1,), context_lengths=(200,), repeats=1)


def test_random_bundle_keeps_rope_in_float32():
    """``.to(bfloat16)`` must not round the RoPE frequencies (from_pretrained keeps float32)."""
    b = build_random_bundle(SMALL_ARCH, device="cpu", dtype="bfloat16")
    hd, theta = SMALL_ARCH["target"]["head_dim"], SMALL_ARCH["target"]["rope_theta"]
    exact = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    bufs = [(n, x) for m in (b.target.model, b.drafter) for n, x in m.named_buffers()
            if n.endswith("inv_freq")]
    assert len(bufs) == 4  # inv_freq and original_inv_freq of the target and of the drafter
    for name, buf in bufs:
        assert buf.dtype == torch.float32, name
        torch.testing.assert_close(buf.double(), exact, rtol=1e-6, atol=0)
    # a bfloat16 copy would be off by up to 2^-9 relative: the check above can tell
    assert (exact.to(torch.bfloat16).double() - exact).abs().max() > 1e-6 * exact.max()
    assert all(p.dtype == torch.bfloat16 for p in b.target.model.parameters())
    assert all(p.dtype == torch.bfloat16 for p in b.drafter.parameters())


def test_small_arch_keeps_the_layout():
    for name, full in ARCHS.items():
        small = small_arch(name)
        assert small["target"]["num_hidden_layers"] == full["target"]["num_hidden_layers"]
        assert small["target_layer_ids"] == full["target_layer_ids"]
        assert small["block_size"] == full["block_size"]
        assert small["mask_token_id"] < small["target"]["vocab_size"]
        assert small["target"]["hidden_size"] * 64 == full["target"]["hidden_size"]
    with pytest.raises(ValueError, match="unknown arch"):
        small_arch("qwen3-999b")


def test_raw_medians_are_written_before_the_fit(tmp_path, monkeypatch, bundle):
    out = tmp_path / "p.json"
    argv = ["--tokens", "1", "4", "16", "--contexts", "8", "40", "--warmup", "0", "--repeats",
            "2", "--out", str(out)]

    def broken(data):
        raise RuntimeError("planted fit failure")

    monkeypatch.setattr(profile_mod, "fit_document", broken)
    assert profile_mod.main(argv) == 1
    raw = json.loads(out.read_text())
    assert raw["fit"] == "pending" and "verify_cost_s" not in raw
    assert set(raw["raw_verify_s"]) == {"8", "40"} and "partial" not in raw
    assert raw["target_arch"] == model_signature(bundle)["target_arch"]
    with pytest.raises(ValueError, match="not a usable latency model"):
        load_profile(out, bundle)
    monkeypatch.undo()
    model = profile_mod.fit_document(raw)  # refit offline
    assert model.is_convex and model.context_lengths == (8, 40)
    np.testing.assert_allclose(model.verify_s[1], fit_monotone_convex(
        raw["node_counts"], raw["raw_verify_s"]["40"]))
    assert not list(tmp_path.glob(".*.tmp"))


def test_partial_results_survive_an_interrupted_profile(tmp_path):
    """SIGKILL the CLI once its first context row is saved: that row stays usable."""
    out, fig = tmp_path / "p.json", tmp_path / "p.png"
    contexts = ["8", "40", "72", "104"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "real_models.profile", "--tokens", "1", "16", "64", "--contexts",
         *contexts, "--warmup", "0", "--repeats", "60", "--out", str(out), "--figure",
         str(fig)], cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if "verify_cost_s" in json.loads(out.read_text()):
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
    finally:
        proc.kill()
        rc = proc.wait()
    assert rc == -signal.SIGKILL  # interrupted, not finished
    data = json.loads(out.read_text())
    done = [str(c) for c in data["context_lengths"]]
    assert 1 <= len(done) < len(contexts) and done == contexts[:len(done)]
    assert data["partial"] == f"{len(done)} of {len(contexts)} contexts measured"
    m = get_cost_model(str(out))
    assert isinstance(m, TabulatedCost) and m.is_convex and m.verify_cost(16, 8) > 0
    assert fig.is_file() and fig.stat().st_size > 1000


# ------------------------------------------------------------------------ batches (issue 47)
def test_a_batched_pass_gives_each_request_its_own_verification(bundle):
    """verify_batch_forward over b requests = b single-sequence verify_forward calls, request
    by request (its own cache, positions and tree mask)."""
    from treespec_sim.policies import ddtree

    logits = np.random.default_rng(1).standard_normal((bundle.depth, bundle.vocab_size)) * 3
    tree = ddtree(logits - np.logaddexp.reduce(logits, axis=1, keepdims=True), 6, root_token=2)
    prompts = np.random.default_rng(0).integers(2, bundle.vocab_size, size=(3, 12))
    target = bundle.target
    target.prefill_batch(prompts)
    batched = target.verify_batch_forward(tree, 3)
    assert tuple(batched.logits.shape[:2]) == (3, tree.n_nodes)
    for i in range(3):
        target.prefill(prompts[i], want_features=True)
        one = target.verify_forward(tree, want_features=True)
        torch.testing.assert_close(batched.logits[i], one.logits, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(batched.features[i], one.features[0], rtol=1e-4, atol=1e-4)


def test_a_batch_profile_is_a_v2_file_with_totals(bundle, tmp_path):
    from real_models.profile import batch_document
    from treespec_sim.cost import BatchTabulatedCost, batch_costs

    results = {b: profile_bundle(bundle, node_counts=(1, 4), context_lengths=(8,), warmup=0,
                                 repeats=1, batch_size=b) for b in (1, 3)}
    data = batch_document(bundle, results, name="t", warmup=0, repeats=1)
    assert data["schema"] == "treespec-latency/2" and data["batch_sizes"] == [1, 3]
    assert data["batches"]["3"]["node_counts"] == [3, 12]   # totals: b x per-request tokens
    assert data["batches"]["1"]["node_counts"] == [1, 4]
    assert "raw_verify_s" in data["batches"]["3"] and data["device"] == "cpu"
    assert check_profile(data, bundle) == []
    path = tmp_path / "batch.json"
    path.write_text(json.dumps(data))
    model = get_cost_model(str(path))
    assert isinstance(model, BatchTabulatedCost) and model.batch_sizes == (1, 3)
    draft, verify = batch_costs(model, [8, 8, 8])
    assert draft > 0 and np.all(np.diff(verify(np.arange(3, 13))) >= 0)


def test_the_committed_batch_profile_reads(bundle):
    from treespec_sim.cost import BatchTabulatedCost

    path = ROOT / "real_models" / "profiles" / "cpu_tiny_batch.json"
    model = get_cost_model(str(path))
    assert isinstance(model, BatchTabulatedCost) and model.batch_sizes[0] == 1
    data = json.loads(path.read_text())
    assert data["target_arch"] == model_signature(bundle)["target_arch"]
    for b, body in data["batches"].items():
        assert body["node_counts"][0] == int(b)   # a pass verifies at least every root


def test_batch_sizes_must_increase(capsys):
    assert profile_mod.main(["--batch-sizes", "4", "1"]) == 2
    assert "--batch-sizes must be increasing integers >= 1; got 4 1" in capsys.readouterr().err
