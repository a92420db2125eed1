"""Latency models: presets, JSON round trips, the monotone-convex fit, bad input."""

import json

import numpy as np
import pytest

from treespec_sim.cost import (
    PRESETS,
    PiecewiseLinearCost,
    RooflineCost,
    TabulatedCost,
    TiledCost,
    cost_model_from_dict,
    fit_monotone_convex,
    get_cost_model,
    load_cost_model,
    round_time,
    save_cost_model,
)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_load_round_trip_and_are_monotone(name, tmp_path):
    model = get_cost_model(name)
    n = np.arange(1, 1100)
    cost = np.asarray(model.verify_cost(n))
    assert model.provenance and model.name == name
    assert np.all(np.diff(cost) >= -1e-12) and cost[0] > 0
    assert model.draft_cost() > 0
    # only the A800 batch-1 rows are measured (the *-batch presets are datasheet estimates)
    assert model.estimate == (not name.startswith("a800") or name.endswith("-batch"))
    path = tmp_path / "m.json"
    save_cost_model(model, path)
    again = load_cost_model(path)
    np.testing.assert_allclose(np.asarray(again.verify_cost(n)), cost, rtol=0, atol=1e-15)
    assert again.draft_cost() == model.draft_cost()


def test_a800_preset_matches_the_released_numbers():
    # Values quoted in research note ddtree_dflash_caddtree.md §3.2 (read from the release):
    # Qwen3-8B at context 1: Cv(1) = 34.8 ms, Cv(511) about 55 ms; Cd = 6.5 ms.
    m = get_cost_model("a800-qwen3-8b")
    assert m.draft_cost() == pytest.approx(6.5e-3)
    assert m.verify_cost(1, context_length=1) == pytest.approx(34.8e-3, abs=0.1e-3)
    assert m.verify_cost(511, context_length=1) == pytest.approx(55e-3, abs=0.5e-3)
    assert "CaDDTree" in m.provenance


def test_tabulated_interpolates_contexts_and_extends_linearly():
    m = TabulatedCost((1, 2, 3), (0, 100), ((1.0, 1.0, 2.0), (3.0, 3.0, 5.0)), 0.5)
    assert m.verify_cost(2, context_length=50) == pytest.approx(2.0)
    assert m.verify_cost(5, context_length=0) == pytest.approx(4.0)  # slope 1 past n = 3
    assert m.verify_cost(3, context_length=1000) == pytest.approx(5.0)  # clamped
    assert m.context_note(1000) is not None and "clamped" in m.context_note(1000)
    assert m.context_note(50) is None
    assert round_time(m, 1, context_length=0) == pytest.approx(1.5)  # 2 tokens: root + node


def test_monotone_convex_fit_recovers_a_convex_curve():
    rng = np.random.default_rng(0)
    n = np.arange(1, 120)
    truth = 0.03 + 2e-4 * np.maximum(n - 60, 0)
    noisy = truth + rng.normal(0, 5e-4, n.size)
    fit = fit_monotone_convex(n, noisy)
    assert np.all(np.diff(fit) >= 0)
    assert np.all(np.diff(fit, 2) >= -1e-12)
    # Projection onto a convex set containing the truth cannot move farther than the data
    assert np.linalg.norm(fit - truth) <= np.linalg.norm(noisy - truth)
    model = TabulatedCost.from_measurements(n, [0], [noisy], 0.006)
    assert model.is_convex


def test_tiled_cost_is_not_convex_and_piecewise_knows_it():
    t = TiledCost(base_s=1.0, slope_s=0.0, tile_tokens=4, step_s=0.5, draft_s=0.1)
    c = np.asarray(t.verify_cost(np.arange(1, 13)))
    assert c[3] == c[0] and c[4] > c[3]  # jump after every 4 tokens
    pw = PiecewiseLinearCost(tuple(range(1, 13)), tuple(c), 0.1)
    assert not pw.is_convex
    assert PiecewiseLinearCost((1, 10, 20), (1.0, 1.0, 2.0), 0.1).is_convex


@pytest.mark.parametrize("kwargs, match", [
    ({"node_counts": (), "context_lengths": (0,), "verify_s": ((),), "draft_s": 0.1},
     "empty"),
    ({"node_counts": (1, 2), "context_lengths": (0,), "verify_s": ((2.0, 1.0),),
      "draft_s": 0.1}, "decreases"),
    ({"node_counts": (1, 2), "context_lengths": (0,), "verify_s": ((-1.0, 1.0),),
      "draft_s": 0.1}, ">= 0"),
    ({"node_counts": (1, 2, 3), "context_lengths": (0,), "verify_s": ((1.0, 3.0, 4.0),),
      "draft_s": 0.1}, "slope decreases"),
    ({"node_counts": (1, 2), "context_lengths": (0,), "verify_s": ((1.0, 1.0),),
      "draft_s": -0.1}, "draft_s"),
])
def test_bad_tables_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TabulatedCost(**kwargs)


def test_bad_models_and_files(tmp_path):
    with pytest.raises(ValueError, match="known presets: a800-qwen3-4b"):
        get_cost_model("tpu-v9")
    with pytest.raises(ValueError, match="compute_slope_s"):
        RooflineCost(0.005, 1e-5, 128, 1e-6, 0.001)
    with pytest.raises(ValueError, match="missing key"):
        cost_model_from_dict({"cost_model": "tabulated", "node_counts": [1]})
    with pytest.raises(ValueError, match="schema"):
        cost_model_from_dict({"schema": "other/9", "cost_model": "tiled"})
    with pytest.raises(ValueError, match="unknown latency model kind"):
        cost_model_from_dict({"cost_model": "quantum"})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_cost_model(bad)
    with pytest.raises(ValueError, match="latency file: no such file"):
        load_cost_model(tmp_path / "missing.json")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"node_counts": [1, 2], "context_lengths": [0],
                                 "verify_cost_s": {"5": [1.0, 1.0]}, "draft_cost_s": 0.1}))
    with pytest.raises(ValueError, match="must match context_lengths"):
        load_cost_model(wrong)
    with pytest.raises(ValueError, match="n_tokens"):
        get_cost_model("h200-qwen3-8b").verify_cost(-1)
    with pytest.raises(ValueError, match="context_length"):
        get_cost_model("h200-qwen3-8b").verify_cost(3, context_length=float("nan"))


def test_tabulated_files_keep_their_metadata(tmp_path):
    m = TabulatedCost((1, 2), (0,), ((1.0, 2.0),), 0.5, name="mine",
                      meta={"device": "cpu", "threads": 1, "raw_medians": [[1.0, 2.1]]})
    path = tmp_path / "p.json"
    save_cost_model(m, path)
    again = load_cost_model(path)
    assert again.meta == {"device": "cpu", "threads": 1, "raw_medians": [[1.0, 2.1]]}


# ------------------------------------------------------------------ outside the measured range
def _caught(fn):
    """Run ``fn`` and return the ExtrapolationWarnings it issued (every one, not the first)."""
    import warnings

    from treespec_sim.cost import ExtrapolationWarning

    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        fn()
    return [w for w in got if issubclass(w.category, ExtrapolationWarning)]


def test_a_table_warns_once_per_axis_beyond_its_range_and_never_inside():
    import warnings

    from treespec_sim.cost import ExtrapolationWarning

    assert issubclass(ExtrapolationWarning, UserWarning)
    m = TabulatedCost((1, 2, 4), (100, 200), ((1.0, 1.5, 2.5), (2.0, 2.5, 3.5)), 0.5,
                      name="mine")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # inside the range, ends included: silent
        inside = [m.verify_cost(np.arange(1, 5), 150), m.verify_cost(4, 200),
                  m.verify_cost(1, 100)]
    beyond = _caught(lambda: [m.verify_cost(8, 150), m.verify_cost(np.arange(1, 100), 150),
                              m.verify_cost(1000, 100)])
    assert len(beyond) == 1
    text = str(beyond[0].message)
    assert "'mine'" in text and "8 query tokens" in text and "[1, 4]" in text
    # the context axis is its own place: one more warning, then silence
    ctx = _caught(lambda: [m.verify_cost(2, 50), m.verify_cost(2, 5000), m.verify_cost(9, 1)])
    assert len(ctx) == 1 and "context length 50" in str(ctx[0].message)
    assert "clamped" in str(ctx[0].message)
    # another instance of the same table warns afresh
    again = TabulatedCost(m.node_counts, m.context_lengths, m.verify_s, 0.5, name="mine")
    assert len(_caught(lambda: again.verify_cost(8, 150))) == 1
    assert again == m and hash(again) == hash(m)  # the warned-axes memo is not part of a model
    # no price moved: the same numbers as the interpolation the class documents
    assert inside[1] == 3.5 and inside[2] == 1.0
    assert m.verify_cost(8, 150) == pytest.approx(0.5 * (2.5 + 4 * 0.5) + 0.5 * (3.5 + 4 * 0.5))


def test_record_extrapolation_logs_every_request_with_both_ranges():
    from treespec_sim.cost import record_extrapolation

    m = get_cost_model("a800-qwen3-8b")  # measured on 0..512 tokens, contexts 1..8000
    pw = PiecewiseLinearCost((1, 64), (0.01, 0.02), 0.001, name="knots")
    roof = get_cost_model("h200-qwen3-8b")
    _caught(lambda: m.verify_cost(600))  # warned once already: still logged below
    with record_extrapolation() as log:
        m.verify_cost(np.arange(1, 513))  # inside: nothing
        assert log.records() == []
        _caught(lambda: [m.verify_cost(np.arange(1, 1026)), m.verify_cost(700, 9000),
                         pw.verify_cost(100_000), pw.verify_cost(0.5),
                         roof.verify_cost(100_000, 50_000)])
        with record_extrapolation() as inner:  # nested blocks each see their own requests
            _caught(lambda: m.verify_cost(2000))
    got = {(r["model"], r["axis"]): r for r in log.records()}
    assert set(got) == {("a800-qwen3-8b", "tokens"), ("a800-qwen3-8b", "context"),
                        ("knots", "tokens")}  # a roofline has no measured range
    assert got["a800-qwen3-8b", "tokens"]["requested"] == [1, 2000]
    assert got["a800-qwen3-8b", "tokens"]["measured"] == [0, 512]
    assert "last measured slope" in got["a800-qwen3-8b", "tokens"]["action"]
    assert got["a800-qwen3-8b", "context"]["requested"] == [9000, 9000]
    assert got["a800-qwen3-8b", "context"]["measured"] == [1, 8000]
    assert got["knots", "tokens"]["requested"] == [0.5, 100_000]
    assert "below" in got["knots", "tokens"]["action"] and "above" in \
        got["knots", "tokens"]["action"]
    assert [r["requested"] for r in inner.records()] == [[2000, 2000]]
    json.dumps(log.records())  # JSON-ready for the run record
    with record_extrapolation() as after:
        pass
    assert after.records() == []  # a closed block logs nothing more


def test_extrapolation_logs_are_per_thread():
    import threading

    from treespec_sim.cost import record_extrapolation

    logs = {}

    def cell(name, n):
        model = TabulatedCost((1, 4), (1024,), ((1.0, 2.0),), 0.1, name=name)
        with record_extrapolation() as log:
            model.verify_cost(n)
            logs[name] = log.records()

    threads = [threading.Thread(target=cell, args=(f"t{i}", 10 + i)) for i in range(3)]
    # catch_warnings is process-wide: set once here, not in the threads
    _caught(lambda: ([t.start() for t in threads], [t.join() for t in threads]))
    assert {k: [(r["model"], r["requested"]) for r in v] for k, v in logs.items()} == {
        f"t{i}": [(f"t{i}", [10 + i, 10 + i])] for i in range(3)}
