"""Settings back out (``treespec_sim.export``): the best static tree is the best of every static
tree of a small rank-path set (``docs/theory/static_tree.md``), its ``tau`` is what the round
loop measures, and each engine's export parses back in the engine's documented syntax."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import shlex

import numpy as np
import pytest
import yaml

from treespec_sim import acceptance, export, synth
from treespec_sim.marginals import ranked_candidates
from treespec_sim.methods import Method, registered, rules_for
from treespec_sim.policies import Draft
from treespec_sim.verify import expected_length


def _request(**kw) -> export.ExportRequest:
    spec = dataclasses.replace(synth.REGIMES["small"], depth=3)
    base = {"regime": spec, "drafter": "block-diffusion", "temperature": 1.0, "budget": 4,
            "contexts": 16, "worlds": 2, "seed": 5, "max_rank": 2}
    base.update(kw)
    return export.ExportRequest(**base)


def _closed_subsets(universe, b):
    for sub in itertools.combinations(universe, b):
        s = set(sub)
        if all(p[:-1] in s or len(p) == 1 for p in sub):
            yield sorted(sub, key=lambda p: (len(p), p))


def _marginal_tree_method(paths) -> Method:
    """A round-loop method drafting the static tree ``paths`` from a context's marginals."""
    def build(req):
        lq = np.asarray(req.log_q, dtype=np.float64)

        def ranked(depth, parents):
            return ranked_candidates(lq[depth - 1], -np.inf, 2)[0]
        return Draft(export.rank_tree(paths, ranked, req.root_token))
    return Method("static-tree", build, rules_for("deterministic"))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_best_static_tree_is_the_best_of_every_static_tree(temperature):
    """Brute force over every prefix-closed set of 4 rank paths (ranks < 2, depth <= 3): each
    set's tau measured by the round loop (exact E[tau] under follow, per context), against the
    best-first tree's."""
    req = _request(temperature=temperature)
    best = export.best_static_tree(req)
    ws = req.worlds_set()
    universe = [p for d in (1, 2, 3) for p in itertools.product(range(2), repeat=d)]
    taus = {}
    for sub in _closed_subsets(universe, 4):
        with registered(_marginal_tree_method(sub)) as m:
            law = ws.law(method=m.name, budget=4, temperature=temperature)
        taus[tuple(sub)] = float(law.taus.mean())
    assert len(taus) > 20
    top = max(taus.values())
    assert best.tau == pytest.approx(top, abs=1e-12)
    mine = tuple(sorted(best.paths, key=lambda p: (len(p), p)))
    assert taus[mine] == pytest.approx(best.tau, abs=1e-12)
    # and the additive formula's terms never grow from a parent to a child
    a = dict(zip(best.paths, best.acceptance, strict=True))
    assert all(a[p] <= a[p[:-1]] + 1e-15 for p in best.paths if len(p) > 1)


def test_an_autoregressive_static_tree_is_what_its_rounds_give():
    """Ranks of the conditional given the parent: the tree's 1 + sum a(u) equals the mean of
    the exact expected lengths of the per-context trees."""
    spec = dataclasses.replace(synth.REGIMES["small"], correction_quality=1.0)
    req = _request(regime=spec, drafter="autoregressive", budget=6, max_rank=3)
    best = export.best_static_tree(req)
    ws = req.worlds_set()
    vals = []
    for w, cs in zip(ws.ref, ws.contexts, strict=True):
        for c in cs:
            def ranked(depth, parents, w=w, c=c):
                parent = parents[-1] if parents else c.last_token
                row = w.draft_conditional(c, depth, parent)
                tok, _ = ranked_candidates(np.log(np.maximum(row, 1e-300)), -np.inf, 3)
                return tok
            tree = export.rank_tree(best.paths, ranked, c.last_token)
            vals.append(expected_length(tree, w.target_rows(c, tree, 1.0), rule="follow"))
    assert best.tau == pytest.approx(np.mean(vals), rel=1e-10)


def test_each_engine_s_export_parses_back_in_its_syntax():
    req = _request(budget=6, max_rank=3, contexts=24)
    out = {s.engine: s for s in export.export(req)}
    # TensorRT-LLM: YAML for --extra_llm_api_options, eagle_choices as List[List[int]]
    cfg = yaml.safe_load(out["trtllm"].text)["speculative_config"]
    choices = cfg["eagle_choices"]
    assert cfg["decoding_type"] == "Eagle" and len(choices) == 6
    assert all(isinstance(c, list) and all(isinstance(r, int) for r in c) for c in choices)
    assert all(len(c) == 1 or c[:-1] in choices for c in choices)  # prefix-closed
    assert cfg["max_draft_len"] == max(len(c) for c in choices)
    assert sorted(map(tuple, choices)) == sorted(export.best_static_tree(req).paths)
    # SGLang: the three flags, as its argument parser takes them
    ap = argparse.ArgumentParser()
    for flag in ("--speculative-num-steps", "--speculative-eagle-topk",
                 "--speculative-num-draft-tokens"):
        ap.add_argument(flag, type=int, required=True)
    ns = ap.parse_args(shlex.split(out["sglang"].text))
    assert ns.speculative_num_draft_tokens == 7
    assert (ns.speculative_num_steps, ns.speculative_eagle_topk, 7) in \
        export.sglang_triples(6, req.regime.depth)
    rows = out["sglang"].table
    assert out["sglang"].tau.mean == max(r["tau"] for r in rows)
    # vLLM: speculative_config JSON with synthetic rates, non-increasing, in [0, 1]
    sc = json.loads(out["vllm"].text)["speculative_config"]
    rates = sc["synthetic_acceptance_rates"]
    assert sc["rejection_sample_method"] == "synthetic"
    assert len(rates) == sc["num_speculative_tokens"] == req.regime.depth
    assert all(0 <= b <= a <= 1 for a, b in zip([1.0, *rates], rates, strict=False))
    # the rates are the chain's law: 1 + sum of P(at least i + 1 accepted) is its mean
    assert 1 + sum(rates) == pytest.approx(out["vllm"].tau.mean, abs=5e-4 * len(rates))
    # SGLang DDTree: one integer flag, the budget with the most tokens/s of its table
    ap = argparse.ArgumentParser()
    ap.add_argument("--speculative-ddtree-budget", type=int, required=True)
    b = ap.parse_args(shlex.split(out["sglang-ddtree"].text)).speculative_ddtree_budget
    best = max(out["sglang-ddtree"].table, key=lambda r: r["tokens_per_s"])
    assert b == best["budget"] and b in export.DDTREE_BUDGETS


def test_the_export_command_writes_json_and_refuses_a_missing_drafter(tmp_path, capsys):
    assert export.main(["small", "--temperature", "0", "--budget", "3", "--contexts", "8",
                        "--worlds", "2", "--engine", "trtllm", "vllm"]) == 2
    assert "--drafter" in capsys.readouterr().err
    assert export.main(["small", "--temperature", "0", "--drafter", "block-diffusion",
                        "--budget", "3", "--contexts", "8", "--worlds", "2", "--engine",
                        "trtllm", "vllm", "--json", "--out", str(tmp_path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [s["engine"] for s in data["settings"]] == ["trtllm", "vllm"]
    assert json.loads((tmp_path / "export.json").read_text()) == data


def test_a_fitted_file_gives_its_drafter_and_its_chain_length(tmp_path, capsys):
    """A regime fitted to a vLLM log of a 3-token chain: export reads the drafter and
    num_speculative_tokens = 3 from the file, and no tau interval reaches below 1 token."""
    spec = dataclasses.replace(synth.REGIMES["small"], name="fit-k3")
    path = acceptance.write_regime(tmp_path / "fit.json", spec, {
        "drafter": "autoregressive", "temperature": 0.0, "method": "chain", "budget": 3})
    assert export.main([str(path), "--temperature", "0", "--budget", "3", "--contexts", "8",
                        "--worlds", "2", "--engine", "vllm", "trtllm", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["drafter"] == "autoregressive"
    vllm = next(s for s in data["settings"] if s["engine"] == "vllm")
    sc = json.loads(vllm["text"])["speculative_config"]
    assert sc["num_speculative_tokens"] == 3 and len(sc["synthetic_acceptance_rates"]) == 3
    for s in data["settings"]:
        assert s["tau"]["ci_low"] is None or s["tau"]["ci_low"] >= 1.0
    # a width given on the command line wins
    assert export.main([str(path), "--temperature", "0", "--budget", "3", "--contexts", "8",
                        "--worlds", "2", "--engine", "vllm", "--width", "2", "--json"]) == 0
    sc = json.loads(json.loads(capsys.readouterr().out)["settings"][0]["text"])
    assert sc["speculative_config"]["num_speculative_tokens"] == 2
