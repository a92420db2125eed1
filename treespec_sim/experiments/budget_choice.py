r"""Does CaDDTree match DDTree at the oracle budget? Throughput of every budget rule.

For each regime, rounds come from decoding (contexts follow the target's own law). In every
round the drafter's marginals give DDTree's tree at ``max_budget``; because the trees are
nested, that one tree gives, *exactly*, the expected tokens of every budget ``B``:

.. math:: \tau(B) = 1 + \sum_{i \le B} P(v_i)

(``follow`` verification: the target's path reaches pop ``v_i`` with probability
:math:`P(v_i)`), and its surrogate :math:`N(B) = 1 + \sum_{i\le B} q(v_i)`. A cost model gives
:math:`D(B) = C_d + C_v(B + 1)`. Each rule then picks a ``B`` per round from what it may see (the
drafter's marginals and the costs, never the target), and its long-run throughput is the
renewal-reward ratio :math:`\sum \tau / \sum D` (tokens per second). The rules:

``ddtree@B``
    DDTree at every fixed budget of the grid.
``ddtree-oracle``
    the fixed budget with the best throughput on these very rounds (the DDTree papers' protocol:
    chosen after the fact, hence optimistic).
``caddtree``
    CaDDTree's greedy stop on :math:`\theta(B) = N(B)/D(B)`.
``exhaustive``
    the argmax of :math:`\theta` over ``0..max_budget``.
``longrun``
    Dinkelbach's rule :math:`q(v_{B+1}) > \lambda \Delta_{B+1}` with :math:`\lambda` the running
    throughput of the rule's own expected tokens (:class:`~treespec_sim.policies.LongRunPolicy`).

Every rule is evaluated on the same rounds (paired); intervals are 95% percentile-bootstrap
intervals over decoded sequences (the unit of independence).

``python -m treespec_sim.experiments.budget_choice [--rounds N] [--regimes ...] [--costs ...]``
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..cost import DEFAULT_CONTEXT_LENGTH, LatencyModel, get_cost_model
from ..exits import reach_from_edges
from ..policies.caddtree import (
    LongRunPolicy,
    _pop_probabilities,
    first_non_increase,
)
from ..policies.ddtree import ddtree
from ..verify import verify

__all__ = ["BUDGET_GRID", "DEFAULT_CONTEXT_LENGTH", "RoundCurves", "RuleResult", "collect",
           "evaluate", "main", "result_rows", "results_table", "run"]

#: Fixed budgets compared (and the grid the oracle chooses from).
BUDGET_GRID = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
#: Adaptive rules, in report order.
ADAPTIVE = ("caddtree", "exhaustive", "longrun")


@dataclass(frozen=True)
class RoundCurves:
    """Per-round, per-budget facts of one regime (cost-independent).

    ``surrogate[r, B]`` and ``tau[r, B]`` for ``B = 0..max_budget`` (rounds with fewer
    prefixes are padded with their last value); ``sequence[r]`` labels the decoded sequence.
    """

    regime: str
    temperature: float
    surrogate: np.ndarray
    tau: np.ndarray
    sequence: np.ndarray

    @property
    def max_budget(self) -> int:
        return self.tau.shape[1] - 1


def collect(regime: str, *, rounds: int, temperature: float = 0.0, max_budget: int = 1024,
            rounds_per_sequence: int = 8, seed: int = 0, world=None) -> RoundCurves:
    """Decode ``rounds`` rounds of ``regime`` and record every budget's exact curves.

    ``world`` (optional) is ``make_world(regime, seed=seed)`` built (and cached) by the caller.
    """
    from ..synth import make_world

    if rounds < 2:
        raise ValueError(f"rounds must be >= 2; got {rounds}")
    if world is None:
        world = make_world(regime, seed=seed)
    rng = np.random.default_rng([seed, 7])
    width = max_budget + 1
    surrogate = np.empty((rounds, width))
    tau = np.empty((rounds, width))
    sequence = np.empty(rounds, dtype=np.int64)
    r = 0
    while r < rounds:
        ctx = world.sample_context(rng)
        for _ in range(min(rounds_per_sequence, rounds - r)):
            log_q = world.draft_lazy(ctx)  # ranked, never materialised in word-class worlds
            tree = ddtree(log_q, max_budget, root_token=int(ctx.last_token))
            oracle = world.target_oracle(ctx, tree, temperature)
            reach = reach_from_edges(tree, oracle.edge_probs(tree))
            n = tree.size
            q = _pop_probabilities(tree, log_q)
            surrogate[r, : n + 1] = 1.0 + np.concatenate([[0.0], np.cumsum(q)])
            tau[r, : n + 1] = 1.0 + np.concatenate([[0.0], np.cumsum(reach[1:])])
            surrogate[r, n + 1:] = surrogate[r, n]
            tau[r, n + 1:] = tau[r, n]
            sequence[r] = r // rounds_per_sequence
            # Commit a sampled outcome so the next round's context follows the target's law
            outcome = verify(tree, oracle, rule="follow", rng=rng)
            ctx = world.advance(ctx, outcome.tokens)
            r += 1
    return RoundCurves(regime, float(temperature), surrogate, tau, sequence)


@dataclass(frozen=True)
class RuleResult:
    """Throughput of one rule on one (regime, cost model), with paired comparisons."""

    regime: str
    cost_model: str
    method: str
    budget_mean: float
    tau_mean: float
    tau_ci: tuple[float, float]  # 95% t-interval over decoded sequences
    round_time_s: float
    throughput: float
    ci: tuple[float, float]
    speedup_vs_ar: float
    vs_oracle: tuple[float, float, float]  # ratio to ddtree-oracle, CI low, CI high
    vs_longrun: tuple[float, float, float]


def _chosen_budgets(curves: RoundCurves, cost: LatencyModel, context_length: float
                    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Round cost per budget and each adaptive rule's budget per round."""
    B = np.arange(curves.max_budget + 1)
    round_cost = cost.draft_cost(context_length) + np.asarray(
        cost.verify_cost(B + 1, context_length), dtype=np.float64)
    theta = curves.surrogate / round_cost
    picks = {
        "caddtree": np.array([first_non_increase(t) for t in theta]),
        "exhaustive": np.argmax(theta, axis=1),
    }
    policy = LongRunPolicy(draft_cost=cost.draft_cost(context_length),
                           verify_cost=lambda n: cost.verify_cost(n, context_length),
                           max_budget=curves.max_budget)
    longrun = np.empty(len(theta), dtype=np.int64)
    for r in range(len(theta)):
        longrun[r] = policy.choose_from(np.diff(curves.surrogate[r]), round_cost)
        policy.observe(curves.tau[r, longrun[r]], round_cost[longrun[r]])
    picks["longrun"] = longrun
    return round_cost, picks


def _bootstrap_ratio(tokens: np.ndarray, seconds: np.ndarray, seq: np.ndarray,
                     rng: np.random.Generator, n_boot: int = 2000) -> np.ndarray:
    """Bootstrap replicates of sum(tokens)/sum(seconds) per column, resampling sequences."""
    ids, inv = np.unique(seq, return_inverse=True)
    tok = np.zeros((ids.size, tokens.shape[1]))
    sec = np.zeros((ids.size, tokens.shape[1]))
    np.add.at(tok, inv, tokens)
    np.add.at(sec, inv, seconds)
    draws = rng.integers(0, ids.size, size=(n_boot, ids.size))
    return tok[draws].sum(axis=1) / sec[draws].sum(axis=1)


def evaluate(curves: RoundCurves, cost: LatencyModel, *, context_length: float =
             DEFAULT_CONTEXT_LENGTH, grid: tuple[int, ...] = BUDGET_GRID, seed: int = 0
             ) -> list[RuleResult]:
    """Throughput of every fixed budget, the oracle budget and the adaptive rules."""
    grid = tuple(b for b in grid if b <= curves.max_budget)
    round_cost, picks = _chosen_budgets(curves, cost, context_length)
    rows = np.arange(curves.tau.shape[0])
    names = [f"ddtree@{b}" for b in grid] + list(ADAPTIVE)
    budgets = np.column_stack([np.full(rows.size, b) for b in grid]
                              + [picks[m] for m in ADAPTIVE])
    tokens = curves.tau[rows[:, None], budgets]
    seconds = round_cost[budgets]
    point = tokens.sum(axis=0) / seconds.sum(axis=0)
    oracle_col = int(np.argmax(point[: len(grid)]))
    names.append("ddtree-oracle")
    budgets = np.column_stack([budgets, budgets[:, oracle_col]])
    tokens = np.column_stack([tokens, tokens[:, oracle_col]])
    seconds = np.column_stack([seconds, seconds[:, oracle_col]])
    point = tokens.sum(axis=0) / seconds.sum(axis=0)
    boot = _bootstrap_ratio(tokens, seconds, curves.sequence, np.random.default_rng(seed))
    i_oracle, i_longrun = len(names) - 1, names.index("longrun")
    from scipy import stats

    ids, inv = np.unique(curves.sequence, return_inverse=True)
    per_seq = np.zeros((ids.size, tokens.shape[1]))
    np.add.at(per_seq, inv, tokens)
    per_seq /= np.bincount(inv)[:, None]
    tau_half = (stats.t.ppf(0.975, max(ids.size - 1, 1)) * per_seq.std(axis=0, ddof=1)
                / np.sqrt(ids.size)) if ids.size > 1 else np.full(tokens.shape[1], np.nan)
    ar = 1.0 / float(cost.verify_cost(1, context_length))
    out = []
    for j, name in enumerate(names):
        lo, hi = np.percentile(boot[:, j], [2.5, 97.5])
        rel = []
        for base in (i_oracle, i_longrun):
            ratio = boot[:, j] / boot[:, base]
            r_lo, r_hi = np.percentile(ratio, [2.5, 97.5])
            rel.append((float(point[j] / point[base]), float(r_lo), float(r_hi)))
        out.append(RuleResult(
            regime=curves.regime, cost_model=getattr(cost, "name", "custom"), method=name,
            budget_mean=float(budgets[:, j].mean()), tau_mean=float(tokens[:, j].mean()),
            tau_ci=(float(tokens[:, j].mean() - tau_half[j]),
                    float(tokens[:, j].mean() + tau_half[j])),
            round_time_s=float(seconds[:, j].mean()), throughput=float(point[j]),
            ci=(float(lo), float(hi)), speedup_vs_ar=float(point[j] / ar),
            vs_oracle=rel[0], vs_longrun=rel[1]))
    return out


# ----------------------------------------------------------------------------- reporting
def results_table(results: list[RuleResult]) -> str:
    """Markdown: adaptive rules and the oracle vs each other, per (regime, cost model)."""
    lines = ["| regime | cost model | method | mean B | τ | tok/s [95% CI] | speedup vs AR | "
             "vs oracle budget [95% CI] | vs long-run [95% CI] |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.method.startswith("ddtree@"):
            continue
        lines.append(
            f"| {r.regime} | {r.cost_model} | {r.method} | {r.budget_mean:.0f} | "
            f"{r.tau_mean:.2f} | {r.throughput:.1f} [{r.ci[0]:.1f}, {r.ci[1]:.1f}] | "
            f"{r.speedup_vs_ar:.2f}× | {_rel(r.vs_oracle)} | {_rel(r.vs_longrun)} |")
    return "\n".join(lines)


def _rel(x: tuple[float, float, float]) -> str:
    return f"{100 * (x[0] - 1):+.1f}% [{100 * (x[1] - 1):+.1f}, {100 * (x[2] - 1):+.1f}]"


def result_rows(results: list[RuleResult], *, temperature: float, max_budget: int,
                rounds: int) -> list[dict]:
    """The sweep's row form of :func:`evaluate`'s results (``treespec_sim.families.COLUMNS``
    keys plus ``throughput_ci`` and ``vs_longrun``); fixed budgets are method ``ddtree``."""
    rows = []
    for r in results:
        fixed = r.method.startswith("ddtree@")
        rows.append({
            "family": "caddtree", "regime": r.regime,
            "method": "ddtree" if fixed else r.method, "verifier": "follow",
            "temperature": temperature,
            "budget": int(r.method.split("@")[1]) if fixed else max_budget,
            "cost_model": r.cost_model, "rounds": rounds, "tau_mean": r.tau_mean,
            "tau_ci_low": r.tau_ci[0], "tau_ci_high": r.tau_ci[1],
            "tree_size_mean": r.budget_mean, "round_time_s": r.round_time_s,
            "throughput_tok_s": r.throughput, "speedup_vs_ar": r.speedup_vs_ar,
            "rel_to_baseline": r.vs_oracle[0], "rel_ci_low": r.vs_oracle[1],
            "rel_ci_high": r.vs_oracle[2], "baseline": "ddtree-oracle",
            "throughput_ci": list(r.ci), "vs_longrun": list(r.vs_longrun),
        })
    return rows


def _cached_collect(regime: str, *, rounds: int, temperature: float, seed: int,
                    out: Path | None, resume: bool) -> RoundCurves:
    """:func:`collect`, saved atomically under ``out/curves`` and reused with ``resume``."""
    if out is None:
        return collect(regime, rounds=rounds, temperature=temperature, seed=seed)
    path = out / "curves" / f"{regime}__T{temperature!r}__r{rounds}__s{seed}.npz"
    if resume and path.exists():
        with np.load(path) as z:
            return RoundCurves(regime, temperature, z["surrogate"], z["tau"], z["sequence"])
    curves = collect(regime, rounds=rounds, temperature=temperature, seed=seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, surrogate=curves.surrogate, tau=curves.tau,
                        sequence=curves.sequence)
    tmp.replace(path)
    return curves


def run(regimes: list[str], costs: list[str], *, rounds: int, temperature: float,
        seed: int, context_length: float, out: Path | None, resume: bool = False,
        progress: bool = False) -> list[RuleResult]:
    """Collect each regime once, evaluate every cost model; optionally write outputs.

    With ``out``, each regime's round curves are saved as they finish; ``resume`` reuses them.
    """
    results: list[RuleResult] = []
    notes = []
    models = [get_cost_model(c) for c in costs]
    for m in models:
        note = getattr(m, "context_note", lambda _x: None)(context_length)
        if note:
            notes.append(note)
    for regime in regimes:
        if progress:
            print(f"  {regime}: {rounds} rounds", flush=True)
        curves = _cached_collect(regime, rounds=rounds, temperature=temperature, seed=seed,
                                 out=out, resume=resume)
        for m in models:
            results.extend(evaluate(curves, m, context_length=context_length, seed=seed))
    if out is not None:
        import csv
        import json

        out.mkdir(parents=True, exist_ok=True)
        with open(out / "budget_choice.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["regime", "method", "verifier", "temperature", "budget", "cost_model",
                        "rounds", "seed", "tau_mean", "round_time_s", "throughput_tok_s",
                        "throughput_ci_low", "throughput_ci_high", "speedup_vs_ar",
                        "vs_oracle", "vs_oracle_low", "vs_oracle_high"])
            for r in results:
                w.writerow([r.regime, r.method, "follow", temperature, f"{r.budget_mean:.4g}",
                            r.cost_model, rounds, seed, f"{r.tau_mean:.6g}",
                            f"{r.round_time_s:.6g}", f"{r.throughput:.6g}", f"{r.ci[0]:.6g}",
                            f"{r.ci[1]:.6g}", f"{r.speedup_vs_ar:.6g}",
                            *(f"{x:.6g}" for x in r.vs_oracle)])
        (out / "budget_choice.md").write_text(
            f"T = {temperature}, {rounds} rounds per regime, context length "
            f"{context_length:g}, seed {seed}\n\n" + results_table(results) + "\n"
            + "".join(f"\nNote: {n}\n" for n in notes))
        (out / "budget_choice_record.json").write_text(json.dumps({
            "regimes": regimes, "rounds": rounds, "temperature": temperature, "seed": seed,
            "context_length": context_length, "notes": notes,
            "cost_models": [m.to_dict() if not hasattr(m, "node_counts") else
                            {"name": m.name, "provenance": m.provenance,
                             "estimate": m.estimate} for m in models]}, indent=1))
        from ..report import plot_throughput

        plot_throughput(result_rows(results, temperature=temperature, max_budget=1024,
                                    rounds=rounds), out / "throughput_vs_budget.png")
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m treespec_sim.experiments.budget_choice",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--regimes", nargs="+", default=["low-entropy", "mid-entropy",
                                                      "high-entropy"])
    ap.add_argument("--costs", nargs="+",
                    default=["a800-qwen3-8b", "h200-qwen3-8b", "tiled-illustrative"],
                    help="latency presets or latency .json files")
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--context-length", type=float, default=DEFAULT_CONTEXT_LENGTH)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--resume", action="store_true", help="reuse regimes finished in --out")
    args = ap.parse_args(argv)
    if args.resume and args.out is None:
        ap.error("--resume needs --out")
    try:
        results = run(args.regimes, args.costs, rounds=args.rounds,
                      temperature=args.temperature, seed=args.seed,
                      context_length=args.context_length, out=args.out, resume=args.resume,
                      progress=True)
    except ValueError as exc:
        ap.error(str(exc))
    print(results_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
