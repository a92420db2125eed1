"""The sweep's report: the summary (calibration section, cost models, claims that do not hold
linked to their pages), the results page, and the figures (stacked lost-mass bars, legends
inside the canvas, labelled intervals)."""

import json
from pathlib import Path

import numpy as np
import pytest

from treespec_sim.calibrate import CALIBRATED_REGIMES, CALIBRATION_FILE, calibration_rows
from treespec_sim.report import summary_markdown

RECORD = {"preset": "test", "cells": 1, "seed": 0, "git_commit": "0" * 40,
          "cost_model": "h200-qwen3-8b", "figures": []}


@pytest.fixture(scope="module")
def stored() -> dict:
    return json.loads(CALIBRATION_FILE.read_text())


def ddtree_rows(regime: str) -> list[dict]:
    """A chain row and a DDTree B = 64 row at T = 0, enough for the DDTree tables."""
    common = {"family": "ddtree", "regime": regime, "temperature": 0.0, "tau_mean": 5.0,
              "tau_ci_low": 4.9, "tau_ci_high": 5.1, "throughput_tok_s": 100.0,
              "cost_model": "h200-qwen3-8b", "lost_uncovered": 0.5, "lost_budget": 0.3,
              "lost_depth_cap": 0.2, "coverage_mean": 4.0}
    return [dict(common, method="chain", budget=15), dict(common, method="ddtree", budget=64)]


def section(summary: str) -> list[str]:
    lines = summary.splitlines()
    start = lines.index("## Calibration")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    return lines[start:end]


def test_summary_has_a_calibration_section_for_calibrated_regimes(stored):
    rows = ddtree_rows("gsm8k") + ddtree_rows("mt-bench") + ddtree_rows("mid-entropy")
    summary = summary_markdown(rows, RECORD)
    assert summary.index("## Calibration") < summary.index("## DDTree across budgets")
    sec = section(summary)
    text = "\n".join(sec)
    assert "docs/results/calibration.md" in text
    assert "python -m treespec_sim.calibrate" in text
    table = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]]
             for ln in sec if ln.startswith("| ") and not ln.startswith("| regime")}
    assert set(table) == {"gsm8k", "mt-bench"}            # only the sweep's calibrated regimes
    for name, cells in table.items():
        e = stored["regimes"][name]
        t, a = e["target"], e["achieved"]
        star = {q: "" if t[f"{q}_derivation"].startswith("published") else "*"
                for q in ("chain", "ddtree64")}
        assert cells[:4] == [f"{t['chain']:.2f}{star['chain']}",
                             f"{a['chain']['mean']:.2f} ± {a['chain']['se']:.2f}",
                             f"{t['ddtree64']:.2f}{star['ddtree64']}",
                             f"{a['ddtree64']['mean']:.2f} ± {a['ddtree64']['se']:.2f}"]
        assert cells[4].split()[0] == ("yes" if e["within_tolerance"] else "no")
    assert table["gsm8k"][0] == "6.57" and table["gsm8k"][2] == "8.49"      # published
    assert table["mt-bench"][0].endswith("*") and table["mt-bench"][2] == "5.54"


def test_summary_without_calibrated_regimes_has_no_calibration_section():
    summary = summary_markdown(ddtree_rows("mid-entropy") + ddtree_rows("tiny"), RECORD)
    assert "## Calibration" not in summary
    assert "calibration.md" not in summary
    assert "## DDTree across budgets" in summary
    assert "## Calibration" not in summary_markdown([], RECORD)


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
    assert alpaca["within"] == e["within_tolerance"]
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
    assert "\n".join(summary[1:]).strip() in text  # the summary body, verbatim
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
                row = {"family": "ddtree", "regime": regime, "method": "ddtree",
                       "temperature": t, "budget": b, "rounds": 64,
                       "exit_by_depth": table.sum(axis=1).tolist(),
                       **{f"lost_{c}": float(x) for c, x in
                          zip(("uncovered", "budget", "depth_cap"), table.sum(axis=0),
                              strict=True)}}
                if split:
                    row["exit_by_depth_cause"] = table.tolist()
                rows.append(row)
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
    from treespec_sim.report import plot_lost_mass

    rows = lost_rows(split)
    plot_lost_mass(rows, tmp_path / "lost.png")
    assert (tmp_path / "lost.png").exists()
    fig, = captured
    axes = [ax for ax in fig.axes if ax.patches]
    shown = [r for r in rows if r["temperature"] == 0.0 and r["budget"] == 64]
    assert len(axes) == len(shown) == 2
    for ax, r in zip(axes, shown, strict=True):
        assert r["regime"] in ax.get_title() and "B = 64" in ax.get_title()
        heights = np.zeros(16)
        for bar in ax.patches:
            heights[round(bar.get_x() + bar.get_width() / 2)] += bar.get_height()
        np.testing.assert_allclose(heights, r["exit_by_depth"], atol=1e-12)
        assert heights.sum() == pytest.approx(1.0)   # every continuation leaves somewhere
        ticks = ax.get_xticks()
        assert np.array_equal(ticks, np.round(ticks)) and set(ticks) == set(range(16))
        texts = [x.get_text() for x in ax.get_legend().get_texts()]
        assert texts[1:] == [f"budget: {r['lost_budget']:.2f}",
                             f"depth cap: {r['lost_depth_cap']:.2f}"]
        assert texts[0].startswith("uncovered" if split else "uncovered or budget")
        if split:   # per cause, the bars of a panel add up to that cause's total
            by_color: dict = {}
            for bar in ax.patches:
                key = tuple(np.round(bar.get_facecolor(), 6))
                by_color[key] = by_color.get(key, 0.0) + bar.get_height()
            assert sorted(by_color.values()) == pytest.approx(sorted(
                r[f"lost_{c}"] for c in ("uncovered", "budget", "depth_cap")))
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
    text = " ".join(labels)
    assert "95% t-interval over 4 contexts" in text                  # τ bands and bars
    assert "95% percentile-bootstrap interval over 4 contexts" in text  # verifier gains


def test_interval_label_names_the_unit_of_each_family():
    from treespec_sim.report import interval_label

    assert interval_label([{"rounds": 64}], "ddtree") == "95% t-interval over 64 contexts"
    assert interval_label([{"rounds": 96}], "caddtree").startswith(
        "95% percentile-bootstrap interval over 96 decoded rounds")


# ----------------------------------------------------------------------------- wording
def verifier_rows() -> list[dict]:
    base = {"family": "verifiers", "regime": "alpaca", "temperature": 1.0,
            "method": "sampled-tree[2x4]", "tau_mean": 3.0, "rounds": 48}
    return [dict(base, verifier="rrsw", rel_to_baseline=1.0, rel_ci_low=1.0, rel_ci_high=1.0),
            dict(base, verifier="traversal", rel_to_baseline=1.05, rel_ci_low=1.01,
                 rel_ci_high=1.09),
            dict(base, verifier="univer", rel_to_baseline=0.95, rel_ci_low=0.92,
                 rel_ci_high=0.98)]


def stochastic_rows() -> list[dict]:
    base = {"family": "stochastic", "regime": "alpaca", "drafter": "corrected",
            "temperature": 1.0, "budget": 64, "rounds": 4, "verifier": "rrsw"}
    taus = {"tsubame-rrsw": [3.0, 3.2, 3.1, 3.3], "tsubame-univer": [2.5, 2.8, 2.6, 2.7],
            "ddtree": [2.0, 2.1, 2.2, 2.0]}
    return [dict(base, method=m, taus=t, tau_mean=float(np.mean(t))) for m, t in taus.items()]


def test_summary_names_cost_models_and_links_claims_that_do_not_hold():
    summary = summary_markdown(ddtree_rows("tiny") + verifier_rows() + stochastic_rows(),
                               RECORD)
    assert "modelled, not measured" in summary and "`h200-qwen3-8b`" in summary
    assert "best B (tok/s, cost model)" in summary
    lines = summary.splitlines()
    univer = next(ln for ln in lines if "| univer |" in ln)
    assert "**behind RRSw**" in univer and "docs/theory/univer.md#" in univer
    traversal = next(ln for ln in lines if "| traversal |" in ln)
    assert "consistent" in traversal and "docs/theory" not in traversal
    reversed_ = next(ln for ln in lines if ln.startswith("| Tsubame-UniVer vs Tsubame-RRSw |"))
    assert "**reversed**" in reversed_ and "docs/theory/univer.md#" in reversed_
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

    from treespec_sim.report import PAGE_NOTES

    root = Path(__file__).resolve().parent.parent
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

    docs = Path(__file__).resolve().parent.parent / "docs"
    text = results_page(run, tmp_path / "pages" / "results.md")
    rel = Path(os.path.relpath(docs, (tmp_path / "pages").resolve())).as_posix()
    assert f"[u]({rel}/theory/univer.md#a)" in text
    assert (tmp_path / "pages" / rel / "theory" / "univer.md").exists()
