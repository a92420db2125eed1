"""Schedules per batch size out of ``treespec_sim.export`` (issue 47): the chain length and the
DDTree budget at each batch size under a batched latency model, exported as vLLM's
``num_speculative_tokens_per_batch_size`` and TensorRT-LLM's ``draft_len_schedule``, and read
back with each engine's documented rule (vllm-project/vllm PR #32374; NVIDIA/TensorRT-LLM PR
#10860): the parsers here are written from those descriptions, not from the exporter."""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import json
import re

import numpy as np
import pytest
import yaml

from treespec_sim import export, synth
from treespec_sim.cost import batch_costs, get_cost_model
from treespec_sim.stats import MeanCI


def _request(**kw) -> export.ExportRequest:
    base = {"regime": synth.REGIMES["small"], "drafter": "block-diffusion", "temperature": 0.0,
            "contexts": 12, "worlds": 3, "seed": 2, "cost": "h200-qwen3-8b-batch"}
    base.update(kw)
    return export.ExportRequest(**base)


def vllm_lookup(text: str, max_batch: int) -> list[int]:
    """K per batch size 1..max_batch as vLLM's Dynamic SD reads the speculative_config:
    inclusive "lo-hi" range keys, a gap inherits the previous configured K, and the scheduled K
    is clamped to num_speculative_tokens."""
    config = json.loads(text)["speculative_config"]
    top = config["num_speculative_tokens"]
    assert isinstance(top, int) and top >= 1
    ranges = []
    for key, k in config["num_speculative_tokens_per_batch_size"].items():
        m = re.fullmatch(r"(\d+)-(\d+)", key)
        assert m, f"not an inclusive range key: {key!r}"
        lo, hi = int(m.group(1)), int(m.group(2))
        assert 1 <= lo <= hi and isinstance(k, int) and k >= 0
        ranges.append((lo, hi, k))
    ranges.sort()
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges)), "overlap"
    out, previous = [], 0
    for b in range(1, max_batch + 1):
        inside = [k for lo, hi, k in ranges if lo <= b <= hi]
        if inside:
            previous = inside[0]
        out.append(min(top, previous))
    return out


def trtllm_lookup(text: str, max_batch: int) -> list[int]:
    """Draft length per batch size as TensorRT-LLM reads draft_len_schedule: the value of the
    first key >= the batch size (keys sorted), 0 past the largest key."""
    config = yaml.safe_load(text)["speculative_config"]
    schedule = config["draft_len_schedule"]
    assert all(isinstance(k, int) and isinstance(v, int) for k, v in schedule.items())
    assert max(schedule.values()) <= config["max_draft_len"]
    keys = sorted(schedule)
    out = []
    for b in range(1, max_batch + 1):
        i = bisect.bisect_left(keys, b)
        out.append(schedule[keys[i]] if i < len(keys) else 0)
    return out


def _point(b: int, k: int, budget: int) -> export.EngineSetting:
    rate = {"mean": 1.0, "ci_low": None, "ci_high": None}
    return export.EngineSetting("batch", {"batch_size": b, "chain_length": k,
                                          "ddtree_budget": budget, "chain_tokens_per_s": rate,
                                          "ddtree_tokens_per_s": rate,
                                          "plain_tokens_per_s": 1.0},
                                "", MeanCI(1.0, float("nan"), float("nan")))


def test_schedules_parse_back_in_the_engines_syntax():
    points = {1: _point(1, 5, 64), 4: _point(4, 3, 16), 16: _point(16, 0, 2)}
    vllm = export.vllm_schedule(points, max_batch_size=32)
    trt = export.trtllm_schedule(points, max_batch_size=32)
    # the value computed at b_j holds for every batch size above the previous computed one
    want = [5] + [3] * 3 + [0] * 12 + [0] * 16
    assert vllm_lookup(vllm.text, 32) == want
    assert trtllm_lookup(trt.text, 32) == want
    assert trtllm_lookup(trt.text, 40)[32:] == [0] * 8          # past the last key: off
    assert vllm.settings["num_speculative_tokens"] == 5
    assert trt.settings["draft_len_schedule"] == {1: 5, 4: 3, 32: 0}
    dd = export.ddtree_schedule(points)
    assert json.loads(dd.text) == {"ddtree_budget_per_batch_size": {"1": 64, "4": 16, "16": 2}}


def test_the_schedule_of_a_regime_is_the_best_chain_at_each_batch_size():
    req = _request()
    sizes = (1, 4, 16, 64)
    points = export.schedule(req, sizes)
    model = get_cost_model(req.cost)
    for b, p in points.items():
        rows = {(r["drafts"], r["size"]): r["tokens_per_s"] for r in p.table}
        chains = {k: v for (d, k), v in rows.items() if d == "chain"}
        assert p.settings["chain_length"] == max(chains, key=chains.get)
        # K = 0 is no speculation: b tokens from a pass over the b roots, no drafter
        _, verify = batch_costs(model, [req.context_length] * b)
        assert chains[0] == pytest.approx(b / float(verify(b)), rel=1e-12)
        assert p.settings["plain_tokens_per_s"] == pytest.approx(chains[0], rel=1e-12)
        trees = {k: v for (d, k), v in rows.items() if d == "ddtree"}
        assert p.settings["ddtree_tokens_per_s"]["mean"] >= max(trees.values()) * (1 - 1e-12)
    for text, lookup in ((export.vllm_schedule(points).text, vllm_lookup),
                         (export.trtllm_schedule(points).text, trtllm_lookup)):
        dense = lookup(text, 64)
        assert [dense[b - 1] for b in sizes] == [points[b].settings["chain_length"]
                                                 for b in sizes]


def test_the_chosen_rate_is_the_regimes_exact_tau_over_the_batch_cost():
    req = _request(batch_size=8)
    p = export.batch_point(req)
    k = p.settings["chain_length"]
    draft, verify = batch_costs(get_cost_model(req.cost), [req.context_length] * 8)
    seconds = draft + float(verify(8 * (k + 1))) if k else float(verify(8))
    want = 8 * p.tau.mean / seconds  # tau = 1 at K = 0
    assert p.settings["chain_tokens_per_s"]["mean"] == pytest.approx(want, rel=1e-12)


def test_a_batch_one_latency_model_is_refused_for_bigger_batches():
    with pytest.raises(ValueError, match="prices batch 1 only; a batch of 4"):
        export.schedule(_request(cost="h200-qwen3-8b"), (1, 4))
    with pytest.raises(ValueError, match="strictly increasing"):
        export.schedule(_request(), (4, 1))


def test_the_command_line_exports_the_schedules(capsys, tmp_path):
    argv = ["small", "--temperature", "0", "--drafter", "block-diffusion", "--contexts", "8",
            "--worlds", "2", "--batch-sizes", "1", "8", "--max-batch-size", "16", "--json",
            "--out", str(tmp_path)]
    assert export.main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert [s["engine"] for s in data["settings"]] == ["vllm-schedule", "trtllm-schedule",
                                                        "ddtree-schedule"]
    assert [p["settings"]["batch_size"] for p in data["points"]] == [1, 8]
    vllm = data["settings"][0]
    assert len(vllm_lookup(vllm["text"], 16)) == 16
    assert trtllm_lookup(data["settings"][1]["text"], 16)[15] == \
        data["points"][1]["settings"]["chain_length"]
    assert json.loads((tmp_path / "export.json").read_text())["points"]


@pytest.mark.parametrize("extra, message", [
    (["--batch-sizes", "1", "4", "--engine", "vllm"], "--engine does not apply with"),
    (["--max-batch-size", "8"], "--max-batch-size applies with --batch-sizes only"),
    (["--batch-sizes", "1", "4", "--cost-model", "h200-qwen3-8b"], "prices batch 1 only"),
])
def test_bad_schedule_arguments_exit_2_with_one_line(extra, message, capsys):
    argv = ["small", "--temperature", "0", "--drafter", "block-diffusion", "--contexts", "4",
            "--worlds", "2", *extra]
    assert export.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_requests_check_their_batch_fields():
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        _request(batch_size=0)
    with pytest.raises(ValueError, match="context_length must be a positive integer"):
        dataclasses.replace(_request(), context_length=0)
    assert np.isfinite(export.batch_point(_request(batch_size=2)).settings["plain_tokens_per_s"])
