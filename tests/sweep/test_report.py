"""The sweep's report: the summary (calibration section, cost models, claims that do not hold
linked to their pages), the results page, and the figures (stacked lost-mass bars, legends
inside the canvas, labelled intervals)."""

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from treespec_sim.calibrate import (
    CALIBRATED_REGIMES,
    CALIBRATION_FILE,
    CELL_LABELS,
    CELLS,
    QUANTITIES,
    calibration_rows,
    table1_targets,
)
from treespec_sim.families.caddtree import CaDDTreeRow
from treespec_sim.families.ddtree import DDTreeRow
from treespec_sim.families.stochastic import StochasticRow
from treespec_sim.families.verifiers import VerifierRow
from treespec_sim.report import summary_markdown

RECORD = {"preset": "test", "cells": 1, "seed": 0, "git_commit": "0" * 40,
          "cost_model": "h200-qwen3-8b", "figures": []}


@pytest.fixture(scope="module")
def stored() -> dict:
    return json.loads(CALIBRATION_FILE.read_text())


def row(schema, **values):
    """A row of ``schema`` with neutral values for the required fields a test does not set."""
    base = {"regime": "a", "method": "ddtree", "verifier": "follow", "temperature": 0.0,
            "budget": 64, "rounds": 64, "tau_mean": 1.0, "tau_ci_low": 1.0, "tau_ci_high": 1.0}
    if schema is StochasticRow:
        base["drafter"] = "none"
    if schema is CaDDTreeRow:
        base["cost_model"] = "h200-qwen3-8b"
    return schema(**{**base, **values})


def ddtree_rows(regime: str) -> list[DDTreeRow]:
    """A chain row and a DDTree B = 64 row at T = 0, enough for the DDTree tables."""
    common = {"regime": regime, "verifier": "follow", "temperature": 0.0, "rounds": 64,
              "tau_mean": 5.0,
              "tau_ci_low": 4.9, "tau_ci_high": 5.1, "throughput_tok_s": 100.0,
              "cost_model": "h200-qwen3-8b", "lost_uncovered": 0.5, "lost_budget": 0.3,
              "lost_depth_cap": 0.2, "coverage_mean": 4.0}
    return [DDTreeRow(**common, method="chain", budget=15),
            DDTreeRow(**common, method="ddtree", budget=64)]


def section(summary: str) -> list[str]:
    lines = summary.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("## Calibration"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    return lines[start:end]


def _table(sec: list[str]) -> dict[str, list[str]]:
    return {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]]
            for ln in sec if ln.startswith("| ") and not ln.startswith("| regime")}


def test_summary_has_a_calibration_section_for_calibrated_regimes(stored):
    """The section sets every published cell beside this run's rows, recomputed here from the
    rows and the published table; only the sweep's calibrated regimes appear."""
    rows = ddtree_rows("gsm8k") + ddtree_rows("mt-bench") + ddtree_rows("mid-entropy")
    summary = summary_markdown(rows, RECORD)
    assert summary.index("## Calibration") < summary.index("## DDTree across budgets")
    sec = section(summary)
    text = "\n".join(sec)
    assert "docs/results/calibration.md" in text and "treespec_sim.calibrate" in text
    assert "arXiv 2506.01939" in text and "0.672" in text
    head = next(ln for ln in sec if ln.startswith("| regime"))
    assert [c.strip() for c in head.split("|")[2:8]] == [CELL_LABELS[q] for q in CELLS]
    table = _table(sec)
    assert set(table) == {"gsm8k", "mt-bench"}            # only the sweep's calibrated regimes
    targets = table1_targets()
    for name, cells in table.items():
        assert len(cells) == len(CELLS) + 3
        for q, cell in zip(CELLS, cells, strict=False):
            t = targets[name][q]
            star = "" if t["published"] else "*"
            if q == "chain":          # the rows' chain at T = 0: 5.0 [4.9, 5.1]
                rel = 100 * (5.0 / t["value"] - 1)
                assert cell == f"{t['value']:.2f}{star} → 5.00 [4.90, 5.10] ({rel:+.1f}%)"
            elif q == "ddtree64":
                assert cell.startswith(f"{t['value']:.2f}{star} → 5.00 [4.90, 5.10]")
            else:                     # no row at B = 512 or at T = 1
                assert cell == f"{t['value']:.2f}{star} → —"
        h = stored["regimes"][name]["achieved"].get("entropy_t1")
        assert cells[-2] == (f"{h['median']:.3f} / {h['p80']:.3f}" if h else "—")
        assert cells[-3].startswith("no (chain T = 0")   # 5.0 is far from every chain target
    assert table["gsm8k"][0].startswith("6.57 → ") and table["mt-bench"][0].startswith("4.28 → ")
    # measured: the chain and DDTree@64 at T = 0 of both regimes, all four published
    assert "**0 of 4 published cells within ±5%**" in text


def test_the_calibration_section_reads_the_most_precise_row_and_the_regimes_drafter():
    from treespec_sim.report import _calibration_section

    rows = ddtree_rows("gsm8k")
    # another family's chain at T = 0 on more contexts, and on another drafter on still more
    more = row(StochasticRow, regime="gsm8k", method="chain", budget=15, rounds=900,
               tau_mean=6.5, tau_ci_low=6.45, tau_ci_high=6.55)
    variant = replace(more, rounds=5000, drafter="corrected", tau_mean=1.0)
    rows = [*rows, more, variant]
    cells = _table(_calibration_section(rows))["gsm8k"]
    assert cells[0] == "6.57 → 6.50 [6.45, 6.55] (-1.1%)"


def _synthetic_entry(t1: bool) -> dict:
    """One regime of a calibration file, with or without the T = 1 quantity."""
    target = {"chain": 6.57, "chain_derivation": "published (DDTree Table 1)",
              "ddtree64": 8.49, "ddtree64_derivation": "published (TEV Table 1)"}
    achieved = {"chain": {"mean": 6.45, "se": 0.08, "n": 300},
                "ddtree64": {"mean": 9.10, "se": 0.07, "n": 300},
                "world_seeds": [100, 101, 102], "context_seed": 1, "contexts": 300}
    if t1:
        target.update(ddtree64_t1=7.84, ddtree64_t1_derivation="from MATH-500's ratio")
        achieved.update(ddtree64_t1={"mean": 7.9012, "se": 0.0468, "n": 300},
                        per_world={"chain": [6.1, 6.5, 6.75], "ddtree64": [9.0, 9.1, 9.2],
                                   "ddtree64_t1": [7.8, 7.95, 7.95]},
                        entropy_t1={"median": 0.0849, "p80": 0.5489, "share_below_0.05": 0.4267,
                                    "share_above_1": 0.0258})
    return {"family": "math-code", "target": target, "achieved": achieved,
            "knobs": {"variant_noise": 0.3, "depth_sharpening": 0.0, "calibration": 0.15,
                      "logit_scale": 5.0}, "within_tolerance": False}


def test_calibration_section_shows_the_stored_fits_entropy():
    from treespec_sim.report import _calibration_section

    data = {"regimes": {"gsm8k": _synthetic_entry(True)}}
    cells = _table(_calibration_section(ddtree_rows("gsm8k"), data))["gsm8k"]
    assert cells[-2:] == ["0.085 / 0.549", "43%"]
    # a file from before the T = 1 fit has no entropy: dashes
    old = {"regimes": {"gsm8k": _synthetic_entry(False)}}
    assert _table(_calibration_section(ddtree_rows("gsm8k"), old))["gsm8k"][-2:] == ["—", "—"]
    assert _calibration_section(ddtree_rows("tiny"), data) == []


def test_calibration_rows_filter_and_order(stored):
    every = calibration_rows()
    assert [r["regime"] for r in every] == list(CALIBRATED_REGIMES)
    assert calibration_rows(stored) == every
    some = calibration_rows(regimes=["alpaca", "tiny", "math500"])
    assert [r["regime"] for r in some] == ["math500", "alpaca"]
    alpaca = some[1]
    e = stored["regimes"]["alpaca"]
    assert alpaca["chain_target"] == e["target"]["chain"] and alpaca["chain_published"]
    assert alpaca["ddtree64_target"] == e["target"]["ddtree64"]
    assert not alpaca["ddtree64_published"]
    assert alpaca["ddtree64_mean"] == e["achieved"]["ddtree64"]["mean"]
    if all(q in e["target"] for q in QUANTITIES):
        assert alpaca["within"] == e["within_tolerance"]
        assert not alpaca["ddtree64_t1_published"]                # derived from MT-Bench's
    assert calibration_rows({}, regimes=["alpaca"]) == []


def test_results_page_embeds_the_run_and_its_figures(tmp_path):
    from treespec_sim.families import DDTreeGrid
    from treespec_sim.report import main, results_page
    from treespec_sim.sweep import Plan, run_plan

    run = tmp_path / "docs" / "results" / "run"
    run_plan(Plan((DDTreeGrid(("small",), budgets=(2, 4), temperatures=(0.0,), rounds=4),)),
             run, progress=False, plot=True, preset="tiny-test")
    page = tmp_path / "docs" / "results.md"
    text = results_page(run, page)
    assert page.read_text() == text
    assert text.startswith("# Results: the `tiny-test` sweep")
    summary = (run / "summary.md").read_text().splitlines()
    # the summary body, verbatim but for its links, which the page writes relative to itself
    unlinked = lambda t: re.sub(r"\]\([^)\s]+\)", "]()", t)  # noqa: E731
    assert unlinked("\n".join(summary[1:]).strip()) in unlinked(text)
    assert "## Findings" in text
    images = [line[line.index("](") + 2: -1] for line in text.splitlines()
              if line.startswith("![")]
    assert images and all((page.parent / i).exists() for i in images)
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing"), "--page", str(page)])


# ----------------------------------------------------------------------------- figures
@pytest.fixture
def captured(monkeypatch):
    """Every figure a plotting function saves (it closes them; we keep a reference)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figs = []
    save = Figure.savefig

    def keep(self, *args, **kwargs):
        figs.append(self)
        return save(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figs


def lost_rows(split: bool = True) -> list[dict]:
    """DDTree rows of two regimes at T = 0, 1 and B = 16, 64 with exits by depth and cause."""
    rng = np.random.default_rng(0)
    rows = []
    for regime in ("mid-entropy", "alpaca"):
        for t in (0.0, 1.0):
            for b in (16, 64):
                table = rng.dirichlet(np.ones(3 * 16)).reshape(16, 3)
                table[-1, :2] = 0       # only leaves at depth L: all depth cap
                table[:-1, 2] = 0
                table /= table.sum()
                rows.append(row(
                    DDTreeRow, regime=regime, method="ddtree", temperature=t, budget=b,
                    rounds=64, exit_by_depth=table.sum(axis=1).tolist(),
                    exit_by_depth_cause=table.tolist() if split else None,
                    **{f"lost_{c}": float(x) for c, x in
                       zip(("uncovered", "budget", "depth_cap"), table.sum(axis=0),
                           strict=True)}))
    return rows


def _inside(inner, outer, tol: float = 1.0) -> bool:
    return (inner.x0 >= outer.x0 - tol and inner.y0 >= outer.y0 - tol
            and inner.x1 <= outer.x1 + tol and inner.y1 <= outer.y1 + tol)


def _legends_inside(fig) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)   # closing the figure detached its canvas
    canvas.draw()
    renderer = canvas.get_renderer()
    for leg in fig.legends:
        assert _inside(leg.get_window_extent(renderer), fig.bbox), "figure legend clipped"
    for ax in fig.axes:
        if ax.get_legend() is not None:
            assert _inside(ax.get_legend().get_window_extent(renderer),
                           ax.get_window_extent(renderer)), f"legend outside {ax.get_title()}"


@pytest.mark.parametrize("split", [True, False])
def test_lost_mass_bars_stack_to_the_exit_law(tmp_path, captured, split):
    from treespec_sim.families.ddtree_report import plot_lost_mass

    rows = lost_rows(split)
    plot_lost_mass(rows, tmp_path / "lost.png")
    assert (tmp_path / "lost.png").exists()
    fig, = captured
    axes = [ax for ax in fig.axes if ax.patches]
    shown = [r for r in rows if r.temperature == 0.0 and r.budget == 64]
    assert len(axes) == len(shown) == 2
    for ax, r in zip(axes, shown, strict=True):
        assert r.regime in ax.get_title() and "B = 64" in ax.get_title()
        heights = np.zeros(16)
        for bar in ax.patches:
            heights[round(bar.get_x() + bar.get_width() / 2)] += bar.get_height()
        np.testing.assert_allclose(heights, r.exit_by_depth, atol=1e-12)
        assert heights.sum() == pytest.approx(1.0)   # every continuation leaves somewhere
        ticks = ax.get_xticks()
        assert np.array_equal(ticks, np.round(ticks)) and set(ticks) == set(range(16))
        texts = [x.get_text() for x in ax.get_legend().get_texts()]
        assert texts[1:] == [f"budget: {r.lost_budget:.2f}",
                             f"depth cap: {r.lost_depth_cap:.2f}"]
        assert texts[0].startswith("uncovered" if split else "uncovered or budget")
        if split:   # per cause, the bars of a panel add up to that cause's total
            by_color: dict = {}
            for bar in ax.patches:
                key = tuple(np.round(bar.get_facecolor(), 6))
                by_color[key] = by_color.get(key, 0.0) + bar.get_height()
            assert sorted(by_color.values()) == pytest.approx(sorted(
                r.get(f"lost_{c}") for c in ("uncovered", "budget", "depth_cap")))
    legend = " ".join(t.get_text() for t in fig.legends[0].get_texts())
    for spelled in ("none of the node's children carry", "above the depth limit",
                    "at the drafter's depth L"):
        assert spelled in legend
    assert "mean over 64 contexts" in fig.legends[0].get_title().get_text()
    _legends_inside(fig)


def test_every_sweep_figure_keeps_its_legends_and_labels_its_intervals(tmp_path, captured):
    from treespec_sim.families import DDTreeGrid, StochasticGrid, VerifierGrid
    from treespec_sim.sweep import Plan, run_plan

    plan = Plan((DDTreeGrid(("small",), budgets=(2, 4), temperatures=(0.0, 1.0), rounds=4),
                 StochasticGrid(("small",), temperatures=(0.0, 1.0), budgets=(4,), rounds=4,
                                methods=("chain", "ddtree", "tsubame-rrsw")),
                 VerifierGrid(("small",), shapes=("2x2",), rounds=4)))
    run_plan(plan, tmp_path, progress=False, plot=True, preset="tiny-test")
    names = sorted(p.name for p in tmp_path.glob("*.png"))
    assert names == ["lost_mass_by_depth.png", "tau_vs_budget.png", "tau_vs_temperature.png",
                     "verifier_gains.png"]
    assert len(captured) == 4
    labels = []
    for fig in captured:
        _legends_inside(fig)
        labels += [t.get_text() for leg in fig.legends for t in leg.get_texts()]
        labels += [leg.get_title().get_text() for leg in fig.legends]
        labels += [ax.get_title() for ax in fig.axes]
    text = " ".join(" ".join(labels).split())  # legend titles wrap their lines
    assert "95% t-interval over 4 contexts" in text                  # τ bands and bars
    assert "95% percentile-bootstrap interval over 4 contexts" in text  # verifier gains


def test_interval_label_names_the_unit_of_each_family():
    from treespec_sim.families import caddtree_report, ddtree_report

    assert ddtree_report.interval_label([row(DDTreeRow, rounds=64)]) == \
        "95% t-interval over 64 contexts"
    assert caddtree_report.interval_label([row(CaDDTreeRow, rounds=96)]).startswith(
        "95% percentile-bootstrap interval over 96 decoded rounds")


# ----------------------------------------------------------------------------- wording
def verifier_rows() -> list[VerifierRow]:
    base = {"regime": "alpaca", "temperature": 1.0, "method": "sampled-tree[2x4]",
            "tau_mean": 3.0, "rounds": 48}
    return [row(VerifierRow, **base, verifier="rrsw", rel_to_baseline=1.0, rel_ci_low=1.0,
                rel_ci_high=1.0),
            row(VerifierRow, **base, verifier="traversal", rel_to_baseline=1.05,
                rel_ci_low=1.01, rel_ci_high=1.09),
            row(VerifierRow, **base, verifier="univer", rel_to_baseline=0.95, rel_ci_low=0.92,
                rel_ci_high=0.98)]


def stochastic_rows(repeat: int = 8) -> list[StochasticRow]:
    """One stochastic cell, each method's four values repeated ``repeat`` times (32 contexts:
    a verdict needs 30)."""
    base = {"regime": "alpaca", "drafter": "corrected", "temperature": 1.0, "budget": 64,
            "rounds": 4 * repeat, "verifier": "rrsw"}
    taus = {"tsubame-rrsw": [3.0, 3.2, 3.1, 3.3], "tsubame-univer": [2.5, 2.8, 2.6, 2.7],
            "ddtree": [2.0, 2.1, 2.2, 2.0]}
    return [row(StochasticRow, **base, method=m, taus=t * repeat, tau_mean=float(np.mean(t)))
            for m, t in taus.items()]


def test_summary_names_cost_models_and_links_claims_that_do_not_hold():
    summary = summary_markdown(ddtree_rows("tiny") + verifier_rows() + stochastic_rows(),
                               RECORD)
    assert "modelled, not measured" in summary and "`h200-qwen3-8b`" in summary
    assert "best B (tok/s, cost model)" in summary
    lines = summary.splitlines()
    univer = next(ln for ln in lines if "| univer |" in ln)
    assert "**does not hold**: the interval lies entirely below the claimed range " \
        "([+4.2%, +8.5%])" in univer and "docs/theory/univer.md#" in univer
    traversal = next(ln for ln in lines if "| traversal |" in ln)
    assert traversal.endswith("| holds |") and "docs/theory" not in traversal
    reversed_ = next(ln for ln in lines if ln.startswith("| Tsubame-UniVer vs Tsubame-RRSw |"))
    assert "**does not hold**: the interval lies entirely below the claimed range (> 0)" \
        in reversed_ and "docs/theory/univer.md#" in reversed_
    holds = next(ln for ln in lines if ln.startswith("| Tsubame-RRSw vs deterministic tree |"))
    assert holds.endswith("| a > b | holds |")
    assert "UniVer that never falls below Traversal" in summary


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    import re

    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_summary_links_point_at_existing_headings():
    import re
    from pathlib import Path

    from treespec_sim.families.render import PAGE_NOTES

    root = Path(__file__).resolve().parents[2]
    links = {m for text in (*PAGE_NOTES, *PAGE_NOTES.values())
             for m in re.findall(r"\]\((docs/[^)#]+)#([^)]+)\)", text)}
    assert links
    for path, anchor in links:
        headings = [ln.lstrip("#") for ln in (root / path).read_text().splitlines()
                    if ln.startswith("#")]
        assert anchor in {_slug(h) for h in headings}, (path, anchor)


def test_results_page_rewrites_doc_links_relative_to_the_page(tmp_path):
    from treespec_sim.report import results_page

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"preset": "x", "figures": []}))
    (run / "summary.md").write_text("# t\n\nsee [u](docs/theory/univer.md#a)\n")
    import os

    docs = Path(__file__).resolve().parents[2] / "docs"
    text = results_page(run, tmp_path / "pages" / "results.md")
    rel = Path(os.path.relpath(docs, (tmp_path / "pages").resolve())).as_posix()
    assert f"[u]({rel}/theory/univer.md#a)" in text
    assert (tmp_path / "pages" / rel / "theory" / "univer.md").exists()


# ----------------------------------------------------------------------------- worlds
def _hand_t(values) -> tuple[float, float]:
    from scipy import stats as sps

    v = np.asarray(values, dtype=np.float64)
    half = sps.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size)
    return float(v.mean() - half), float(v.mean() + half)


def _row_of(lines: list[str], start: str) -> list[str]:
    line = next(ln for ln in lines if ln.startswith(start))
    return [c.strip() for c in line.split("|")[1:-1]]


def test_tables_show_the_between_world_interval_beside_the_pooled_one(tmp_path):
    from treespec_sim.families import CaDDTreeGrid, DDTreeGrid, StochasticGrid, VerifierGrid
    from treespec_sim.sweep import Plan, run_plan

    plan = Plan((DDTreeGrid(("small",), budgets=(2, 4), temperatures=(1.0,), rounds=9),
                 CaDDTreeGrid(("small",), rounds=9, max_budget=16,
                              cost_models=("h200-qwen3-8b",)),
                 StochasticGrid(("small",), temperatures=(1.0,), budgets=(4,), rounds=9,
                                methods=("ddtree", "tsubame-rrsw")),
                 VerifierGrid(("small",), shapes=("2x2",), rounds=9)))
    rows = run_plan(plan, tmp_path, progress=False, plot=False, preset="worlds-test")
    lines = (tmp_path / "summary.md").read_text().splitlines()
    text = "\n".join(lines)
    # the note on the two intervals, and which kind each table shows
    assert "**Two kinds of interval.**" in text
    assert "2 with 3 worlds: the 97.5% t quantile is 4.30" in text
    assert "each regime is 3 synthetic worlds (world seeds 0 to 2)" in text
    assert "95% t-interval over the 9 contexts of its 3 worlds pooled" in text
    assert "vs RRSw (pooled, bootstrap) | vs RRSw between worlds (t)" in text
    assert "CaDDTree vs oracle (pooled, bootstrap) | CaDDTree vs oracle between worlds (t)" \
        in text
    assert "Δτ = a − b [95% CI, contexts pooled]" in text and "Δτ between worlds" in text
    # DDTree: a pooled row and a between-world row per regime
    dd = {r.budget: r for r in rows if r.family == "ddtree" and r.method == "ddtree"}
    pooled, worlds = _row_of(lines, "| small |"), _row_of(lines, "| ↳ 3 worlds |")
    r = dd[4]
    assert pooled[3] == f"{r.tau_mean:.2f} [{r.tau_ci_low:.2f}, {r.tau_ci_high:.2f}]"
    lo, hi = _hand_t(r.tau_world_means)
    each = " / ".join(f"{x:.2f}" for x in r.tau_world_means)
    assert worlds[3] == f"[{lo:.2f}, {hi:.2f}] ({each})"
    # verifiers: each world's gain, and the t-interval over them
    v = next(r for r in rows if r.family == "verifiers" and r.verifier == "traversal")
    cells = _row_of(lines, "| small | 1 | sampled-tree[2x2] | traversal |")
    gains = [100 * (x - 1) for x in v.rel_world_means]
    lo, hi = _hand_t(gains)
    assert cells[6] == (f"{np.mean(gains):+.1f}% [{lo:+.1f}%, {hi:+.1f}%] ("
                        + " / ".join(f"{g:+.1f}%" for g in gains) + ")")
    # stochastic: the per-world paired differences
    st = {r.method: r for r in rows if r.family == "stochastic"}
    diff = np.subtract(st["tsubame-rrsw"].tau_world_means, st["ddtree"].tau_world_means)
    lo, hi = _hand_t(diff)
    cells = _row_of(lines, "| Tsubame-RRSw vs deterministic tree |")
    assert cells[6] == (f"{diff.mean():+.2f} [{lo:+.2f}, {hi:+.2f}] ("
                        + " / ".join(f"{d:+.2f}" for d in diff) + ")")
    # 9 contexts a cell: a smoke test, numbers without verdicts (the pooled-only wording:
    # test_a_claim_that_holds_pooled_only_says_so)
    assert cells[-1] == "no verdict (smoke test: 9 contexts, below the 30 a verdict needs)"
    assert text.index("**Smoke test, not a result.**") < text.index("## Findings")


def test_a_claim_that_holds_pooled_only_says_so():
    # three worlds; Tsubame-RRSw - DDTree is +1.08 pooled, spread over worlds
    spread = {"tsubame-rrsw": [3.6, 2.8, 3.0], "tsubame-univer": [2.6] * 3,
              "ddtree": [2.0, 2.1, 2.2]}
    rows = [replace(r, tau_world_means=spread[r.method]) for r in stochastic_rows()]
    lines = summary_markdown(rows, RECORD).splitlines()
    cells = _row_of(lines, "| Tsubame-RRSw vs deterministic tree |")
    assert cells[6].startswith("+1.03 [") and cells[-1] == "holds pooled; not shown between worlds"
    assert "Smoke test" not in "\n".join(lines)
    rows = [replace(r, tau_world_means=[x + 0.05 * i for i, x in enumerate([r.tau_mean] * 3)])
            for r in rows]
    lines = summary_markdown(rows, RECORD).splitlines()
    assert _row_of(lines, "| Tsubame-RRSw vs deterministic tree |")[-1] == \
        "holds, also between worlds"


def test_interval_labels_say_pooled_over_worlds():
    from treespec_sim.families import caddtree_report, ddtree_report

    assert ddtree_report.interval_label([row(DDTreeRow, rounds=63, worlds=3)]) == \
        "95% t-interval over 63 contexts pooled over 3 worlds"
    assert caddtree_report.interval_label([row(CaDDTreeRow, rounds=96, worlds=3)]) == \
        ("95% percentile-bootstrap interval over 96 decoded rounds pooled over 3 worlds "
         "(resampled by sequence)")


def test_rows_of_one_world_say_so():
    from treespec_sim.report import summary_markdown

    base = ddtree_rows("tiny")
    one = [replace(r, worlds=1, tau_world_means=[5.0], tau_world_ci_low=float("nan"),
                   tau_world_ci_high=float("nan")) for r in base]
    text = summary_markdown(one, RECORD)
    assert "| ↳ 1 world | (5.00) | one world (5.00) | |" in text
    assert "One world per regime" in text and "Two kinds of interval" not in text


# ----------------------------------------------------------------------------- links
def _relative_links(text: str) -> list[str]:
    import re

    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text)
            if not re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", t)]


def _resolve_from(folder: Path, links: list[str]) -> None:
    """Every link names an existing file seen from ``folder`` (and an anchor it has)."""
    assert links
    for link in links:
        path, _, anchor = link.partition("#")
        target = folder / path
        assert target.is_file(), (folder, link)
        if anchor:
            headings = {_slug(ln.lstrip("#")) for ln in target.read_text().splitlines()
                        if ln.startswith("#")}
            assert anchor in headings, link


def test_summary_links_work_from_the_folder_it_is_written_to(tmp_path):
    rows = ddtree_rows("tiny") + verifier_rows() + stochastic_rows()
    (tmp_path / "runs" / "deep" / "x").mkdir(parents=True)
    for folder in (tmp_path / "runs" / "deep" / "x", Path(__file__).resolve().parent):
        text = summary_markdown(rows, RECORD, folder=folder)
        links = _relative_links(text)
        assert not any(t.startswith("docs/") for t in links)
        _resolve_from(folder, links)
    # without a folder: from the repository root, as before
    _resolve_from(Path(__file__).resolve().parents[2],
                  _relative_links(summary_markdown(rows, RECORD)))


def test_the_sweeps_summary_links_resolve_where_it_lies_and_on_its_page(tmp_path):
    from treespec_sim.families import StochasticGrid, VerifierGrid
    from treespec_sim.report import results_page
    from treespec_sim.sweep import Plan, run_plan

    run = tmp_path / "a" / "b" / "run"
    run_plan(Plan((StochasticGrid(("small",), budgets=(4,), temperatures=(1.0,), rounds=4),
                   VerifierGrid(("small",), shapes=("2x2",), rounds=4))), run,
             progress=False, plot=False)
    _resolve_from(run, _relative_links((run / "summary.md").read_text()))
    page = tmp_path / "pages" / "results.md"
    _resolve_from(page.parent, _relative_links(results_page(run, page)))


def test_summary_lists_the_cells_priced_outside_a_models_measurements():
    rows = ddtree_rows("tiny")
    assert "outside its measured range" not in summary_markdown(rows, RECORD)
    note = {"cell": "caddtree__math500__T0.0__B1024", "model": "a800-qwen3-8b",
            "kind": "TabulatedCost", "axis": "tokens", "requested": [1, 1025],
            "measured": [0, 512], "action": "above: the last measured slope extended"}
    ctx = dict(note, axis="context", requested=[9000, 9000], measured=[1, 8000],
               action="clamped to the nearest measured context")
    text = summary_markdown(rows, dict(RECORD, extrapolated=[note, ctx]))
    lines = text.splitlines()
    start = lines.index("## Latency priced outside its measured range")
    assert start < next(i for i, ln in enumerate(lines) if ln.startswith("## DDTree across"))
    assert "1 cell(s) asked a latency model" in lines[start + 2]
    table = [ln for ln in lines[start:] if ln.startswith("| `caddtree__math500")]
    assert table == [
        "| `caddtree__math500__T0.0__B1024` | `a800-qwen3-8b` | tokens | 1..1025 tokens | "
        "0..512 tokens | above: the last measured slope extended |",
        "| `caddtree__math500__T0.0__B1024` | `a800-qwen3-8b` | context | 9000..9000 | "
        "1..8000 | clamped to the nearest measured context |"]


def test_an_undecided_claim_says_how_many_contexts_would_decide_it():
    # Tsubame-UniVer vs Tsubame-RRSw: paired differences whose CI spans 0 on 32 contexts; the
    # verdict says so and gives n (h / d)^2: d the estimate's distance to the edge 0, h the
    # interval's reach past the estimate on that side.
    rows = stochastic_rows()
    rrsw = next(r for r in rows if r.method == "tsubame-rrsw")
    taus = [x + d for x, d in zip(rrsw.taus, [0.4, -0.3, 0.2, -0.1] * 8, strict=True)]
    rows = [replace(r, taus=taus, tau_mean=float(np.mean(taus)))
            if r.method == "tsubame-univer" else r for r in rows]
    line = next(ln for ln in summary_markdown(rows, RECORD).splitlines()
                if ln.startswith("| Tsubame-UniVer vs Tsubame-RRSw |"))
    diff = np.subtract(taus, rrsw.taus)
    lo, hi = _hand_t(diff)
    mean = float(diff.mean())
    assert lo < 0 < mean < hi   # inside the claim (> 0), its interval across the edge 0
    need = int(np.ceil(32 * ((mean - lo) / mean) ** 2))
    assert f"undecided: the interval crosses 0 on 32 contexts; ≈ {need:,} would decide it" \
        in line


def test_cells_of_a_precision_run_give_their_context_range():
    # A precision target gives every cell its own number of contexts: the text says the range
    # (in numeric order), not a list of every count.
    rows = [replace(r, rounds=n) for n, r in zip([642, 7596, 1950, 888], ddtree_rows("tiny")
                                                  + ddtree_rows("tinier"), strict=True)]
    text = summary_markdown(rows, RECORD)
    assert "over the 642 to 7,596 (each row's `rounds`) contexts" in text
    fixed = summary_markdown([replace(r, rounds=63) for r in ddtree_rows("tiny")], RECORD)
    assert "over the 63 contexts" in fixed
