r"""Experiments on real models: CaDDTree on measured costs, traces, simulator vs reality.

``python -m real_models.experiments caddtree [--cost FILE] [--prompts 32] [--out DIR]``
    Greedy (``T = 0``) decoding of the held-out prompts with DDTree at every budget of a grid,
    CaDDTree and the exhaustive rule (``max_budget`` = the grid's largest) with the measured
    latency file, and autoregressive decoding. All methods emit the same tokens at ``T = 0``
    (greedy identity), so only the time differs; methods are run interleaved per prompt (in a
    rotating order) so machine drift hits all alike. Throughput is ``sum tokens / sum decode
    seconds`` over prompts; the oracle budget is the fixed budget with the best throughput on
    these very runs (chosen after the fact); intervals are 95% paired percentile-bootstrap
    intervals over prompts. Also reported: the throughput the cost model predicts for the same
    rounds (``sum tau / sum (C_d + C_v(B + 1, ℓ))``).

``python -m real_models.experiments traces [--budget 256] [--temperature T] --out FILE.npz``
    Decodes the held-out prompts with DDTree at ``--budget`` and records, per round, the
    drafter's ``log_q`` (L, V), the tree (parent, token; node ``i`` = DDTree's ``i``-th pop) and
    the target's edge probabilities on it at temperature ``T``: everything the simulator's exact
    analysis needs (:func:`replay`).

``python -m real_models.experiments tsubame [--temperatures 0.6 1] [--budgets 16 64] --out DIR``
    Sampled trees at ``T > 0`` on the real drafter: DDTree (follow), the argmax chain, the
    marginal and the corrected sampled chains (rrs), Tsubame with marginal proposals
    (``sampled-ddtree``: DDTree's shape filled from the tempered marginals, rrsw) and with the
    drafter's conditional correction (``tsubame-rrsw``, rrsw), decoding the held-out prompts.
    Per round the exact :math:`E[\tau]` of its tree; 95% t-intervals over prompts. Modelled
    tokens/s charge every correction pass the round made
    (:attr:`~real_models.backend.DecodeState.corrections`): ``C_d + C_v(n + 1) + passes * C_d``
    with the latency file's ``C_d``/``C_v`` (``docs/real_models.md``, "The conditional
    correction"), and, for comparison, one batched pass per corrected depth instead
    (``levels * C_d``) and no correction cost at all.

``python -m real_models.experiments simvsreal --traces FILE.npz [--budgets ...] --out DIR``
    Replays the traces (τ(B) for every budget from the nested tree; exit-law decomposition at
    each budget), decodes the same prompts for real at each budget (realised τ; the exact exit
    decomposition of each real round's tree), fits a synthetic regime to the traces, and
    reports the prediction error per budget.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from treespec_sim import DraftTree, engine
from treespec_sim.cli import (
    OneLineParser,
    add_budgets,
    add_debug,
    add_device,
    add_new_tokens,
    add_out,
    add_prompts,
    add_repeats,
    add_seed,
    add_temperature,
    add_threads,
    positive_int,
    positive_temperature,
    run_subcommand,
)
from treespec_sim.cost import round_time
from treespec_sim.exits import EXIT_CAUSES
from treespec_sim.files import atomic_write_text, read_npz
from treespec_sim.stats import mean_ci, paired_bootstrap, percentile_ci, ratio_ci
from treespec_sim.synth import get_regime, make_world

from ._decode import decode, resolve_cost, run_from
from ._deps import require
from .backend import prefill
from .bundle import check_device, load
from .profile import CPU_TINY
from .validate import load_prompts

#: The repository root: files under it are named relative to it in what a run writes.
_ROOT = Path(__file__).resolve().parents[1]


def _shown(path) -> str:
    """``path`` as a run record names it: relative to the repository root when inside it (a
    committed page must not carry the machine's absolute paths)."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(_ROOT))
    except ValueError:
        return str(path)


def _shown_notes(notes: Sequence[str], path) -> list[str]:
    """``notes`` with ``path``'s absolute form replaced by :func:`_shown`'s."""
    full = str(Path(path).resolve())
    return [n.replace(full, _shown(path)) for n in notes]


torch = require("torch")

__all__ = ["TSUBAME_METHODS", "build_parser", "caddtree_experiment", "main", "record_traces",
           "replay", "tsubame_experiment", "tsubame_table"]

CADDTREE_GRID = (4, 8, 16, 32, 64, 128, 256)


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------- CaDDTree
def caddtree_experiment(bundle, prompts, *, cost_path, grid=CADDTREE_GRID, new_tokens: int = 96,
                        cost_mismatch: str = "error", repeats: int = 1) -> dict:
    """Decode every prompt with every method; per (method, prompt): tokens, seconds, τ, B."""
    cost, notes = resolve_cost(bundle, str(cost_path), on_mismatch=cost_mismatch)
    max_b = max(grid)
    methods = [("ar", "ar", None)] + [(f"ddtree@{b}", "ddtree", b) for b in grid] + [
        ("caddtree", "caddtree", max_b), ("exhaustive", "exhaustive", max_b)]
    stats = {m[0]: {"tokens": [], "seconds": [], "rounds": [], "tree": [], "model_s": []}
             for m in methods}
    decode(bundle, prompts[0], 16, method="ddtree", budget=max_b)  # warm-up
    outputs = {}
    for i, p in enumerate(prompts):
        order = methods[i % len(methods):] + methods[:i % len(methods)]
        for label, method, budget in order:
            secs, res = [], None
            for _ in range(repeats):
                res = decode(bundle, p, new_tokens, method=method, budget=budget,
                             cost=cost if method in ("caddtree", "exhaustive") else None)
                secs.append(res.decode_s)
            st = stats[label]
            st["tokens"].append(len(res.tokens))
            st["seconds"].append(float(np.median(secs)))
            st["rounds"].append([r.tau for r in res.rounds])
            st["tree"].append(float(np.mean([r.tree_size for r in res.rounds])))
            start, model_s = len(p) - 1, 0.0
            if method != "ar":
                for r in res.rounds:
                    model_s += float(round_time(cost, r.tree_size, start))
                    start += r.tau
            else:
                model_s = len(res.rounds) * float(cost.verify_cost(1, start + 48))
            st["model_s"].append(model_s)
            outputs.setdefault(i, res.tokens)
            if res.tokens != outputs[i]:
                notes.append(f"prompt {i}: {label} emitted other tokens than the first method "
                             f"(greedy identity broken)")
        if i % 8 == 0:
            _log(f"caddtree experiment: prompt {i + 1}/{len(prompts)}")
    return {"stats": stats, "notes": notes, "cost": cost.to_dict(), "grid": list(grid),
            "new_tokens": new_tokens, "prompts": len(prompts), "repeats": repeats}


def caddtree_table(run: dict, *, n_boot: int = 4000, seed: int = 0) -> tuple[str, list[dict]]:
    """Markdown table and rows: throughput, CIs, ratio to the oracle budget and to CaDDTree."""
    stats = run["stats"]
    names = list(stats)
    tok = np.array([stats[m]["tokens"] for m in names], dtype=np.float64).T    # (P, M)
    sec = np.array([stats[m]["seconds"] for m in names], dtype=np.float64).T
    msec = np.array([stats[m]["model_s"] for m in names], dtype=np.float64).T
    point = tok.sum(0) / sec.sum(0)
    fixed = [j for j, m in enumerate(names) if m.startswith("ddtree@")]
    oracle = fixed[int(np.argmax(point[fixed]))]
    boot = paired_bootstrap(tok, sec, rng=np.random.default_rng(seed), n_boot=n_boot)  # (n_boot, M)
    j_cad, j_ar = names.index("caddtree"), names.index("ar")
    rows = []
    lines = [f"Oracle budget (best fixed budget after the fact): {names[oracle]}.", "",
             "| method | mean tree nodes | τ | tok/s [95% CI] | vs oracle budget [95% CI] | "
             "vs CaDDTree [95% CI] | speedup vs AR | model-predicted tok/s |",
             "|---|---:|---:|---|---|---|---:|---:|"]

    for j, m in enumerate(names):
        lo, hi = percentile_ci(boot[:, j])
        taus = [t for r in stats[m]["rounds"] for t in r]
        vo, vc = ratio_ci(boot, j, oracle, point), ratio_ci(boot, j, j_cad, point)
        pred = tok[:, j].sum() / msec[:, j].sum()
        rows.append({"method": m, "tree_nodes": float(np.mean(stats[m]["tree"])),
                     "tau": float(np.mean(taus)), "tok_s": float(point[j]),
                     "tok_s_ci": [float(lo), float(hi)], "vs_oracle": vo, "vs_caddtree": vc,
                     "speedup_vs_ar": float(point[j] / point[j_ar]),
                     "model_tok_s": float(pred), "oracle": j == oracle})
        f = (lambda x: "—") if j == oracle else (
            lambda x: f"{100 * (x[0] - 1):+.1f}% [{100 * (x[1] - 1):+.1f}, "
                      f"{100 * (x[2] - 1):+.1f}]")
        g = (lambda x: "—") if j == j_cad else (
            lambda x: f"{100 * (x[0] - 1):+.1f}% [{100 * (x[1] - 1):+.1f}, "
                      f"{100 * (x[2] - 1):+.1f}]")
        lines.append(f"| {m}{' (oracle)' if j == oracle else ''} | "
                     f"{np.mean(stats[m]['tree']):.1f} | {np.mean(taus):.2f} | "
                     f"{point[j]:.1f} [{lo:.1f}, {hi:.1f}] | {f(vo)} | {g(vc)} | "
                     f"{point[j] / point[j_ar]:.2f} | {pred:.1f} |")
    return "\n".join(lines), rows


# ----------------------------------------------------------------------------- traces
def record_traces(bundle, prompts, *, budget: int, temperature: float, new_tokens: int,
                  seed: int = 0) -> dict:
    """Decode with DDTree at ``budget``; record every round (see the module docstring)."""
    L, V = bundle.depth, bundle.vocab_size
    log_qs, parents, tokens, edges, sizes, prompt_ids, starts, taus = [], [], [], [], [], [], [],\
        []
    for i, p in enumerate(prompts):
        pf = prefill(bundle, p, with_drafter=True)
        recs = []

        def on_round(rnd, state, recs=recs):
            # rnd.edges: the target's edge probabilities at the decoding temperature
            recs.append((rnd.tree, rnd.edges, state.length, rnd.log_q.astype(np.float16)))

        res = run_from(bundle, pf, new_tokens, method="ddtree", rule="follow", budget=budget,
                       temperature=temperature, rng=np.random.default_rng([seed, i]),
                       on_round=on_round)
        for (tree, e, start, lq), r in zip(recs, res.rounds, strict=True):
            n1 = tree.n_nodes
            par = np.full(budget + 1, -2, dtype=np.int32)
            tok = np.zeros(budget + 1, dtype=np.int32)
            ed = np.zeros(budget + 1, dtype=np.float32)
            par[:n1], tok[:n1], ed[:n1] = tree.parent, tree.token, e
            parents.append(par)
            tokens.append(tok)
            edges.append(ed)
            sizes.append(n1 - 1)
            log_qs.append(lq)
            prompt_ids.append(i)
            starts.append(start)
            taus.append(r.tau)
    return {"log_q": np.stack(log_qs), "parent": np.stack(parents), "token": np.stack(tokens),
            "edge": np.stack(edges), "size": np.asarray(sizes), "prompt": np.asarray(prompt_ids),
            "start": np.asarray(starts), "tau": np.asarray(taus),
            "meta": json.dumps({"budget": budget, "temperature": temperature, "L": L, "V": V,
                                "new_tokens": new_tokens, "prompts": len(prompts),
                                "format": "treespec-real-trace/1"})}


def _trace_tree(tr: dict, r: int):
    n1 = int(tr["size"][r]) + 1
    return DraftTree.from_parents(tr["parent"][r, :n1].astype(np.int64),
                                  tr["token"][r, :n1].astype(np.int64))


def replay(tr: dict, budgets: Sequence[int], depth_limit: int) -> dict:
    """The simulator's exact analysis of recorded rounds.

    Each recorded round is a :meth:`treespec_sim.engine.Round.from_edges` (its tree and the
    target's edge probabilities on it); its nested prefixes give every budget.

    Returns ``tau[r, j]`` = :math:`1 + \\sum_{i \\le B_j} P(v_i)` (follow verification on the
    prefix tree of budget ``B_j``: :attr:`~treespec_sim.engine.Round.tau_curve`) and
    ``exits[j]`` = mean exit mass by cause at ``B_j``
    (:meth:`~treespec_sim.engine.Round.at_budget`).
    """
    R = len(tr["size"])
    budgets = list(budgets)
    tau = np.zeros((R, len(budgets)))
    exits = np.zeros((len(budgets), len(EXIT_CAUSES)))
    by_depth = np.zeros((len(budgets), depth_limit + 1))
    for r in range(R):
        tree = _trace_tree(tr, r)
        rnd = engine.Round.from_edges(tree, tr["edge"][r, :tree.n_nodes],
                                      depth_limit=depth_limit)
        curve = rnd.tau_curve
        for j, B in enumerate(budgets):
            b = min(B, tree.size)
            tau[r, j] = curve[b]
            dec = rnd.at_budget(b).exits
            exits[j] += dec.by_depth_cause.sum(0)
            by_depth[j] += dec.by_depth
    return {"tau": tau, "exits": exits / R, "by_depth": by_depth / R}


def real_runs(bundle, prompts, *, budgets, temperature: float, new_tokens: int,
              seed: int = 0) -> dict:
    """Real decoding at each budget: realised τ per round, exact exit decomposition per round."""
    L = bundle.depth
    out = {}
    for B in budgets:
        taus, prompt_of = [], []
        exits = np.zeros(len(EXIT_CAUSES))
        by_depth = np.zeros(L + 1)
        n = 0
        for i, p in enumerate(prompts):
            decs = []

            def on_round(rnd, state, decs=decs):
                decs.append(rnd.exits)  # exact, under the round's rows at ``temperature``

            pf = prefill(bundle, p, with_drafter=True)
            res = run_from(bundle, pf, new_tokens, method="ddtree", rule="follow", budget=B,
                           temperature=temperature, rng=np.random.default_rng([seed, i, B]),
                           on_round=on_round)
            for d in decs:
                exits += d.by_depth_cause.sum(0)
                by_depth += d.by_depth
                n += 1
            taus.extend(r.tau for r in res.rounds)
            prompt_of.extend([i] * len(res.rounds))
        out[B] = {"tau": np.asarray(taus, dtype=np.float64), "prompt": np.asarray(prompt_of),
                  "exits": exits / n, "by_depth": by_depth / n}
        _log(f"real decoding B={B}: tau {np.mean(taus):.3f}")
    return out


def _per_prompt_mean(values: np.ndarray, prompt: np.ndarray, n: int) -> np.ndarray:
    s = np.bincount(prompt, weights=values, minlength=n)
    c = np.bincount(prompt, minlength=n)
    return s / np.maximum(c, 1)


# ----------------------------------------------------------------------------- synth fit
def fit_regime(target: dict[int, float], *, V: int, L: int, rounds: int = 240,
               temperature: float = 0.0, seed: int = 0, grid=None) -> dict:
    """Grid-search two knobs of a synthetic regime (sharpness, mismatch) at the tiny models'
    ``V`` and ``L`` so that its exact τ(B) matches ``target`` (budget -> τ; 0 = chain) in
    squared error. Returns the best spec's knobs and its τ at every budget of ``target``."""
    base = get_regime("mid-entropy")
    grid = grid or [(s, m) for s in (0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0)
                    for m in (0.0, 0.05, 0.15, 0.3)]
    best = None
    for sharp, mis in grid:
        try:
            spec = dataclasses.replace(base, name=f"fit-s{sharp}-m{mis}", vocab_size=V, depth=L,
                                       sharpness=sharp, mismatch=mis)
            world = make_world(spec, seed=seed)
        except (ValueError, TypeError) as exc:
            return {"error": f"could not build a regime at V={V}, L={L}: {exc}"}
        rng = np.random.default_rng([seed, 3])
        taus = {b: [] for b in target}
        ctx = world.sample_context(rng)
        for r in range(rounds):
            if r % 8 == 0:
                ctx = world.sample_context(rng)
            # one nested DDTree round gives the exact follow tau at every budget up to the
            # largest; the chain's exact tau needs no draws (sample=False)
            rnd = engine.run_round(world, ctx, method="ddtree", budget=max(target),
                                   rule="follow", temperature=temperature, rng=rng, nested=True)
            curve = rnd.tau_curve
            for b in target:
                if b == 0:
                    taus[b].append(engine.run_round(
                        world, ctx, method="chain", rule="follow", temperature=temperature,
                        rng=rng, sample=False).expected_tau)
                else:
                    taus[b].append(float(curve[min(b, rnd.tree_size)]))
            ctx = engine.commit(world, ctx, rnd)
        got = {b: float(np.mean(v)) for b, v in taus.items()}
        err = sum((got[b] - target[b]) ** 2 for b in target)
        if best is None or err < best["sq_error"]:
            best = {"sharpness": sharp, "mismatch": mis, "tau": got, "sq_error": err,
                    "base_regime": base.name}
    return best


# ----------------------------------------------------------------------------- CLI
# ----------------------------------------------------------------------------- Tsubame
#: (label, method, rule, uses the budget) of the ``tsubame`` experiment.
TSUBAME_METHODS = (
    ("chain (argmax)", "chain", "follow", False),
    ("sampled-chain (marginal)", "sampled-chain", "rrs", False),
    ("sampled-chain-corrected", "sampled-chain-corrected", "rrs", False),
    ("ddtree", "ddtree", "follow", True),
    ("tsubame, marginal (sampled-ddtree)", "sampled-ddtree", "rrsw", True),
    ("tsubame, corrected (tsubame-rrsw)", "tsubame-rrsw", "rrsw", True),
)


def tsubame_experiment(bundle, prompts, *, cost, temperatures=(0.6, 1.0), budgets=(16, 64),
                       new_tokens: int = 64, seed: int = 0) -> dict:
    """Decode every prompt with every method of :data:`TSUBAME_METHODS` at every ``T`` and
    budget; per round: exact E[tau], sampled tau, tree size, context length and the correction
    passes (``(depth, blocks, seconds)``) the round made. Prompts are decoded method after
    method with a seed per (T, configuration, prompt)."""
    configs = []
    for label, method, rule, sized in TSUBAME_METHODS:
        for b in (budgets if sized else (None,)):
            configs.append((f"{label} B={b}" if sized else label, method, rule, b))
    pfs = [prefill(bundle, p, with_drafter=True) for p in prompts]
    runs: dict = {}
    for ti, t in enumerate(temperatures):
        for ci, (label, method, rule, budget) in enumerate(configs):
            per_prompt = []
            for i, pf in enumerate(pfs):
                recs: list[dict] = []

                def on_round(rnd, state, recs=recs):
                    recs.append({"e_tau": float(rnd.expected_tau), "size": rnd.tree_size,
                                 "start": state.length,
                                 "levels": len({d for d, _, _ in state.corrections}),
                                 "passes": len(state.corrections),
                                 "blocks": int(sum(k for _, k, _ in state.corrections)),
                                 "corr_s": float(sum(x for *_, x in state.corrections))})

                rng = np.random.default_rng([seed, ti, ci, i])
                res = run_from(bundle, pf, new_tokens, method=method, rule=rule,
                               budget=budget, temperature=t, rng=rng, on_round=on_round)
                for r, st in zip(recs, res.rounds, strict=True):
                    r["tau"] = st.tau
                per_prompt.append({"rounds": recs, "decode_s": res.decode_s,
                                   "tokens": len(res.tokens)})
            runs[f"{t!r}|{label}"] = {"temperature": t, "label": label, "method": method,
                                      "rule": rule, "budget": budget, "prompts": per_prompt}
            _log(f"tsubame experiment: T = {t:g}, {label} done")
    return {"runs": runs, "cost": cost.to_dict(), "temperatures": list(temperatures),
            "budgets": list(budgets), "new_tokens": new_tokens, "prompts": len(prompts),
            "seed": seed}


def tsubame_table(run: dict, cost) -> tuple[str, list[dict]]:
    """Markdown table and rows of :func:`tsubame_experiment`: tau, tokens/s three ways."""
    rows = []
    lines = ["| T | method | B | tree nodes | E[τ] [95% CI over prompts] | sampled τ | "
             "correction passes / round | measured correction ms / round | "
             "modelled tok/s, passes charged | one batched pass per depth | "
             "no correction cost | measured wall tok/s |",
             "|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in run["runs"].values():
        per = r["prompts"]
        rounds = [x for p in per for x in p["rounds"]]
        ci = mean_ci([np.array([x["e_tau"] for x in p["rounds"]]) for p in per])
        e_tau = np.array([x["e_tau"] for x in rounds])
        base = np.array([float(round_time(cost, x["size"], x["start"])) for x in rounds])
        cd = np.array([float(cost.draft_cost(x["start"])) for x in rounds])
        passes = np.array([x["passes"] for x in rounds], dtype=np.float64)
        levels = np.array([x["levels"] for x in rounds], dtype=np.float64)
        corr_s = np.array([x["corr_s"] for x in rounds])
        charged = e_tau.sum() / (base + passes * cd).sum()
        batched = e_tau.sum() / (base + levels * cd).sum()
        free = e_tau.sum() / base.sum()
        wall = sum(p["tokens"] for p in per) / sum(p["decode_s"] for p in per)
        row = {"temperature": r["temperature"], "label": r["label"], "method": r["method"],
               "rule": r["rule"], "budget": r["budget"],
               "tree_nodes": float(np.mean([x["size"] for x in rounds])),
               "e_tau": ci.mean, "e_tau_ci": [ci.low, ci.high],
               "sampled_tau": float(np.mean([x["tau"] for x in rounds])),
               "passes_per_round": float(passes.mean()),
               "levels_per_round": float(levels.mean()),
               "correction_ms_per_round": 1e3 * float(corr_s.mean()),
               "correction_ms_per_pass": (1e3 * float(corr_s.sum() / passes.sum())
                                          if passes.sum() else None),
               "tok_s_charged": float(charged), "tok_s_batched": float(batched),
               "tok_s_free": float(free), "wall_tok_s": float(wall), "rounds": len(rounds)}
        rows.append(row)
        b = "L" if r["budget"] is None else str(r["budget"])
        lines.append(f"| {r['temperature']:g} | {r['label']} ({r['rule']}) | {b} | "
                     f"{row['tree_nodes']:.1f} | {ci.mean:.2f} [{ci.low:.2f}, {ci.high:.2f}] | "
                     f"{row['sampled_tau']:.2f} | {row['passes_per_round']:.1f} | "
                     f"{row['correction_ms_per_round']:.1f} | {charged:.1f} | {batched:.1f} | "
                     f"{free:.1f} | {wall:.1f} |")
    return "\n".join(lines), rows


def _load_prompts(bundle, n: int):
    return load_prompts(bundle, n, 64)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m real_models.experiments`` (caddtree, traces, simvsreal,
    tsubame)."""
    ap = OneLineParser(
        prog="python -m real_models.experiments",
        description="Experiments on the shipped tiny models: CaDDTree on measured costs "
                    "('caddtree'), DDTree traces for the simulator ('traces'), and the "
                    "simulator's prediction vs real decoding ('simvsreal'). 'COMMAND --help' "
                    "lists each command's options.",
        epilog="exit status: 0 done, 2 bad input")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND", title="commands", required=True)
    c = sub.add_parser("caddtree", help="throughput of DDTree budgets, CaDDTree and the "
                       "exhaustive rule with a measured latency file, at T = 0",
                       description="Greedy decoding of the held-out prompts with DDTree at "
                                   "every budget of --grid, CaDDTree and the exhaustive rule "
                                   "(with the latency file --cost) and autoregressive decoding; "
                                   "prints throughput with paired bootstrap CIs.")
    c.add_argument("--cost", metavar="FILE.json", default=None,
                   help="latency file (default: the committed real_models/profiles/"
                        "cpu_tiny.json)")
    c.add_argument("--allow-cost-mismatch", action="store_true",
                   help="record a device/model mismatch of --cost as a warning instead of "
                        "failing")
    c.add_argument("--grid", type=positive_int, nargs="+", metavar="B",
                   default=list(CADDTREE_GRID),
                   help="DDTree budgets; the largest is CaDDTree's and exhaustive's "
                        "max_budget (default: %(default)s)")
    add_prompts(c, default=32)
    add_new_tokens(c, default=96)
    add_repeats(c, default=1, help="timed decodings per method and prompt; the median is kept "
                                   "(default: %(default)s)")
    add_out(c, "write caddtree_real.md and .json here (default: print only)", metavar="DIR")
    t = sub.add_parser("traces", help="record DDTree rounds (drafter rows, tree, target edge "
                       "probabilities) for the simulator",
                       description="Decode the held-out prompts with DDTree at --budget and "
                                   "record per round the drafter's log_q, the tree and the "
                                   "target's edge probabilities (an .npz for 'simvsreal').")
    t.add_argument("--budget", type=positive_int, metavar="B", default=256,
                   help="DDTree budget of the traced trees (default: %(default)s)")
    add_temperature(t, default=0.0, help="decoding temperature (default: %(default)s)")
    add_prompts(t, default=32)
    add_new_tokens(t, default=96)
    add_out(t, "where to write the traces (required)", metavar="FILE.npz", required=True)
    s = sub.add_parser("simvsreal", help="replay traces in the simulator and compare with real "
                       "decoding at each budget",
                       description="Replay the traces (tau(B) from the nested trees, exit-law "
                                   "decomposition), decode the same prompts for real at each "
                                   "budget, fit a synthetic regime, and report the errors.")
    s.add_argument("--traces", type=Path, metavar="FILE.npz", required=True,
                   help="traces written by 'traces' (required)")
    add_budgets(s, default=[4, 8, 16, 32, 64, 128, 256],
                help="budgets to compare, up to the traced budget (default: %(default)s)")
    s.add_argument("--no-fit", action="store_true",
                   help="skip fitting a synthetic regime to the real tau")
    add_out(s, "write simvsreal_T<T>.md and .json here (default: print only)", metavar="DIR")
    w = sub.add_parser("tsubame", help="sampled trees at T > 0 on the real drafter: Tsubame "
                       "(marginal and corrected) vs DDTree and the sampled chains",
                       description="Decode the held-out prompts with DDTree, the argmax "
                                   "chain, the marginal and corrected sampled chains and "
                                   "Tsubame (marginal proposals, and the drafter's conditional "
                                   "correction) at each temperature and budget; exact E[tau] "
                                   "per round with t-intervals over prompts, and modelled "
                                   "tokens/s charging the correction passes.")
    w.add_argument("--temperatures", type=positive_temperature, nargs="+", metavar="T",
                   default=[0.6, 1.0], help="target temperatures, > 0 (default: %(default)s)")
    add_budgets(w, default=[16, 64], help="tree budgets (default: %(default)s)")
    w.add_argument("--cost", metavar="FILE.json", default=None,
                   help="latency file for the modelled tokens/s (default: the committed "
                        "real_models/profiles/cpu_tiny.json)")
    add_prompts(w, default=16)
    add_new_tokens(w, default=64)
    add_seed(w, "base seed of the draws and the verifier (default: %(default)s)")
    add_out(w, "write tsubame_real.md and .json here (default: print only)", metavar="DIR")
    for p in (c, t, s, w):
        add_device(p)
        add_threads(p)
        add_debug(p)
    return ap


def main(argv=None) -> int:
    return run_subcommand(build_parser(), argv, _main)


def _read_traces(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"--traces {path} does not exist (write it with 'traces')")
    what = f"--traces {path}: not an .npz written by 'traces'"
    try:
        tr = read_npz(path, "--traces")
        meta = json.loads(str(tr["meta"]))
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise ValueError(f"{what} ({exc})") from None
    missing = [k for k in ("temperature", "L", "budget", "prompts", "new_tokens", "V")
               if not isinstance(meta, dict) or k not in meta]
    if missing:
        raise ValueError(f"{what} (its meta lacks {', '.join(missing)})")
    return tr


def _main(args: argparse.Namespace) -> int:
    # the numbers were checked as they were parsed (treespec_sim.cli's types)
    if args.cmd == "simvsreal":
        traces = _read_traces(args.traces)
    check_device(args.device)
    torch.set_num_threads(args.threads)
    bundle = load(device=args.device)
    if args.cmd == "caddtree":
        prompts = _load_prompts(bundle, args.prompts)
        res = caddtree_experiment(bundle, prompts, cost_path=args.cost or CPU_TINY,
                                  grid=tuple(args.grid), new_tokens=args.new_tokens,
                                  repeats=args.repeats,
                                  cost_mismatch="warn" if args.allow_cost_mismatch
                                  else "error")
        table, rows = caddtree_table(res)
        head = (f"T = 0, {res['prompts']} held-out prompts x {res['new_tokens']} new tokens, "
                f"cost model {res['cost'].get('name')} ({_shown(args.cost or CPU_TINY)}), "
                f"device {args.device}, {torch.get_num_threads()} thread(s)")
        text = head + "\n\n" + table + "".join(f"\n\nNote: {n}" for n in res["notes"])
        print(text)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "caddtree_real.md").write_text(text + "\n")
            (args.out / "caddtree_real.json").write_text(json.dumps(
                {"rows": rows, "notes": _shown_notes(res["notes"], args.cost or CPU_TINY),
                 "cost_file": _shown(args.cost or CPU_TINY),
                 "cost": res["cost"], "stats": res["stats"], "grid": res["grid"],
                 "torch": torch.__version__}, indent=1) + "\n")
    elif args.cmd == "traces":
        prompts = _load_prompts(bundle, args.prompts)
        tr = record_traces(bundle, prompts, budget=args.budget, temperature=args.temperature,
                           new_tokens=args.new_tokens)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(args.out, **tr)
        _log(f"wrote {args.out}: {len(tr['size'])} rounds")
    elif args.cmd == "tsubame":
        prompts = _load_prompts(bundle, args.prompts)
        cost, notes = resolve_cost(bundle, str(args.cost or CPU_TINY))
        res = tsubame_experiment(bundle, prompts, cost=cost,
                                 temperatures=tuple(args.temperatures),
                                 budgets=tuple(args.budgets), new_tokens=args.new_tokens,
                                 seed=args.seed)
        table, rows = tsubame_table(res, cost)
        options = " ".join(a for a in sys.argv[1:] if a != "tsubame")
        command = f"python -m real_models.experiments tsubame {options}".strip()
        head = (f"Produced by `python -m real_models.experiments tsubame` (options: "
                f"`{options or 'none'}`): "
                f"{res['prompts']} held-out prompts x {res['new_tokens']} new tokens, seed "
                f"{res['seed']}, cost model {res['cost'].get('name')} "
                f"({_shown(args.cost or CPU_TINY)}: C_d = {1e3 * cost.draft_cost():.2f} ms), "
                f"device "
                f"{args.device}, {torch.get_num_threads()} thread(s)")
        notes = _shown_notes(notes, args.cost or CPU_TINY)
        text = head + "\n\n" + table + "".join(f"\n\nNote: {n}" for n in notes)
        print(text)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            atomic_write_text(args.out / "tsubame_real.md", text + "\n")
            atomic_write_text(args.out / "tsubame_real.json", json.dumps(
                {"rows": rows, "notes": notes, "cost_file": _shown(args.cost or CPU_TINY),
                 "runs": res["runs"], "cost": res["cost"], "command": command,
                 "torch": torch.__version__}) + "\n")
    else:
        simvsreal(bundle, args, traces)
    return 0


def simvsreal(bundle, args, tr: dict) -> None:
    meta = json.loads(str(tr["meta"]))
    T, L = float(meta["temperature"]), int(meta["L"])
    budgets = [b for b in args.budgets if b <= meta["budget"]]
    rep = replay(tr, budgets, L)
    n_p = int(meta["prompts"])
    prompts = _load_prompts(bundle, n_p)
    real = real_runs(bundle, prompts, budgets=budgets, temperature=T,
                     new_tokens=int(meta["new_tokens"]))
    boot_rng_seed = 0  # one stream for every budget: the same prompt resamples (paired)
    lines = [f"T = {T}; traces: {len(tr['size'])} rounds of DDTree at B = {meta['budget']} "
             f"over {n_p} held-out prompts x {meta['new_tokens']} tokens; real decoding: the "
             f"same prompts at each budget.", "",
             "| B | replayed τ(B) [95% CI] | real τ [95% CI] | error (replay − real) [95% CI] "
             "| rel. error |", "|---:|---|---|---|---:|"]
    rows = []
    for j, B in enumerate(budgets):
        pr = _per_prompt_mean(rep["tau"][:, j], tr["prompt"], n_p)
        rr = _per_prompt_mean(real[B]["tau"], real[B]["prompt"], n_p)
        both = paired_bootstrap(np.column_stack([pr, rr]), n_boot=4000,
                                rng=np.random.default_rng(boot_rng_seed))
        bp, brl = both[:, 0], both[:, 1]
        d = bp - brl
        e = float(pr.mean() - rr.mean())
        rows.append({"budget": B, "replay_tau": float(pr.mean()), "real_tau": float(rr.mean()),
                     "error": e, "error_ci": list(percentile_ci(d)),
                     "replay_exits": dict(zip(EXIT_CAUSES, rep["exits"][j].tolist(),
                                              strict=True)),
                     "real_exits": dict(zip(EXIT_CAUSES, real[B]["exits"].tolist(),
                                            strict=True))})
        (p_lo, p_hi), (r_lo, r_hi), (d_lo, d_hi) = (percentile_ci(x) for x in (bp, brl, d))
        lines.append(f"| {B} | {pr.mean():.3f} [{p_lo:.3f}, {p_hi:.3f}] | "
                     f"{rr.mean():.3f} [{r_lo:.3f}, {r_hi:.3f}] | {e:+.3f} "
                     f"[{d_lo:+.3f}, {d_hi:+.3f}] | {100 * e / rr.mean():+.1f}% |")
    lines += ["", "Exit-law decomposition (mean exit mass per round by cause; replay = prefix "
              "trees of the traced B_max trees, real = exact decomposition of each real round's "
              "tree under its own target rows):", "",
              "| B | cause | replay | real | error |", "|---:|---|---:|---:|---:|"]
    for j, B in enumerate(budgets):
        for k, cause in enumerate(EXIT_CAUSES):
            a, b = rep["exits"][j, k], real[B]["exits"][k]
            lines.append(f"| {B} | {cause} | {a:.3f} | {b:.3f} | {a - b:+.3f} |")
    fit = None
    if not args.no_fit:
        target = {b: rows[j]["real_tau"] for j, b in enumerate(budgets) if b in (16, 64)}
        chain_real = _chain_tau(bundle, prompts, T, int(meta["new_tokens"]))
        target[0] = chain_real
        _log(f"fitting a synthetic regime to chain tau {chain_real:.3f} and tau at B=16/64")
        fit = fit_regime(target, V=int(meta["V"]), L=L, temperature=T)
        if fit and "error" not in fit:
            sim = fit_regime({b: 0.0 for b in [0, *budgets]}, V=int(meta["V"]), L=L,
                             temperature=T, grid=[(fit["sharpness"], fit["mismatch"])])
            lines += ["", f"Synthetic regime fitted to the real chain τ ({chain_real:.3f}) "
                      f"and τ at B = 16, 64: base `{fit['base_regime']}` with V = "
                      f"{meta['V']}, L = {L}, sharpness = {fit['sharpness']}, mismatch = "
                      f"{fit['mismatch']} (grid search). Its τ(B) vs real decoding:", "",
                      "| B | synthetic τ | real τ | error | rel. error |",
                      "|---:|---:|---:|---:|---:|",
                      f"| chain | {sim['tau'][0]:.3f} | {chain_real:.3f} | "
                      f"{sim['tau'][0] - chain_real:+.3f} | "
                      f"{100 * (sim['tau'][0] - chain_real) / chain_real:+.1f}% |"]
            for r in rows:
                s_ = sim["tau"][r["budget"]]
                lines.append(f"| {r['budget']} | {s_:.3f} | {r['real_tau']:.3f} | "
                             f"{s_ - r['real_tau']:+.3f} | "
                             f"{100 * (s_ - r['real_tau']) / r['real_tau']:+.1f}% |")
                r["synthetic_tau"] = s_
            fit["sim"] = sim
        elif fit:
            lines += ["", f"Synthetic fit not done: {fit['error']}"]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"simvsreal_T{T:g}.md").write_text(text + "\n")
        (args.out / f"simvsreal_T{T:g}.json").write_text(json.dumps(
            {"rows": rows, "fit": fit, "trace_meta": meta}, indent=1, default=float) + "\n")


def _chain_tau(bundle, prompts, temperature: float, new_tokens: int) -> float:
    taus = []
    for i, p in enumerate(prompts):
        r = decode(bundle, p, new_tokens, method="chain", temperature=temperature, seed=i)
        taus.append(np.mean([x.tau for x in r.rounds]))
    return float(np.mean(taus))


if __name__ == "__main__":
    sys.exit(main())
