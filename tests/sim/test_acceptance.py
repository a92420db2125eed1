"""Acceptance logs (``treespec_sim.acceptance``; ``docs/traces.md``, "Public logs"): the
fixtures written from the documented formats read back to the lengths written, a pickle that
names anything but plain containers is refused unrun, a regime's law is exact, and the fit uses
the histogram."""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from treespec_sim import acceptance, engine, synth
from treespec_sim.calibrate import build_parser as calibrate_parser
from treespec_sim.calibrate import main as calibrate_main
from treespec_sim.stats import mean_ci

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
EXPECTED = json.loads((FIX / "expected.json").read_text())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fixture_reads_back_the_lengths_written(name):
    exp = EXPECTED[name]
    got = {lg.method: lg for lg in acceptance.read_logs(FIX / name)}
    assert set(got) == set(exp["methods"])
    for method, per_response in exp["methods"].items():
        lg = got[method]
        assert lg.lengths.tolist() == [x for r in per_response for x in r]
        assert lg.responses == len(per_response)
        sizes = [len(r) for r in per_response]
        assert np.bincount(lg.sequence).tolist() == sizes
        assert lg.temperature == exp["temperature"]
        assert lg.depth == (None if exp["block_size"] is None else exp["block_size"] - 1)
        assert lg.probs().sum() == pytest.approx(1.0)
        counts = np.bincount(np.concatenate(per_response) - 1)
        assert np.allclose(lg.probs()[: counts.size] * lg.rounds, counts)
    if "budgets" in exp:
        cad = got["caddtree"]
        assert cad.source == "caddtree-traces"
        assert cad.budgets.tolist() == [b for r in exp["budgets"] for b in r]


def test_the_mean_interval_is_over_responses():
    lg = acceptance.read_log(FIX / "ddtree_benchmark.pt", "dflash")
    per = EXPECTED["ddtree_benchmark.pt"]["methods"]["dflash"]
    ci = mean_ci([np.asarray(r, dtype=float) for r in per])
    m = lg.mean()
    assert (m.mean, m.low, m.high) == pytest.approx((ci.mean, ci.low, ci.high))
    assert m.mean == pytest.approx(np.mean([x for r in per for x in r]))


def test_the_default_method_is_the_speculative_one_and_names_are_checked():
    assert acceptance.read_log(FIX / "ddtree_benchmark.pt").method == "ddtree_tb64"
    assert acceptance.read_log(FIX / "caddtree_traces.pt").method == "caddtree"
    with pytest.raises(ValueError, match=r"method 'tb9' is not in .*: baseline, dflash, "
                                         "ddtree_tb64"):
        acceptance.read_log(FIX / "ddtree_benchmark.pt", "tb9")
    def guess(name, method=None):
        return acceptance.guess_method(acceptance.read_log(FIX / name, method))

    assert guess("ddtree_benchmark.pt") == acceptance.Drafted("ddtree", 64, "follow")
    assert guess("ddtree_benchmark.pt", "dflash").method == "chain"
    assert (guess("caddtree_traces.pt").method, guess("caddtree_traces.pt").budget) == (
        "caddtree", 1024)
    with pytest.raises(ValueError, match="autoregressive"):
        guess("ddtree_benchmark.pt", "baseline")


def test_a_pickle_that_names_another_global_is_refused_and_never_run(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(os, "system", lambda *a: ran.append(a))
    with pytest.raises(ValueError, match=r"refuses the global (posix|os|nt)\.system"):
        acceptance.read_logs(FIX / "malicious.pt")
    assert ran == []

    buf = pickle.dumps({"responses": [{"dflash": collections.Counter(a=1)}]}, protocol=2)
    path = tmp_path / "other.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("other/data.pkl", buf)
    with pytest.raises(ValueError, match=r"refuses the global collections\.Counter"):
        acceptance.read_logs(path)


@pytest.mark.parametrize("text, match", [
    ('{"sample": 0, "accept_lengths": [3, 0, 2]}\n', r"line 1: round 1 has acceptance length 0"),
    ('{"sample": 0}\n', r"line 1 is none of the JSON formats read"),
    ("not json\n", r"none of the formats read"),
    ('{"sample": 0, "accept_lengths": [2.5]}\n', r"round 0 has acceptance length 2.5"),
    ('{"sample": 0, "accept_lengths": [2, 4], "accept_len_mean": 2.5}\n',
     r"line 1: accept_len_mean 2.5 is not the mean of its accept_lengths \(3\)"),
])
def test_malformed_logs_are_refused_naming_the_line(tmp_path, text, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        acceptance.read_logs(path)


def test_a_missing_file_and_a_zip_without_a_pickle_are_named(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        acceptance.read_logs(tmp_path / "none.pt")
    path = tmp_path / "empty.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x/version", "3")
    with pytest.raises(ValueError, match=r"without data\.pkl"):
        acceptance.read_logs(path)


def test_tensors_read_as_torch_wrote_them(tmp_path):
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    a = torch.arange(24, dtype=torch.int64).reshape(2, 3, 4)[:, 1:, ::2]  # a strided view
    b = torch.tensor([1.5, -2.25, 3.0], dtype=torch.bfloat16)
    c = torch.tensor([[0.1, 0.2]], dtype=torch.float32)
    path = tmp_path / "t.pt"
    torch.save({"x": SimpleNamespace(a=a, b=b, c=c, n=3)}, path)
    got = acceptance.load_torch_save(path)
    rec = got["x"]
    assert isinstance(rec, acceptance.Record) and rec.n == 3
    assert np.array_equal(rec.a, a.numpy())
    assert np.array_equal(rec.b, b.float().numpy())
    assert np.array_equal(rec.c, c.numpy())


def test_the_regime_law_is_exact_per_context():
    """Under follow, a context's law is its exit mass by depth: it sums to 1 and its mean is
    the round's exact E[tau]; the distribution averages them over the contexts drawn."""
    dist = acceptance.regime_distribution("small", method="ddtree", budget=6, temperature=1.0,
                                    contexts=12, worlds=2, seed=3)
    assert dist.probs.shape == (synth.REGIMES["small"].depth + 1,)
    assert dist.probs.sum() == pytest.approx(1.0)
    k = np.arange(1, dist.probs.size + 1)
    assert np.dot(k, dist.probs) == pytest.approx(dist.taus.mean())
    # the same contexts, walked by hand
    taus = []
    for i, m in ((0, 6), (1, 6)):
        w = synth.make_world("small", seed=3 + i)
        rng = np.random.default_rng([3 + i, 17])
        ctxs = [w.sample_context(rng) for _ in range(m)]
        taus += [engine.run_round(w, c, method="ddtree", budget=6, temperature=1.0, rng=rng,
                                  sample=False).expected_tau for c in ctxs]
    assert dist.taus == pytest.approx(np.array(taus))


def test_compare_reports_distances_that_are_zero_against_itself():
    lg = acceptance.read_log(FIX / "ddtree_benchmark.pt", "dflash")
    dist = acceptance.regime_distribution("small", method="chain", budget=None, contexts=8, seed=0,
                                    depth=15)
    c = acceptance.compare(lg, dist)
    p, q = c.log_probs, c.model_probs
    assert c.tv == pytest.approx(0.5 * np.abs(p - q).sum())
    assert c.ks == pytest.approx(np.abs(np.cumsum(p) - np.cumsum(q)).max())
    same = acceptance.Distribution("self", lg.probs(), lg.lengths.astype(float), lg.sequence,
                             "chain", None, 0.0)
    zero = acceptance.compare(lg, same)
    assert zero.tv == zero.ks == zero.cvm == 0.0
    text = acceptance.compare_markdown(c)
    assert "| τ (tokens per round) |" in text and f"{c.tv:.3f}" in text


def test_the_fit_moves_the_histogram_toward_the_log_and_writes_a_readable_regime(tmp_path):
    """A target drawn from a regime with other knobs: the fit starts from the base's knobs and
    ends nearer the target's histogram (by the objective the docstring names)."""
    base = synth.REGIMES["small"]
    truth = synth.RegimeSpec(**{**base.__dict__, "name": "truth", "mismatch": 0.45,
                                "degradation": 0.9})
    target = acceptance.regime_distribution(truth, method="chain", budget=None, contexts=24,
                                            seed=11)
    fit = acceptance.fit_log(target, base="small", method="chain", budget=None, temperature=0.0,
                             knobs=("mismatch", "degradation"), contexts=24, seed=11,
                             max_evals=25)
    assert fit.comparison.cvm < fit.start_cvm
    assert fit.evals <= 25
    # the objective is the squared CDF gap of the fitted law, recomputed here
    gap = np.cumsum(fit.comparison.log_probs) - np.cumsum(fit.comparison.model_probs)
    assert fit.comparison.cvm == pytest.approx(float((gap ** 2).sum()))
    path = acceptance.write_fit(tmp_path / "fit.json", fit)
    spec = acceptance.resolve_regime(str(path))
    assert spec.mismatch == pytest.approx(fit.knobs["mismatch"])
    again = acceptance.regime_distribution(str(path), method="chain", budget=None, contexts=24,
                                     seed=11)
    assert again.probs == pytest.approx(fit.comparison.model_probs[: again.probs.size])
    with pytest.raises(ValueError, match="knobs: 'nonsense' is not a fittable knob"):
        acceptance.fit_log(target, base="small", method="chain", budget=None, temperature=0.0,
                     knobs=("nonsense",))


def test_calibrate_from_log_fits_and_writes(tmp_path, capsys):
    out = tmp_path / "fitted.json"
    argv = ["--from-log", str(FIX / "jetspec_accum_logp.jsonl"), "--base", "small", "--vocab",
            "8", "--contexts", "8", "--max-evals", "4", "--fit-knobs", "mismatch", "--fit-out",
            str(out)]
    # the JetSpec log does not say its temperature: the fit asks for it, writes nothing
    assert calibrate_main(argv) == 2
    assert "does not say its temperature" in capsys.readouterr().err and not out.exists()
    rc = calibrate_main([*argv, "--log-temperature", "0"])
    assert rc == 0
    data = json.loads(out.read_text())
    (name, entry), = data["regimes"].items()
    assert name == "fit-jetspec_accum_logp"
    assert entry["fit"]["method"] == "ddtree" and entry["fit"]["budget"] == 255
    assert "Σ (CDF gap)²" in capsys.readouterr().out
    assert calibrate_main(["--from-log", str(tmp_path / "none.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_the_logs_command_compares_and_draws(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert acceptance.main(["compare", str(FIX / "caddtree_traces.pt"), "--method", "dflash",
                      "--regime", "small", "--contexts", "6", "--out", str(out)]) == 0
    for f in ("compare.md", "compare.json", "compare.png"):
        assert (out / f).is_file()
    assert acceptance.main(["show", str(FIX / "ddtree_benchmark.pt")]) == 0
    assert "ddtree_tb64: DDTree/TEV benchmark.py --save-path (torch.save); 21 rounds, 3 " \
           "responses" in capsys.readouterr().out
    assert acceptance.main(["compare", str(FIX / "ddtree_benchmark.pt"), "--regime",
                            "nowhere"]) == 2
    assert "unknown regime 'nowhere'" in capsys.readouterr().err


def test_every_option_of_the_logs_command_says_its_default():
    top = acceptance.build_parser()
    subs = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    for parser in subs.choices.values():
        text = parser.format_help()
        for action in parser._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            assert action.help and action.option_strings[-1] in text
            if action.nargs != 0:
                rendered = action.help % {**vars(action), "prog": parser.prog}
                assert "default" in rendered or "required" in rendered, action.option_strings


def test_another_rule_keeps_exact_means_and_samples_the_histogram():
    dist = acceptance.regime_distribution("small", method="ddtree", budget=6, temperature=1.0,
                                    rule="tev", contexts=10, seed=2)
    assert dist.probs.sum() == pytest.approx(1.0)
    # one sampled outcome per context: every row of the law was one-hot, so 10 * probs counts
    assert np.allclose(dist.probs * 10, np.round(dist.probs * 10))
    w = synth.make_world("small", seed=2)
    rng = np.random.default_rng([2, 17])
    ctxs = [w.sample_context(rng) for _ in range(5)]
    exact = [engine.run_round(w, c, method="ddtree", budget=6, rule="tev", temperature=1.0,
                              rng=np.random.default_rng(0), sample=False).expected_tau
             for c in ctxs]
    assert dist.taus[:5] == pytest.approx(np.array(exact))


def test_the_logs_fit_command_writes_the_fitted_regime(tmp_path, capsys):
    out = tmp_path / "f.json"
    assert acceptance.main(["fit", str(FIX / "ddtree_benchmark.pt"), "--log-method", "dflash",
                      "--base", "small", "--vocab", "8", "--contexts", "6", "--max-evals", "3",
                      "--fit-knobs", "degradation", "--fit-out", str(out)]) == 0
    spec = acceptance.resolve_regime(str(out))
    assert spec.depth == 15 and spec.vocab_size == 8  # the log's block depth, the fit's V
    assert "wrote" in capsys.readouterr().out


# ----------------------------------------------------------------------------- distances, fit
def test_a_fit_far_from_the_log_is_flagged_and_one_on_it_is_not():
    lg = acceptance.read_log(FIX / "ddtree_benchmark.pt", "dflash")
    same = acceptance.Distribution("self", lg.probs(), lg.lengths.astype(float), lg.sequence,
                                   "chain", None, 0.0)
    assert acceptance.compare(lg, same).warning() is None
    far = np.zeros(16)
    far[15] = 1.0  # every round commits 16 tokens
    c = acceptance.compare(lg, dataclasses.replace(same, probs=far))
    w = c.warning()
    assert w and f"total variation {c.tv:.3f} > {acceptance.FIT_WARN_TV:g}" in w
    assert f"largest CDF gap {c.ks:.3f} > {acceptance.FIT_WARN_CDF_GAP:g}" in w
    assert c.to_dict()["warning"] == w
    assert "WARNING:" in acceptance.compare_markdown(c)


def test_the_fit_reports_its_distance_and_warns_when_the_regime_cannot_reach_the_log():
    # a law no chain of "small" can produce: half the rounds 1 token, half 5 (all accepted)
    target = acceptance.Distribution("bimodal", np.array([0.5, 0, 0, 0, 0.5]),
                                     np.array([1.0, 5.0]), np.arange(2), "chain", None, 0.0)
    fit = acceptance.fit_log(target, base="small", temperature=0.0, knobs=("mismatch",),
                             contexts=16, seed=3, max_evals=6)
    d = fit.to_dict()
    assert d["tv"] == pytest.approx(fit.comparison.tv) and d["cdf_gap"] == pytest.approx(
        fit.comparison.ks)
    p, q = fit.comparison.log_probs, fit.comparison.model_probs
    assert fit.comparison.tv == pytest.approx(0.5 * np.abs(p - q).sum())
    assert fit.comparison.tv > acceptance.FIT_WARN_TV and fit.warning() is not None


def test_an_engine_log_needs_its_temperature_and_drafter(tmp_path, capsys):
    vllm = str(FIX / "vllm_issue.log")
    assert acceptance.main(["compare", vllm, "--regime", "small", "--drafter",
                            "autoregressive"]) == 2
    assert "does not say its temperature" in capsys.readouterr().err
    assert acceptance.main(["compare", vllm, "--regime", "small", "--temperature", "0"]) == 2
    err = capsys.readouterr().err
    assert "--drafter block-diffusion" in err and "autoregressive" in err
    # a log that says its temperature keeps it
    assert acceptance.main(["compare", str(FIX / "ddtree_benchmark.pt"), "--regime", "small",
                            "--temperature", "1"]) == 2
    assert "the log records T = 0" in capsys.readouterr().err


def test_an_autoregressive_log_is_modelled_by_an_autoregressive_drafter(capsys):
    assert acceptance.main(["compare", str(FIX / "vllm_issue.log"), "--regime", "small",
                            "--temperature", "0", "--drafter", "autoregressive",
                            "--contexts", "8"]) == 0
    out = capsys.readouterr().out
    assert "Model: small (ar-chain@3, T = 0)" in out


# ----------------------------------------------------------------------------- prediction
def _word_class(name: str, **knobs) -> synth.RegimeSpec:
    base = synth.REGIMES["mid-entropy"]
    return dataclasses.replace(base, name=name, vocab_size=1024, n_topics=16,
                               context_burn_in=4, **knobs)


def test_a_prediction_recovers_the_structure_it_came_from_and_spans_the_truth():
    """A chain's law drawn from structure A with more near misses: refitting A through
    variant_noise finds about the truth's value, its law is consistent with the log, and the
    interval of DDTree's tau contains the truth's, measured on other worlds and contexts."""
    a = _word_class("wc-a")
    b = _word_class("wc-b", sharpness=2.0, successor_decay=1.0)
    truth = dataclasses.replace(a, variant_noise=1.2)
    target = acceptance.regime_distribution(truth, method="chain", budget=None, contexts=512,
                                            worlds=8, seed=40)
    p = acceptance.predict(target, temperature=0.0, prior=[a, b], knobs=["variant_noise"],
                           method="ddtree", budget=8, contexts=256, worlds=8, seed=0)
    ca = next(c for c in p.candidates if c.base == "wc-a")
    # the log is one draw of 8 worlds: the knob comes back within the worlds' spread, and the
    # law within the log's own sampling noise (other worlds and contexts than the log's)
    assert ca.consistent and 0 < ca.comparison.tv and abs(ca.value - 1.2) < 0.5
    true_tau = acceptance.regime_distribution(truth, method="ddtree", budget=8, contexts=512,
                                              worlds=8, seed=90).taus.mean()
    assert p.tau_low <= true_tau <= p.tau_high
    assert p.tau_low <= ca.tau.low and ca.tau.high <= p.tau_high
    d = p.to_dict()
    assert set(d["fit"]) >= {"tv", "cdf_gap"}
    assert set(d["prediction"]) >= {"method", "budget", "tau", "tau_low", "tau_high"}
    assert d["prediction"]["method"] == "ddtree" and d["prediction"]["budget"] == 8
    # the gain is paired per world: tau = the log's mean x gain
    assert ca.tau.mean == pytest.approx(target.taus.mean() * ca.gain.mean)


def test_a_structure_that_cannot_reach_the_log_says_why_and_is_left_out():
    a = _word_class("wc-a")
    target = 1.0 + 1e-9  # a mean no chain with any near misses reaches from below 1
    with pytest.raises(ValueError, match="no structure reaches the log's mean"):
        acceptance.predict(float(target) + 20.0, temperature=0.0, prior=[a],
                           knobs=["variant_noise"], budget=8, contexts=16, worlds=2)
    small = synth.REGIMES["small"]  # no word classes: no hard misses
    p = acceptance.predict(2.0, temperature=0.0, prior=[a, small], knobs=["hard_miss"],
                           budget=8, contexts=32, worlds=2)
    bad = next(c for c in p.candidates if c.base == "small")
    assert bad.spec is None and "no hard_miss" in bad.reason
    assert [p.candidates[i].base for i in p.used] == ["wc-a"]


def test_the_compare_command_prints_the_issue_s_json_shape(capsys, monkeypatch, tmp_path):
    for spec in (_word_class("wc-a"), _word_class("wc-b", sharpness=2.0)):
        monkeypatch.setitem(synth.REGIMES, spec.name, spec)
    assert acceptance.main(["compare", str(FIX / "vllm_metrics.prom"), "--temperature", "0",
                            "--drafter", "block-diffusion", "--predict", "ddtree", "--budget",
                            "16", "--cost-model", "h200-qwen3-8b", "--prior", "wc-a", "wc-b",
                            "--contexts", "24", "--worlds", "2", "--json", "--out",
                            str(tmp_path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"tv", "cdf_gap"} <= set(data["fit"])
    pred = data["prediction"]
    assert pred["method"] == "ddtree" and pred["budget"] == 16
    assert pred["tau_low"] <= pred["tau"] <= pred["tau_high"]
    assert pred["tokens_per_s_low"] <= pred["tokens_per_s"] <= pred["tokens_per_s_high"]
    assert data["log"]["width"] == 3 and data["log"]["determines_law"]
    # the closest structure, refitted, is a regime file the sweep, --regime and export read
    spec = synth.regime_file(tmp_path / "regime.json")
    assert spec.name == "fit-vllm_metrics"
    assert getattr(spec, data["fit"]["knob"]) == pytest.approx(data["fit"]["value"])
    saved = json.loads((tmp_path / "regime.json").read_text())["regimes"][spec.name]["fit"]
    assert saved["drafter"] == "block-diffusion" and saved["temperature"] == 0


def test_every_command_that_reads_a_log_takes_the_same_option_names():
    """--log-method and --log-temperature in acceptance compare, acceptance fit and calibrate
    --from-log; compare and fit also take --method and --temperature (issue 42)."""
    parse = acceptance.build_parser().parse_args
    compare = parse(["compare", "f", "--regime", "r", "--log-method", "dflash",
                     "--log-temperature", "1"])
    short = parse(["compare", "f", "--regime", "r", "--method", "dflash", "--temperature", "1"])
    fit = parse(["fit", "f", "--method", "dflash", "--temperature", "1", "--fit-out", "x.json"])
    cal = calibrate_parser().parse_args(["--from-log", "f", "--log-method", "dflash",
                                         "--log-temperature", "1"])
    for args in (compare, short, fit, cal):
        assert (args.log_method, args.log_temperature) == ("dflash", 1.0)
    assert "--fit-out" in acceptance.__doc__ and "--base math500 --out" not in acceptance.__doc__


def test_a_temperature_that_contradicts_the_log_is_refused_in_every_command(capsys, tmp_path):
    pt = str(FIX / "ddtree_benchmark.pt")
    log = acceptance.read_log(pt, None)
    assert log.temperature is not None  # the fixture records its temperature
    other = "1" if log.temperature == 0.0 else "0"
    for argv in (["compare", pt, "--regime", "small", "--contexts", "4",
                  "--log-temperature", other],
                 ["fit", pt, "--temperature", other, "--fit-out", str(tmp_path / "f.json")]):
        assert acceptance.main(argv) == 2
        err = capsys.readouterr().err
        assert "the log records T =" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "f.json").exists()
