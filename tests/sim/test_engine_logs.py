"""The engines' acceptance logs (``treespec_sim.acceptance_readers``; ``docs/traces.md``,
"Public logs"): each format read from its fixture back to what was written
(``tests/fixtures/logs/engine_expected.json``), what it determines and does not recorded, and
every malformed or impossible variant refused in one line naming the line and the field, with
exit status 2 from the command line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from treespec_sim import acceptance
from treespec_sim.acceptance_readers import DEFAULT_WIDTH

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
EXPECTED = json.loads((FIX / "engine_expected.json").read_text())


def _units(log) -> list[list[float]]:
    return [list(np.trim_zeros(row, "b")) for row in log.counts]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_engine_fixture_reads_back_what_was_written(name):
    exp = EXPECTED[name]
    (log,) = acceptance.read_logs(FIX / name)
    assert log.source == exp["format"]
    if exp["width"] is not None:
        assert log.width == exp["width"]
    if "units" in exp:  # per unit: steps per accepted drafts j (tau = j + 1)
        assert log.determines_law
        assert _units(log) == [list(np.trim_zeros(np.asarray(u, float), "b"))
                               for u in exp["units"]]
        total = np.sum([np.pad(u, (0, 16 - len(u))) for u in exp["units"]], axis=0)
        assert log.probs(16) == pytest.approx(total / total.sum())
        taus = np.arange(1, 17)
        assert log.mean().mean == pytest.approx(np.dot(taus, total) / total.sum())
    if "rates" in exp:  # vLLM lines: drafts x (r_{j-1} - r_j), the rates as logged
        assert log.responses == exp["n_units"]
        for row, rates, drafts in zip(log.counts, exp["rates"], exp["drafts"], strict=True):
            tail = np.concatenate([[1.0], rates, [0.0]])
            assert row[: len(rates) + 1] == pytest.approx(drafts * (tail[:-1] - tail[1:]))
    if "lengths" in exp:
        assert log.lengths.tolist() == [x for u in exp["lengths"] for x in u]
        assert log.responses == len(exp["lengths"])
    if "means" in exp:
        assert not log.determines_law and log.rounds is None
        assert log.mean().mean == pytest.approx(np.mean(exp["means"]))
        with pytest.raises(ValueError, match="the mean tokens per round, not their law"):
            log.probs()
    if "temperature" in exp:
        assert log.temperature == exp["temperature"]
    assert log.notes and "law" in log.notes[0]


def test_the_issue_s_vllm_line_gives_a_chain_law_and_its_mean():
    (log,) = acceptance.read_logs(FIX / "vllm_issue.log")
    drafts = 14322 / 3
    assert log.rounds == pytest.approx(drafts)
    assert log.probs() == pytest.approx([1 - 0.906, 0.906 - 0.497, 0.497 - 0.203, 0.203])
    assert log.mean().mean == pytest.approx(1 + 0.906 + 0.497 + 0.203)
    assert abs(log.mean().mean - (1 + 7667 / drafts)) < 0.005  # the logged mean, rounded
    assert log.accept_rate == pytest.approx(7667 / 14322)
    assert any("not a per-node rate" in n or "Drafted / k" in n for n in log.notes)


def test_a_single_unit_s_mean_has_no_interval_and_never_prints_nan(capsys):
    (log,) = acceptance.read_logs(FIX / "sglang_meta_info.json")
    m = log.mean()
    assert log.responses == 1 and not m.has_interval
    assert m.to_dict()["ci_low"] is None and m.to_dict()["ci_high"] is None
    assert acceptance.main(["show", str(FIX / "sglang_meta_info.json")]) == 0
    out = capsys.readouterr().out
    assert "(one request: no interval)" in out and "nan" not in out
    # two units do have one
    (two,) = acceptance.read_logs(FIX / "sglang_generate.jsonl")
    assert two.mean().has_interval


def test_sglang_s_width_comes_from_its_proposed_drafts_and_rates_are_not_per_node():
    (log,) = acceptance.read_logs(FIX / "sglang_openai.jsonl")
    assert log.width == 4
    (meta,) = acceptance.read_logs(FIX / "sglang_meta_info.json")
    assert meta.width == 15
    (gen,) = acceptance.read_logs(FIX / "sglang_generate.jsonl")
    assert gen.width is None  # no proposed-draft count: the default width checks tau only
    assert any("not a per-node rate" in n for n in gen.notes)
    with pytest.raises(ValueError, match="the log proposes 4 drafts per step"):
        acceptance.read_logs(FIX / "sglang_openai.jsonl", width=5)


def test_what_each_log_is_modelled_as():
    for name, drafted in [("vllm_issue.log", "chain@3"), ("vllm_metrics.prom", "chain@3"),
                          ("aiperf_profile_export.jsonl", "chain@5"),
                          ("sglang_openai.jsonl", "chain@4"),
                          ("spec_bench.jsonl", "chain")]:
        (log,) = acceptance.read_logs(FIX / name)
        assert acceptance.guess_method(log).label == drafted, name
    d = acceptance.guess_method(acceptance.read_log(FIX / "vllm_issue.log"), "autoregressive")
    assert d.run_args() == ("ar-chain", 3)
    assert acceptance.Drafted("chain", 3).run_args() == ("chain-prefix", 3)
    assert acceptance.Drafted.parse("ddtree@64", "autoregressive").run_args() == (
        "ar-ddtree", 64)
    with pytest.raises(ValueError, match="not defined here for an autoregressive"):
        acceptance.Drafted("caddtree", 64, drafter="autoregressive").run_args()


# ----------------------------------------------------------------------------- refusals
_VLLM = ("INFO x [metrics.py:1] SpecDecoding metrics: Mean acceptance length: {mean}, Accepted "
         "throughput: 1.00 tokens/s, Drafted throughput: 2.00 tokens/s, Accepted: {acc} tokens, "
         "Drafted: {drafted} tokens, Per-position acceptance rate: {rates}, Avg Draft "
         "acceptance rate: 50.0%\n")


def _vllm(mean="2.61", acc="7667", drafted="14322", rates="0.906, 0.497, 0.203") -> str:
    return _VLLM.format(mean=mean, acc=acc, drafted=drafted, rates=rates)


def _prom(drafts=100.0, pos=(80.0, 50.0), acc=130.0, dtok=200.0) -> str:
    out = [f"vllm:spec_decode_num_drafts_total{{engine=\"0\"}} {drafts}",
           f"vllm:spec_decode_num_draft_tokens_total{{engine=\"0\"}} {dtok}",
           f"vllm:spec_decode_num_accepted_tokens_total{{engine=\"0\"}} {acc}"]
    out += [f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine=\"0\",position=\"{i}\"}}"
            f" {c}" for i, c in enumerate(pos)]
    return "\n".join(out) + "\n"


def _vllm_req(**over) -> str:
    sd = {"mean_acceptance_length": 2.0, "draft_acceptance_rate": 0.5,
          "acceptance_histogram": [1, 1, 1], "num_spec_steps": 3,
          "num_accepted_draft_tokens": 3, "num_draft_tokens": 6, "num_spec_tokens": 2}
    sd.update(over)
    return json.dumps({"choices": [], "metrics": {"speculative_decoding": sd}}) + "\n"


def _sglang(**over) -> str:
    mi = {"completion_tokens": 9, "spec_verify_ct": 4, "spec_accept_length": 2.25,
          "spec_accept_rate": 0.4, "spec_accept_histogram": [1, 2, 1]}
    mi.update(over)
    return json.dumps({"text": "x", "meta_info": mi}) + "\n"


def _aiperf(**over) -> str:
    sa = {"engine": "vllm", "mean_acceptance_length": 2.0, "draft_acceptance_rate": 0.5,
          "acceptance_histogram": {"0": 1, "2": 1}, "num_accepted_draft_tokens": 2,
          "num_draft_tokens": 4, "num_spec_steps": 2, "num_spec_tokens": 2}
    sa.update(over)
    return json.dumps({"metadata": {}, "metrics": {}, "spec_decode_acceptance": sa}) + "\n"


BAD = {
    "jsonl-tau-above-L": ("x.jsonl", '{"accept_lengths": [1, 2, 99]}\n',
                          r"line 1: accept_lengths has tau = 99 tokens in a round, more than "
                          r"L \+ 1 = 16"),
    "jsonl-tau-zero": ("x.jsonl", '{"accept_lengths": [3, 0, 2]}\n',
                       r"line 1: round 1 has acceptance length 0"),
    "vllm-rate-above-1": ("v.log", _vllm(rates="1.2, 0.497, 0.203"),
                          r"line 1: Per-position acceptance rate\[0\] = 1.2 is not a rate"),
    "vllm-rates-rising": ("v.log", _vllm(rates="0.497, 0.906, 0.203"),
                          r"line 1: Per-position acceptance rate\[1\] = 0.906 is above"),
    "vllm-accepted-above-drafted": ("v.log", _vllm(acc="20000"),
                                    r"line 1: Accepted = 20000 tokens is more than Drafted"),
    "vllm-rates-contradict-counts": ("v.log", _vllm(mean="1.50", acc="2387"),
                                     r"line 1: Per-position acceptance rate sums to 1.6060"),
    "vllm-mean-above-possible": ("v.log", _vllm(mean="3.50"),
                                 r"line 1: Mean acceptance length 3.5 is above"),
    "vllm-negative-count": ("v.log", _vllm(acc="-5"),
                            r"line 1: Accepted = -5.0 is not a non-negative integer count"),
    "vllm-width-changes": ("v.log", _vllm() + _vllm(rates="0.906, 0.497, 0.203, 0.1"),
                           r"line 2: 4 per-position rates, where the earlier lines have 3"),
    "prom-negative-counter": ("m.prom", _prom(drafts=-1.0),
                              r"line 1: vllm:spec_decode_num_drafts_total = -1.0 is not a "
                              r"non-negative integer count"),
    "prom-per-pos-rising": ("m.prom", _prom(pos=(50.0, 80.0)),
                            r"line 5: accepted_tokens_per_pos at position 1 is 80, more than "
                            r"at position 0 \(50\)"),
    "prom-per-pos-above-drafts": ("m.prom", _prom(pos=(120.0, 10.0)),
                                  r"line 4: accepted_tokens_per_pos at position 0 is 120, more "
                                  r"than at vllm:spec_decode_num_drafts_total"),
    "prom-accepted-not-the-sum": ("m.prom", _prom(acc=131.0),
                                  r"line 3: vllm:spec_decode_num_accepted_tokens_total = 131 is "
                                  r"not the sum"),
    "vllm-request-hist-vs-steps": ("r.jsonl", _vllm_req(num_spec_steps=4),
                                   r"line 1: metrics.speculative_decoding.acceptance_histogram "
                                   r"sums to 3 steps, but num_spec_steps = 4"),
    "vllm-request-negative": ("r.jsonl", _vllm_req(acceptance_histogram=[2, -1, 1]),
                              r"line 1: metrics.speculative_decoding.acceptance_histogram\[1\] "
                              r"= -1 is not a non-negative integer count"),
    "vllm-request-hist-too-long": ("r.jsonl", _vllm_req(acceptance_histogram=[1, 1, 0, 1],
                                                        num_accepted_draft_tokens=4),
                                   r"acceptance_histogram has 4 entries, more than "
                                   r"num_spec_tokens \+ 1 = 3"),
    "vllm-request-mean-wrong": ("r.jsonl", _vllm_req(mean_acceptance_length=2.5),
                                r"mean_acceptance_length = 2.5 is not 1 \+ "),
    "vllm-request-rate-above-1": ("r.jsonl", _vllm_req(draft_acceptance_rate=1.5),
                                  r"draft_acceptance_rate = 1.5 is not a rate in \[0, 1\]"),
    "sglang-hist-vs-verify": ("s.jsonl", _sglang(spec_verify_ct=5),
                              r"line 1: meta_info.spec_accept_histogram sums to 4 steps, but "
                              r"spec_verify_ct = 5"),
    "sglang-rate-above-1": ("s.jsonl", _sglang(spec_accept_rate=1.4),
                            r"line 1: meta_info.spec_accept_rate = 1.4 is not a rate"),
    "sglang-mean-above-L": ("s.jsonl", _sglang(spec_accept_histogram=None, spec_accept_length=40),
                            r"line 1: meta_info.spec_accept_length = 40 tokens per round, more "
                            r"than L \+ 1 = 16"),
    "sglang-hist-above-L": ("s.jsonl", _sglang(spec_accept_histogram=[0] * 20 + [4]),
                            r"line 1: meta_info.spec_accept_histogram has tau = 21"),
    "sglang-log-mean-below-1": ("s.log", "Decode batch. #running-req: 1, accept len: 0.50, \n",
                                r"line 1: accept len = 0.5 is not a mean of at least 1"),
    "sglang-log-rate-above-1": ("s.log", "Decode batch. #running-req: 1, accept len: 2.50, "
                                         "accept rate: 1.50, \n",
                                r"line 1: accept rate = 1.5 is not a rate"),
    "spec-bench-tau-above-L": ("b.jsonl", json.dumps({"model_id": "m", "choices": [
        {"accept_lengths": [1, 40]}]}) + "\n", r"line 1: choices\[0\].accept_lengths has tau = 40"),
    "aiperf-key-above-width": ("a.jsonl", _aiperf(acceptance_histogram={"0": 1, "7": 1},
                                                  num_accepted_draft_tokens=7),
                               r"line 1: spec_decode_acceptance.acceptance_histogram has key 7: "
                               r"a round that accepted 7 drafts commits 8 tokens, more than "
                               r"L \+ 1 = 3"),
    "aiperf-accepted-above-drafted": ("a.jsonl", _aiperf(num_draft_tokens=1),
                                      r"num_accepted_draft_tokens = 2 is more than "
                                      r"num_draft_tokens = 1"),
    "aiperf-sum-vs-steps": ("a.jsonl", _aiperf(num_spec_steps=3),
                            r"acceptance_histogram sums to 2 steps, but num_spec_steps = 3"),
    "mixed-formats": ("m.jsonl", _sglang() + _vllm_req(),
                      r"line 2 is not a SGLang /generate meta_info"),
    "not-a-log": ("n.txt", "hello\nworld\n", r"none of the formats read"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_malformed_or_impossible_log_is_refused_in_one_line_with_exit_2(case, tmp_path,
                                                                          capsys):
    name, text, match = BAD[case]
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        acceptance.read_logs(path)
    assert acceptance.main(["show", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0], err


def test_the_default_width_is_stated_and_a_given_width_is_checked(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"accept_lengths": [1, 5, 2]}\n')
    with pytest.raises(ValueError, match=r"L = 3: the width given"):
        acceptance.read_logs(path, width=3)
    assert acceptance.read_logs(path, width=4)[0].max_tau == 5
    assert f"L = {DEFAULT_WIDTH}, a DFlash block of 16" in _err(tmp_path, "[1, 2, 17]")
    with pytest.raises(ValueError, match="the log states L = 3"):
        acceptance.read_logs(FIX / "vllm_issue.log", width=5)


def _err(tmp_path, lengths: str) -> str:
    path = tmp_path / "y.jsonl"
    path.write_text('{"accept_lengths": ' + lengths + "}\n")
    try:
        acceptance.read_logs(path)
    except ValueError as exc:
        return str(exc)
    return ""


def test_mean_only_logs_compare_by_their_mean_and_say_so():
    (log,) = acceptance.read_logs(FIX / "sglang_server.log")
    dist = acceptance.regime_distribution("small", method="chain", budget=None, contexts=6)
    c = acceptance.compare(log, dist)
    assert not c.law and math.isnan(c.tv) and c.warning() is None
    text = acceptance.compare_markdown(c, unit="window")
    assert "means only" in text and "nan" not in text
    assert c.to_dict()["tv"] is None
