"""Batched latency models (a pass over b requests), latency files with a batch axis, and the
batch's costs handed to ``batch_caddtree``."""

import json
import warnings

import numpy as np
import pytest

from treespec_sim.cost import (
    GPU_DATASHEETS,
    PRESETS,
    QWEN3_SHAPES,
    ROOFLINE_ASSUMPTIONS,
    SCHEMA,
    SCHEMA_BATCH,
    BatchRooflineCost,
    BatchTabulatedCost,
    ExtrapolationWarning,
    TabulatedCost,
    batch_costs,
    batch_sizes,
    cost_model_from_dict,
    get_cost_model,
    load_cost_model,
    record_extrapolation,
    save_cost_model,
)
from treespec_sim.policies import batch_caddtree, caddtree

BATCH_PRESETS = sorted(n for n in PRESETS if n.endswith("-batch"))


def _roofline(**kw) -> BatchRooflineCost:
    base = dict(weight_bytes=8e9, kv_bytes_per_token=1e5, flops_per_token=1.6e10,
                attention_flops=5e5, bandwidth_bytes_s=2e12, flops_s=5e14, overhead_s=1e-3,
                draft_weight_bytes=2e9, draft_kv_bytes_per_token=2e4, draft_flops_per_token=4e9,
                draft_attention_flops=8e4, draft_tokens=16, draft_overhead_s=3e-4)
    return BatchRooflineCost(**{**base, **kw})


def test_every_gpu_and_model_has_a_batch_preset():
    assert BATCH_PRESETS == sorted(f"{g}-{m}-batch" for g in ("a800", "h100", "h200")
                                   for m in ("qwen3-4b", "qwen3-8b"))
    assert set(GPU_DATASHEETS) == {"a800", "h100", "h200"}


@pytest.mark.parametrize("name", BATCH_PRESETS)
@pytest.mark.parametrize("b", [1, 4, 16, 64])
def test_batch_presets_are_convex_and_non_decreasing_in_the_tokens(name, b):
    model = get_cost_model(name)
    draft, verify = batch_costs(model, [1024] * b)
    n = np.arange(b, b * 40)
    cost = np.asarray(verify(n))
    assert np.all(np.diff(cost) >= 0)
    assert np.all(np.diff(cost, 2) >= -1e-15)  # convex: batch_caddtree's stop is exact
    assert draft > 0 and model.estimate and "not measured" in model.provenance


def test_weights_are_read_once_and_each_request_reads_its_cache():
    m = _roofline()
    beta = m.bandwidth_bytes_s
    # memory-bound (a few tokens): b requests at context 0 cost the same weights once, plus
    # the KV written for their tokens; each request's cache adds its own read
    one = m.batch_verify_cost(1, [0])
    eight = m.batch_verify_cost(8, [0] * 8)
    assert eight - one == pytest.approx(m.kv_bytes_per_token * 7 / beta, rel=1e-12)
    ctx = m.batch_verify_cost(8, [100, 200, 300, 400, 0, 0, 0, 0])
    assert ctx - eight == pytest.approx(m.kv_bytes_per_token * 1000 / beta, rel=1e-12)


def test_compute_grows_with_the_total_tokens_past_the_crossover():
    m = _roofline()
    c = [512] * 4
    knee = m.crossover_tokens(c)
    per_token = (m.flops_per_token + m.attention_flops * 512) / m.flops_s
    hi = m.batch_verify_cost(np.array([int(knee) + 10, int(knee) + 110]), c)
    assert hi[1] - hi[0] == pytest.approx(100 * per_token, rel=1e-12)
    lo = m.batch_verify_cost(np.array([4, 5]), c)
    assert lo[1] - lo[0] == pytest.approx(m.kv_bytes_per_token / m.bandwidth_bytes_s, rel=1e-9)
    # a request always verifies its root: fewer tokens than requests cost as many as requests
    assert m.batch_verify_cost(0, c) == m.batch_verify_cost(4, c)


def test_the_drafter_turns_compute_bound_as_the_batch_grows():
    m = _roofline()
    small = m.batch_draft_cost([0])
    assert small == pytest.approx(m.draft_overhead_s + m.draft_weight_bytes / m.bandwidth_bytes_s)
    big = m.batch_draft_cost([0] * 512)
    assert big == pytest.approx(m.draft_overhead_s
                                + m.draft_tokens * 512 * m.draft_flops_per_token / m.flops_s)


def test_batch_one_of_a_roofline_is_its_batch_one_price():
    m = get_cost_model("h200-qwen3-8b-batch")
    assert m.verify_cost(17, 300) == m.batch_verify_cost(17, [300])
    assert m.draft_cost(300) == m.batch_draft_cost([300])
    assert batch_sizes(m) is None


def test_the_estimates_follow_from_the_datasheets_and_shapes():
    """The preset's numbers are the formulas of docs/usage.md on the stated inputs."""
    m = get_cost_model("h200-qwen3-8b-batch")
    hidden, mlp = QWEN3_SHAPES["qwen3-8b"]
    layer = 2 * hidden * 4096 + 2 * hidden * 1024 + 3 * hidden * mlp
    assert m.weight_bytes == 2 * (36 * layer + hidden * 151936)
    assert m.kv_bytes_per_token == 36 * 2 * 8 * 128 * 2
    flops, bw = GPU_DATASHEETS["h200"]
    assert m.bandwidth_bytes_s == ROOFLINE_ASSUMPTIONS["bandwidth_utilisation"] * bw
    assert m.flops_s == ROOFLINE_ASSUMPTIONS["compute_utilisation"] * flops
    # at batch 1 it agrees with the batch-1 estimate's floor and compute slope within 10%
    one = get_cost_model("h200-qwen3-8b")
    assert m.verify_cost(1, 0) == pytest.approx(one.verify_cost(1, 0), rel=0.1)
    slope = (m.verify_cost(1000, 0) - m.verify_cost(900, 0)) / 100
    assert slope == pytest.approx(one.compute_slope_s, rel=0.1)


def test_a_batch_one_model_prices_batch_one_only():
    model = get_cost_model("a800-qwen3-8b")          # a treespec-latency/1 file
    assert batch_sizes(model) == (1,)
    draft, verify = batch_costs(model, [1024])
    assert draft == model.draft_cost(1024)
    np.testing.assert_array_equal(verify(np.arange(1, 9)), model.verify_cost(np.arange(1, 9)))
    with pytest.raises(ValueError, match="prices batch 1 only; a batch of 2"):
        batch_costs(model, [1024, 1024])
    with pytest.raises(ValueError, match="context_lengths must be a non-empty sequence"):
        batch_costs(model, [])
    with pytest.raises(ValueError, match="context_lengths must be finite and >= 0"):
        batch_costs(model, [-1])


def _table(b: int, scale: float) -> TabulatedCost:
    n = (b, 2 * b, 4 * b, 8 * b)
    return TabulatedCost(n, (0, 1000), ((1.0 * scale, 1.0 * scale, 1.5 * scale, 3.0 * scale),
                                        (2.0 * scale, 2.0 * scale, 2.5 * scale, 4.0 * scale)),
                         draft_s=0.1 * scale)


def test_tabulated_batches_round_trip_through_a_v2_file(tmp_path):
    model = BatchTabulatedCost(((1, _table(1, 1.0)), (4, _table(4, 2.0))), name="toy",
                               meta={"device": "cpu"})
    path = tmp_path / "lat.json"
    save_cost_model(model, path)
    data = json.loads(path.read_text())
    assert data["schema"] == SCHEMA_BATCH and data["batch_sizes"] == [1, 4]
    again = load_cost_model(path)
    assert isinstance(again, BatchTabulatedCost) and again.batch_sizes == (1, 4)
    assert again.meta["device"] == "cpu"
    n = np.arange(4, 40)
    for b in (1, 4):
        np.testing.assert_array_equal(again.batch_verify_cost(n, [500] * b),
                                      model.batch_verify_cost(n, [500] * b))
        assert again.batch_draft_cost([0] * b) == model.batch_draft_cost([0] * b)


def test_between_batch_sizes_the_tables_mix_linearly_and_outside_they_clamp():
    t1, t4 = _table(1, 1.0), _table(4, 2.0)
    model = BatchTabulatedCost(((1, t1), (4, t4)))
    n = np.arange(4, 30)
    mixed = model.batch_verify_cost(n, [0, 0])
    np.testing.assert_allclose(mixed, (2 / 3) * t1.verify_cost(n, 0)
                               + (1 / 3) * t4.verify_cost(n, 0))
    with record_extrapolation() as log, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        far = model.batch_verify_cost(n, [0] * 9)
    np.testing.assert_array_equal(far, t4.verify_cost(n, 0))
    assert any(issubclass(w.category, ExtrapolationWarning) and "batch size 9" in str(w.message)
               for w in caught)
    assert [r["axis"] for r in log.records()] == ["batch"]
    assert log.records()[0]["action"] == "clamped to the nearest measured batch size"


def test_todays_latency_files_still_read_as_batch_one(tmp_path):
    v1 = get_cost_model("a800-qwen3-4b").to_dict()
    assert v1["schema"] == SCHEMA
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(v1))
    model = load_cost_model(path)
    assert isinstance(model, TabulatedCost) and batch_sizes(model) == (1,)
    draft, verify = batch_costs(model, [1024])
    assert verify(65) == model.verify_cost(65, 1024) and draft == model.draft_cost(1024)


@pytest.mark.parametrize("patch, match", [
    ({"schema": "treespec-latency/3"}, "reads 'treespec-latency/1' and 'treespec-latency/2'"),
    ({"batches": {}}, "batches must be a non-empty object"),
    ({"batches": {"x": {}}}, "key 'x' is not a batch size"),
    ({"batch_sizes": [1, 8]}, r"batch_sizes \[1, 8\] must match the keys of batches"),
    ({"batches": {"1": {"node_counts": [1]}}}, r"batches\['1'\]: latency table is missing"),
])
def test_bad_v2_files_name_what_is_wrong(patch, match):
    d = BatchTabulatedCost(((1, _table(1, 1.0)), (4, _table(4, 2.0)))).to_dict()
    with pytest.raises(ValueError, match=match):
        cost_model_from_dict({**d, **patch})


def test_a_roofline_round_trips_with_where_its_numbers_came_from():
    model = get_cost_model("a800-qwen3-4b-batch")
    d = model.to_dict()
    assert d["schema"] == SCHEMA_BATCH and d["peak_bandwidth_bytes_s"] == 2.039e12
    again = cost_model_from_dict(json.loads(json.dumps(d)))
    assert again == model and again.meta == model.meta


def test_the_shared_budget_shrinks_per_request_as_the_batch_grows():
    """On an estimated H200 the pass turns compute-bound as the batch grows: the same request,
    repeated, gets fewer nodes at batch 64 than alone (batch_caddtree on batch_costs)."""
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((15, 4096)) * np.linspace(6.0, 1.0, 15)[:, None]
    lp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    model = get_cost_model("h200-qwen3-8b-batch")
    per_request = {}
    for b in (1, 8, 64):
        draft, verify = batch_costs(model, [1024] * b)
        trees = batch_caddtree([lp] * b, draft_cost=draft, verify_cost=verify, max_budget=512)
        per_request[b] = sum(t.size for t in trees) / b
    assert per_request[64] < per_request[8] <= per_request[1]
    # batch 1 is caddtree on the batch-1 price of the same model
    draft, verify = batch_costs(model, [1024])
    assert batch_caddtree([lp], draft_cost=draft, verify_cost=verify, max_budget=512)[0] == \
        caddtree(lp, draft_cost=model.draft_cost(1024),
                 verify_cost=lambda n: model.verify_cost(n, 1024), max_budget=512)
