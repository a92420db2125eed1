"""The sweep summary: its calibration section (present exactly when a calibrated regime is)."""

import json

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
