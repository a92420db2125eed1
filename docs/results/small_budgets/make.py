"""The worlds' tau at small budgets beside the one published budget curve (issue 47, item 5).

The calibration fits DDTree at B = 64 and 512; at large batch sizes the best budgets fall to
4-32 (``docs/results/serving``). This measures, on fresh contexts of every calibrated regime
(8 worlds x 40 contexts, world seeds 300-307, the calibration's per-round convention), the
chain's tau and DDTree's at B = 8 ... 1024 at T = 0 and T = 1 (one nested round per context,
read at every budget), with 95% t-intervals between worlds; and for MATH-500 at T = 0, each
budget's tau relative to B = 512 beside the same ratio of DDTree's published curve
(:data:`treespec_sim.calibration_data.PUBLISHED_BUDGET_CURVE`), so that the two conventions
(fresh contexts here, decoded responses there) cancel.

Run: ``python docs/results/small_budgets/make.py`` (about 2 minutes on one core); writes
``small_budgets.json`` and ``small_budgets.md`` beside itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from treespec_sim import synth
from treespec_sim.calibration_data import CALIBRATED_REGIMES, PUBLISHED_BUDGET_CURVE
from treespec_sim.engine import run_round
from treespec_sim.seeds import cell_rng
from treespec_sim.stats import world_ci

BUDGETS = (8, 16, 32, 64, 128, 256, 512, 1024)
WORLDS = tuple(range(300, 308))
CONTEXTS = 40
HERE = Path(__file__).resolve().parent


def measure(regime: str, temperature: float) -> dict:
    """Per-world means of the chain's tau and DDTree's at every budget."""
    chain, tree = [], []
    for seed in WORLDS:
        world = synth.make_world(regime, seed=seed)
        rng = cell_rng(seed, "small-budgets")
        ch, dd = [], []
        for _ in range(CONTEXTS):
            ctx = world.sample_context(rng)
            common = dict(rule="follow", temperature=temperature, sample=False, rng=rng)
            ch.append(run_round(world, ctx, method="chain", **common).expected_tau)
            curve = run_round(world, ctx, method="ddtree", budget=BUDGETS[-1], nested=True,
                              **common).tau_curve
            dd.append([curve[min(b, curve.size - 1)] for b in BUDGETS])
        chain.append(float(np.mean(ch)))
        tree.append(np.mean(dd, axis=0).tolist())
    return {"chain": chain, "ddtree": tree}


def _ci(values) -> str:
    c = world_ci(values)
    return f"{c.mean:.2f} ± {c.half_width:.2f}"


def main() -> None:
    out = {f"{r}|{t:g}": measure(r, t) for r in CALIBRATED_REGIMES for t in (0.0, 1.0)}
    (HERE / "small_budgets.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = ["# The worlds' τ at small budgets", ""]
    source = (f"Produced by `python docs/results/small_budgets/make.py`: fresh contexts, "
              f"{len(WORLDS)} worlds × {CONTEXTS} contexts per regime and temperature; mean ± "
              "the 95% t-interval's half-width between worlds.")
    for t in (0.0, 1.0):
        lines += [f"## T = {t:g}", "", source, "", "| regime | chain | "
                  + " | ".join(f"B = {b}" for b in BUDGETS) + " |",
                  "|---|---|" + "---|" * len(BUDGETS)]
        for r in CALIBRATED_REGIMES:
            m = out[f"{r}|{t:g}"]
            tree = np.asarray(m["ddtree"])
            lines.append(f"| {r} | {_ci(m['chain'])} | "
                         + " | ".join(_ci(tree[:, i]) for i in range(len(BUDGETS))) + " |")
        lines.append("")
    m = np.asarray(out["math500|0"]["ddtree"])
    at512 = m[:, BUDGETS.index(512)]
    pub = PUBLISHED_BUDGET_CURVE["tau"]
    lines += ["## MATH-500, T = 0: τ(B) / τ(512), worlds against DDTree's published curve", "",
              "Produced by `python docs/results/small_budgets/make.py`: each world's τ(B) over "
              "its τ(512), the 95% t-interval between worlds, beside the same ratio of "
              "`calibration_data.PUBLISHED_BUDGET_CURVE`.", "",
              "| B | worlds | published | worlds − published |", "|---|---|---|---|"]
    for i, b in enumerate(BUDGETS):
        ratio = m[:, i] / at512
        c = world_ci(ratio)
        p = pub.get(b)
        tail = (f"{p / pub[512]:.3f} | {c.mean - p / pub[512]:+.3f} "
                f"[{c.low - p / pub[512]:+.3f}, {c.high - p / pub[512]:+.3f}]"
                if p else "— | —")
        lines.append(f"| {b} | {c.mean:.3f} [{c.low:.3f}, {c.high:.3f}] | {tail} |")
    (HERE / "small_budgets.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
