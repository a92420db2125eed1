"""The families: the registry, each family's claims (that can fail), the findings block, and a
toy sixth family that takes one module (computing and presenting at once) and one registry line
to reach the sweep and the report.
"""

import ast
import csv
import importlib.util
import json
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from treespec_sim import families, sweep
from treespec_sim.families import (
    FAMILIES,
    Claim,
    StochasticGrid,
    all_claims,
    caddtree,
    caddtree_report,
    ddtree,
    ddtree_report,
    register,
    stochastic_report,
    verifiers_report,
)
from treespec_sim.families.base import headline
from treespec_sim.families.caddtree import CaDDTreeRow
from treespec_sim.families.ddtree import DDTreeRow
from treespec_sim.families.stochastic import StochasticRow
from treespec_sim.families.verifiers import VerifierRow
from treespec_sim.report import results_page, summary_markdown
from treespec_sim.seeds import cell_rng
from treespec_sim.sweep import Plan, run_plan

ROOT = Path(__file__).resolve().parents[2]
RECORD = {"preset": "test", "cells": 1, "seed": 0, "git_commit": "0" * 40,
          "cost_model": "h200-qwen3-8b", "figures": []}


# ----------------------------------------------------------------------------- registry
def test_the_registry_holds_the_six_families_in_report_order():
    assert list(FAMILIES) == ["ddtree", "caddtree", "stochastic", "verifiers", "stochastic-map",
                              "serving"]
    for name, family in FAMILIES.items():
        assert isinstance(family, families.Family)
        assert family.name == name == family.grid.family
        assert family.preset("no-such-preset") is None


def test_each_family_rows_are_one_frozen_schema_in_the_columns_order():
    """A family's rows are its schema (no dict rows): ``results.csv``'s columns it fills in
    their order, ``family`` first and ``wall_s`` last of them, then its own values, then the
    sweep's ``cell`` and ``extrapolated``; frozen, and a cell file's form reads back."""
    import dataclasses

    from treespec_sim.families import COLUMNS, Row

    for name, family in FAMILIES.items():
        assert issubclass(family.row, Row) and dataclasses.is_dataclass(family.row)
        fields = [f.name for f in dataclasses.fields(family.row)]
        columns = [f for f in fields if f in COLUMNS]
        assert columns == [c for c in COLUMNS if c in columns], name
        assert columns[0] == "family" and columns[-1] == "wall_s", name
        assert fields.index("wall_s") == len(columns) - 1, name  # its own values after
        assert fields[-2:] == ["cell", "extrapolated"], name
        assert dataclasses.fields(family.row)[0].default == name
    r = _ddtree("a", 0.0, 4.0, 6.0)[1]
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.tau_mean = 1.0
    assert DDTreeRow.from_dict(json.loads(json.dumps(r.as_dict()))) == r
    with pytest.raises(ValueError, match="has no field 'map'"):
        DDTreeRow.from_dict({**r.as_dict(), "map": True})


def test_register_refuses_an_incomplete_or_clashing_family():
    class Half:
        name = "half"

    with pytest.raises(ValueError, match="lacks grid, row, run, preset, preset_note, tables, "
                                         "figures"):
        register(Half())

    class Clash:
        name, grid, row, figures, preset_note = "ddtree", caddtree.grid, ddtree.row, {}, ""
        run = tables = claims = console_rows = preset = staticmethod(lambda *a: None)

    with pytest.raises(ValueError, match="its grid's family is 'caddtree'"):
        register(Clash())
    Clash.grid = ddtree.grid
    with pytest.raises(ValueError, match="already registered"):
        register(Clash())


def _string_constants(path: Path) -> set[str]:
    """Every string constant of a module's code (docstrings excluded)."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docs}


@pytest.mark.parametrize("module", ["sweep.py", "report.py"])
def test_the_sweep_and_the_report_never_name_a_family(module):
    path = ROOT / "treespec_sim" / module
    named = {s for s in _string_constants(path) for f in FAMILIES if f in s.split()
             or s == f or f"[{f}]" in s}
    assert not named, named
    imports = [n.module for n in ast.walk(ast.parse(path.read_text()))
               if isinstance(n, ast.ImportFrom) and n.module
               and any(n.module.endswith(f"families.{f}") for f in FAMILIES)]
    imports += [a.name for n in ast.walk(ast.parse(path.read_text()))
                if isinstance(n, ast.ImportFrom) and n.module and n.module.endswith("families")
                for a in n.names if a.name in FAMILIES]
    assert not imports, imports  # a family module imported by name


# ----------------------------------------------------------------------------- claims
def test_a_claim_is_a_validated_value():
    c = Claim("x", 1.0, 0.5, 1.5, "tokens per round", "holds")
    with pytest.raises(AttributeError):
        c.estimate = 2.0  # frozen
    with pytest.raises(ValueError, match="verdict must be one of"):
        Claim("x", 1.0, 0.5, 1.5, "%", "maybe")
    with pytest.raises(ValueError, match="must hold the estimate"):
        Claim("x", 2.0, 0.5, 1.5, "%", "holds")
    with pytest.raises(ValueError, match="must be numbers"):
        Claim("x", float("nan"), 0.5, 1.5, "%", "holds")


def test_a_headline_holds_only_when_every_cell_holds_and_shows_the_weakest():
    cells = [Claim("c", d, d - 0.1, d + 0.1, "u", "holds" if d > 0.1 else "undecided",
                   scope=f"cell {i}") for i, d in enumerate([0.5, 0.3, 0.05])]
    h = headline("c", cells, margin=lambda c: c.low)
    assert h.verdict == "undecided" and h.scope == "cell 2" and h.estimate == 0.05
    assert "holds in 2, undecided in 1 of 3 cells; shown: the weakest, cell 2" in h.reason
    h = headline("c", cells[:2], margin=lambda c: c.low)
    assert h.verdict == "holds" and h.scope == "cell 1"
    bad = Claim("c", -1.0, -1.2, -0.8, "u", "does not hold", scope="cell 3", reason="reversed")
    h = headline("c", [*cells, bad], margin=lambda c: c.low)
    assert h.verdict == "does not hold" and h.scope == "cell 3" and "reversed" in h.reason
    assert headline("c", [], margin=lambda c: c.low) is None
    many = [*(Claim("c", 1.0, 0.5, 1.5, "u", "holds", scope=f"h{i}") for i in range(31)), bad]
    h = headline("c", many, margin=lambda c: c.low)
    assert h.verdict == "does not hold"
    assert "by chance alone about 1.6 of 32 95% intervals miss" in h.reason


def _ddtree(regime, t, chain, dd, half=0.1):
    base = {"regime": regime, "temperature": t, "verifier": "follow", "rounds": 40,
            "throughput_tok_s": 100.0, "cost_model": "h200-qwen3-8b", "lost_uncovered": 0.5,
            "lost_budget": 0.3, "lost_depth_cap": 0.2, "coverage_mean": 4.0}
    return [DDTreeRow(**base, method="chain", budget=15, tau_mean=chain,
                      tau_ci_low=chain - half, tau_ci_high=chain + half),
            DDTreeRow(**base, method="ddtree", budget=64, tau_mean=dd, tau_ci_low=dd - half,
                      tau_ci_high=dd + half)]


def test_ddtree_claim_holds_is_undecided_and_fails():
    (c,) = ddtree_report.claims(_ddtree("a", 0.0, 4.0, 6.0) + _ddtree("b", 1.0, 4.0, 5.0))
    assert c.verdict == "holds" and c.unit == "tokens per round"
    assert c.estimate == pytest.approx(1.0) and c.scope == "b, T = 1"   # the weaker cell
    assert c.low == pytest.approx(1.0 - np.hypot(0.1, 0.1))
    assert "ddtree_surrogate.md" in c.page
    (c,) = ddtree_report.claims(_ddtree("a", 0.0, 4.0, 4.1))
    assert c.verdict == "undecided"
    (c,) = ddtree_report.claims(_ddtree("a", 0.0, 4.0, 6.0) + _ddtree("b", 0.0, 5.0, 4.0))
    assert c.verdict == "does not hold" and c.scope == "b, T = 0"


def test_ddtree_claim_reads_the_paired_difference_when_rows_carry_it():
    rows = _ddtree("a", 0.0, 4.0, 4.1)            # unpaired: undecided (see above)
    rows[1] = replace(rows[1], baseline="chain", diff_to_baseline=0.1, diff_ci_low=0.05,
                      diff_ci_high=0.15, diff_contexts=64)
    (c,) = ddtree_report.claims(rows)
    assert c.verdict == "holds" and (c.low, c.high) == (0.05, 0.15)
    assert c.reason.startswith("paired 95% t-intervals")


def test_ddtree_rows_pair_each_tree_with_the_chain_on_the_same_contexts():
    from treespec_sim.engine import run_round
    from treespec_sim.families.base import RunSettings, shares, world_for
    from treespec_sim.stats import mean_ci

    g = ddtree.DDTreeGrid(("tiny",), budgets=(2, 4), temperatures=(0.0,), rounds=6, worlds=2)
    (cell,) = g.cells()
    settings = RunSettings(seed=3)
    rows = {(r.method, r.budget): r for r in ddtree.run(cell, settings)}
    diffs = {2: [], 4: []}
    for share in shares(cell, settings):          # the contexts, drawn again by hand
        world, rng = world_for("tiny", share.seed), cell_rng(share.seed, cell.key)
        for _ in range(share.rounds):
            ctx = world.sample_context(rng)
            kw = {"rule": "follow", "temperature": 0.0, "rng": rng, "sample": False}
            chain = run_round(world, ctx, method="chain", **kw).expected_tau
            for b in diffs:
                diffs[b].append(run_round(world, ctx, method="ddtree", budget=b,
                                          **kw).expected_tau - chain)
    for b, d in diffs.items():
        r, want = rows[("ddtree", b)], mean_ci(np.array(d))
        assert r.baseline == "chain" and r.diff_contexts == 6
        assert (r.diff_to_baseline, r.diff_ci_low, r.diff_ci_high) == pytest.approx(
            (want.mean, want.low, want.high), rel=1e-12)
    assert next(r for (m, _), r in rows.items() if m == "chain").diff_to_baseline is None


def test_the_console_shows_each_family_headline_rows(capsys):
    from treespec_sim.sweep import print_table

    rows = [*_ddtree("a", 0.0, 4.0, 6.0), replace(_ddtree("a", 0.0, 4.0, 6.0)[1], budget=16)]
    print_table(rows)
    out = capsys.readouterr().out
    lines = [ln for ln in out[out.index("headline rows"):].splitlines() if "│ ddtree" in ln]
    budgets = [[c.strip() for c in ln.split("│")][6] for ln in lines]
    assert sorted(budgets) == ["15", "64"]        # the chain and B = 64, not B = 16
    assert all("h200-qwen3-8b (estimate)" in ln for ln in lines)


def _caddtree(rel, lo, hi, cost="h200-qwen3-8b"):
    return CaDDTreeRow(regime="a", temperature=0.0, cost_model=cost, method="caddtree",
                       verifier="follow", budget=512, rounds=40, tau_mean=3.0, tau_ci_low=2.9,
                       tau_ci_high=3.1, rel_to_baseline=rel, rel_ci_low=lo, rel_ci_high=hi)


def test_caddtree_claim_holds_only_inside_its_tolerance():
    # matches: the ratio's interval at or above -1% (caddtree.MATCH_TOLERANCE)
    (c,) = caddtree_report.claims([_caddtree(1.005, 0.995, 1.02), _caddtree(1.0, 0.992, 1.01, "x")])
    assert c.verdict == "holds" and c.unit.startswith("%")
    assert c.estimate == pytest.approx(0.0) and c.low == pytest.approx(-0.8)  # the weakest
    # an interval that reaches 0 but also below -1% is undecided, not "holds"
    (c,) = caddtree_report.claims([_caddtree(0.99, 0.97, 1.01)])
    assert c.verdict == "undecided" and "crosses -1.0%" in c.reason
    (c,) = caddtree_report.claims([_caddtree(1.005, 0.995, 1.02), _caddtree(0.95, 0.93, 0.97, "x")])
    assert c.verdict == "does not hold" and c.scope == "a, T = 0, x"


def _verifier(rule, rel, lo, hi):
    return VerifierRow(regime="a", temperature=1.0, method="sampled-tree[2x5]", verifier=rule,
                       budget=62, rounds=40, rel_to_baseline=rel, tau_mean=3.0 * rel,
                       tau_ci_low=3.0 * lo, tau_ci_high=3.0 * hi, rel_ci_low=lo, rel_ci_high=hi)


@pytest.mark.parametrize("gain, verdict", [((1.06, 1.05, 1.07), "holds"),      # inside
                                           ((1.05, 1.03, 1.07), "undecided"),  # across 4.2
                                           ((1.12, 1.10, 1.14), "does not hold"),
                                           ((1.01, 0.99, 1.03), "does not hold"),
                                           ((1.07, 1.00, 1.14), "undecided")])  # both edges
def test_univer_claim_reads_the_published_range(gain, verdict):
    rows = [_verifier("rrsw", 1.0, 1.0, 1.0), _verifier("univer", *gain),
            _verifier("traversal", 1.02, 1.01, 1.03)]
    univer, traversal = verifiers_report.claims(rows)
    assert univer.verdict == verdict and "+4.2–8.5%" in univer.text
    assert univer.estimate == pytest.approx(100 * (gain[0] - 1))
    assert traversal.verdict == "holds"
    (_, traversal) = verifiers_report.claims([_verifier("univer", *gain),
                                       _verifier("traversal", 0.97, 0.95, 0.99)])
    assert traversal.verdict == "does not hold"


def _stochastic(t, drafter, taus, repeat=8):
    """Rows of one cell: each method's per-context values ``taus`` repeated ``repeat`` times
    (32 contexts by default: a verdict needs MIN_UNITS = 30)."""
    base = {"regime": "a", "drafter": drafter, "temperature": t, "budget": 64,
            "rounds": 4 * repeat, "verifier": "follow"}
    return [StochasticRow(**base, method=m, taus=list(v) * repeat, tau_mean=float(np.mean(v)),
                          tau_ci_low=float(np.min(v)), tau_ci_high=float(np.max(v)))
            for m, v in taus.items()]


def test_tsubame_equals_ddtree_at_t0_gets_a_verdict_and_a_reason():
    same = [3.0, 3.5, 2.5, 4.0]
    (c,) = stochastic_report.claims(_stochastic(0.0, "none",
                                                {"tsubame-rrsw": same, "ddtree": same}))
    assert c.verdict == "holds" and (c.estimate, c.low, c.high) == (0.0, 0.0, 0.0)
    assert "exactly 0" in c.reason
    better = [x + d for x, d in zip(same, [0.4, 0.5, 0.6, 0.5], strict=True)]
    rows = _stochastic(0.0, "corrected", {"tsubame-rrsw": better, "ddtree": same})
    (c,) = stochastic_report.claims(rows)
    assert c.verdict == "does not hold" and c.low > 0
    assert "corrected" in c.reason and "exactly 0" in c.reason and "tsubame.md" in c.page
    line = next(ln for ln in summary_markdown(rows, RECORD).splitlines()
                if ln.startswith("| Tsubame ≈ DDTree at T = 0 |"))
    assert "| a = b | **does not hold**: by design" in line


def test_a_stochastic_claim_that_is_reversed_does_not_hold():
    rows = _stochastic(1.0, "corrected", {"tsubame-rrsw": [2.0, 2.1, 2.2, 2.0],
                                          "ddtree": [3.0, 3.2, 3.1, 3.3]})
    (c,) = stochastic_report.claims(rows)
    assert c.text.startswith("At T > 0 Tsubame-RRSw beats the deterministic tree")
    assert c.verdict == "does not hold" and c.high < 0 and "entirely below" in c.reason


def test_tsubame_is_ddtree_at_t0_with_marginal_proposals_in_the_family_itself(tmp_path):
    grid = StochasticGrid(("small",), drafters=("none",), temperatures=(0.0,), budgets=(4,),
                          rounds=30, methods=("ddtree", "tsubame-rrsw"))
    rows = run_plan(Plan((grid,)), tmp_path, progress=False, plot=False)
    (c,) = stochastic_report.claims(rows)
    assert c.verdict == "holds" and (c.estimate, c.low, c.high) == (0.0, 0.0, 0.0)


# ----------------------------------------------------------------------------- findings
def test_the_summary_opens_with_one_finding_per_claim():
    rows = (_ddtree("gsm8k", 0.0, 4.0, 6.0)
            + _stochastic(0.0, "corrected", {"tsubame-rrsw": [3.5, 4.0, 3.0, 4.5],
                                             "ddtree": [3.0, 3.5, 2.5, 4.0]})
            + [_verifier("univer", 1.01, 0.99, 1.03)])
    claims = all_claims(rows)
    assert [c.family for c in claims] == ["ddtree", "stochastic", "verifiers"]
    lines = summary_markdown(rows, RECORD).splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("## "))
    assert lines[first] == "## Findings"
    calibration = next(i for i, ln in enumerate(lines) if ln.startswith("## Calibration"))
    assert first < calibration < next(
        i for i, ln in enumerate(lines) if ln.startswith("## DDTree across"))
    block = [ln for ln in lines[first:calibration] if ln.startswith("- ")]
    assert len(block) == len(claims) == 3
    dd, ts, uv = block
    assert dd.startswith("- **holds**: DDTree's tree (B = 64) accepts more tokens per round")
    assert "+2.00 [+1.86, +2.14] tokens per round" in dd
    assert "docs/theory/ddtree_surrogate.md" in dd
    assert ts.startswith("- **does not hold**: At T = 0 Tsubame-RRSw builds DDTree's tree: "
                         "+0.50 [+0.50, +0.50] tokens per round")
    assert "by design" in ts and "docs/theory/tsubame.md" in ts
    assert uv.startswith("- **does not hold**: UniVer gains +4.2–8.5% E[τ] over RRSw")
    assert "+1.0% [-1.0%, +3.0%] E[τ] over RRSw" in uv
    assert "entirely below the claimed range ([+4.2%, +8.5%])" in uv


def test_the_console_prints_the_findings_first(capsys):
    from treespec_sim.sweep import print_table

    print_table(_ddtree("a", 0.0, 4.0, 6.0))
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Findings")
    assert out[1].startswith("- HOLDS: DDTree's tree (B = 64)")
    assert out[1].endswith("— docs/theory/ddtree_surrogate.md#statements")


# ----------------------------------------------------------------------------- a sixth family
TOY = '''
"""A toy family: the argmax chain's E[tau] per regime (a test's sixth family)."""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from treespec_sim.engine import run_round
from treespec_sim.families.base import (Cell, Claim, FigureSpec, Row, as_tuple, check_regimes,
                                        check_rounds, check_worlds, shares, world_for)
from treespec_sim.stats import mean_ci

name = "toy"
preset_note = "the chain alone"


@dataclass(frozen=True)
class ToyGrid:
    family: ClassVar[str] = "toy"
    unit: ClassVar[str] = "contexts"
    regimes: tuple
    rounds: int = 4
    worlds: int = 2

    def __post_init__(self):
        object.__setattr__(self, "regimes", as_tuple(self.regimes, str, "toy.regimes"))
        check_regimes(self.regimes, self.family)
        check_rounds(self.rounds, self.family)
        check_worlds(self.worlds, self.rounds, self.family)

    def cells(self):
        return [Cell(self, r, 0.0) for r in self.regimes]


grid = ToyGrid


@dataclass(frozen=True, kw_only=True)
class ToyRow(Row):
    family: str = "toy"
    regime: str
    method: str
    verifier: str
    temperature: float
    rounds: int
    seed: int | None = None
    tau_mean: float
    tau_ci_low: float
    tau_ci_high: float
    worlds: int | None = None
    wall_s: float | None = None
    cell: str | None = None
    extrapolated: list | None = None


row = ToyRow


def run(cell, settings):
    taus = []
    for share in shares(cell, settings):
        world = world_for(cell.regime, share.seed)
        rng = np.random.default_rng(share.seed)
        for _ in range(share.rounds):
            ctx = world.sample_context(rng)
            taus.append(run_round(world, ctx, method="chain", rule="follow", temperature=0.0,
                                  rng=rng, sample=False).expected_tau)
    ci = mean_ci(np.array(taus))
    return [ToyRow(regime=cell.regime, method="chain", verifier="follow", temperature=0.0,
                   rounds=len(taus), tau_mean=ci.mean, tau_ci_low=ci.low, tau_ci_high=ci.high)]


def tables(rows):
    return ["## Toy: the chain alone", "", "| regime | τ |", "|---|---|",
            *(f"| {r.regime} | {r.tau_mean:.3f} |" for r in rows), ""]


def claims(rows):
    r = min(rows, key=lambda r: r.tau_ci_low)
    return [Claim("The chain accepts at least the bonus token", r.tau_mean,
                  r.tau_ci_low, r.tau_ci_high, "tokens per round",
                  "holds" if r.tau_ci_low >= 1 else "does not hold",
                  page="[exit_law.md](docs/theory/exit_law.md)", scope=r.regime)]


def _draw(rows, path):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar([r.regime for r in rows], [r.tau_mean for r in rows])
    fig.savefig(path, dpi=50)
    plt.close(fig)


figures = {"toy_tau.png": FigureSpec("the toy family's τ", _draw)}


def console_rows(rows):
    return rows


def preset(which):
    return None
'''


@pytest.fixture
def toy(tmp_path):
    path = tmp_path / "toy_family.py"
    path.write_text(textwrap.dedent(TOY))
    spec = importlib.util.spec_from_file_location("toy_family", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    FAMILIES.pop("toy", None)


def test_a_toy_family_needs_one_module_and_one_line(tmp_path, toy):
    register(toy)                                          # the one registry line
    run = tmp_path / "run"
    plan = Plan((toy.ToyGrid(("tiny", "small")),
                 ddtree.DDTreeGrid(("tiny",), budgets=(2,), temperatures=(0.0,), rounds=4)))
    rows = run_plan(plan, run, progress=False, plot=True, preset="toy-test")
    with open(run / "results.csv") as fh:
        got = [r for r in csv.DictReader(fh) if r["family"] == "toy"]
    assert [r["regime"] for r in got] == ["tiny", "small"]
    assert all(r["worlds"] == "2" and r["rounds"] == "4" for r in got)
    assert {p.name for p in (run / "cells" / "toy").iterdir()} and (run / "toy_tau.png").exists()
    record = json.loads((run / "run.json").read_text())
    assert "toy_tau.png" in record["figures"] and record["plan"]["toy"]["rounds"] == 4
    summary = (run / "summary.md").read_text()
    assert "## Toy: the chain alone" in summary and "| tiny |" in summary
    findings = summary[summary.index("## Findings"):summary.index("Run size")]
    assert "The chain accepts at least the bonus token" in findings
    assert summary.index("## DDTree across") < summary.index("## Toy")   # registry order
    page = results_page(run, tmp_path / "page.md")
    assert "![the toy family's τ](run/toy_tau.png)" in page
    # a resumed run reuses its cells, and keeps the record of the run that computed them
    again = run_plan(plan, run, resume=True, progress=False, plot=False, preset="toy-test")
    assert [r.tau_mean for r in again] == [r.tau_mean for r in rows]
    resumed = json.loads((run / "run.json").read_text())
    assert resumed["cells_skipped_on_resume"] == 3
    assert resumed["earlier_runs"] == [{k: record.get(k) for k in sweep.EARLIER_RUN_KEYS}]
    assert f"earlier run: 3 cells (0 reused), {record['elapsed_s']:.0f} s" in (
        run / "summary.md").read_text()
    run_plan(plan, run, resume=True, progress=False, plot=False, preset="toy-test")
    third = json.loads((run / "run.json").read_text())["earlier_runs"]
    assert [e["started"] for e in third] == [record["started"], resumed["started"]]
