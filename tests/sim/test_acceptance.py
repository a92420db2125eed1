"""Public logs (``treespec_sim.logs``; ``docs/traces.md``, "Public logs"): the fixtures written
from the documented formats read back to the lengths written, a pickle that names anything but
plain containers is refused unrun, a regime's law is exact, and the fit uses the histogram."""

from __future__ import annotations

import argparse
import collections
import json
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from treespec_sim import acceptance, engine, synth
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
    assert acceptance.guess_method(acceptance.read_log(FIX / "ddtree_benchmark.pt")) == ("ddtree", 64,
                                                                               "follow")
    assert acceptance.guess_method(acceptance.read_log(FIX / "ddtree_benchmark.pt", "dflash"))[0] == "chain"
    assert acceptance.guess_method(acceptance.read_log(FIX / "caddtree_traces.pt"))[:2] == ("caddtree", 1024)
    with pytest.raises(ValueError, match="autoregressive"):
        acceptance.guess_method(acceptance.read_log(FIX / "ddtree_benchmark.pt", "baseline"))


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
    ('{"sample": 0}\n', r"line 1 has no accept_lengths"),
    ("not json\n", r"neither a torch.save file"),
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
    target = acceptance.regime_distribution(truth, method="chain", budget=None, contexts=24, seed=11)
    fit = acceptance.fit_log(target, base="small", method="chain", budget=None, temperature=0.0,
                       knobs=("mismatch", "degradation"), contexts=24, seed=11, max_evals=25)
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
    rc = calibrate_main(["--from-log", str(FIX / "jetspec_accum_logp.jsonl"), "--base", "small",
                         "--vocab", "8", "--contexts", "8", "--max-evals", "4",
                         "--fit-knobs", "mismatch", "--fit-out", str(out)])
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
    assert "ddtree_tb64: benchmark, 21 rounds, 3 responses" in capsys.readouterr().out
    assert acceptance.main(["compare", str(FIX / "ddtree_benchmark.pt"), "--regime", "nowhere"]) == 2
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
