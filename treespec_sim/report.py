"""The sweep's report: ``summary.md`` (findings first, then the tables) and the figures.

``summary.md`` opens with the findings: one line per claim of every family present (the claim,
the measured number with its 95% interval and unit, the verdict -- holds / does not hold /
undecided -- with its reason, and the theory page), built from the families' claims
(:func:`treespec_sim.families.all_claims`). Then how much data stands behind the intervals,
the calibration (target vs achieved), the cells that priced latency outside a model's measured
range, and each family's tables. The figures are the families' (their ``figures``). Every
function here loops over :data:`treespec_sim.families.FAMILIES` and ignores families that are
absent from the rows; none names a family.

``python -m treespec_sim.report RUN_DIR --page docs/results.md`` turns a finished sweep into a
documentation page (:func:`results_page`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from .calibration_data import (
    CELL_LABELS,
    CELL_SPECS,
    CELLS,
    DERIVED_WEIGHT,
    TOLERANCE,
    calibration_rows,
    published_band,
    table1_targets,
)
from .cli import OneLineParser
from .families import FAMILIES, Claim, Row, all_claims
from .families.base import (
    MIN_UNITS,
    NO_VERDICT,
    interval_units,
    judge,
    smoke_test,
)
from .families.render import PAGE_NOTES, cost_label, missing
from .files import read_json, read_text
from .stats import t_quantile

__all__ = ["findings_lines", "findings_section", "results_page", "summary_markdown",
           "write_figures"]


def _fam(rows: Sequence[Row], family: str) -> list[Row]:
    return [r for r in rows if r.family == family]


# ----------------------------------------------------------------------------- findings
def _number(c: Claim) -> str:
    """``+0.45 [+0.13, +0.78] tokens per round``, or ``+5.2% [+1.0%, +9.4%] E[τ] over RRSw``."""
    if c.unit.startswith("%"):
        rest = c.unit[1:].strip()
        return (f"{c.estimate:+.1f}% [{c.low:+.1f}%, {c.high:+.1f}%]"
                + (f" {rest}" if rest else ""))
    return f"{c.estimate:+.2f} [{c.low:+.2f}, {c.high:+.2f}] {c.unit}"


def findings_lines(claims: Sequence[Claim], *, markdown: bool = True) -> list[str]:
    """One line per claim: the verdict, the claim, the number with its interval and unit, the
    reason and the theory page.

    Parameters
    ----------
    claims : sequence of Claim
        The families' headline claims (:func:`treespec_sim.families.all_claims`).
    markdown : bool
        Markdown (bold verdict, the page as a link; ``summary.md``) or plain text (the verdict
        in capitals, the page's path; the console).

    Returns
    -------
    list of str
        ``"- <verdict>: <claim>: <estimate> [<low>, <high>] <unit>. <Reason> — <page>"``.
    """
    out = []
    for c in claims:
        if markdown:
            verdict = f"**{c.verdict}**"
            page = f" — {c.page}" if c.page else ""
        else:
            verdict = c.verdict.upper()
            target = _LINK.search(c.page)
            page = f" — {target.group(1)}" if target else ""
        reason = f". {c.reason[:1].upper()}{c.reason[1:]}" if c.reason else ""
        out.append(f"- {verdict}: {c.text}: {_number(c)}{reason}{page}")
    return out


def findings_section(rows: Sequence[Row]) -> list[str]:
    """``## Findings``: every family's claims, one line each (empty if no family has one).

    Parameters
    ----------
    rows : sequence of dict
        The sweep's result rows (each family's claims read its own).

    Returns
    -------
    list of str
        Markdown lines: the heading, how to read a line, the lines (:func:`findings_lines`).
    """
    claims = all_claims(rows)
    if not claims:
        return []
    return ["## Findings", "",
            "One line per claim: the verdict, the claim, the measured number with its 95% "
            "interval (pooled over the worlds of a regime; the families' tables below give "
            "every cell and the between-world intervals) and unit, why, and the page that "
            "discusses it. One rule decides every verdict (`treespec_sim.verdicts.judge`): "
            "a claim *holds* in a cell only when the interval lies inside the claimed range (or "
            "beyond a one-sided claim's threshold), *does not hold* only when it lies entirely "
            "outside, and is *undecided* otherwise, with about how many contexts would decide "
            f"it; a cell on fewer than {MIN_UNITS} independent units has *no verdict*. A claim "
            "measured in several cells shows its weakest cell; it holds when every cell holds "
            "and does not hold when any cell contradicts it.", "",
            *findings_lines(claims), ""]


# ----------------------------------------------------------------------------- calibration
#: Published token entropy of Qwen3-8B at T = 1 (Wang et al. 2025, arXiv 2506.01939): more
#: than half of the tokens near zero (median ~ 0 nats), 80th percentile 0.672 nats.
QWEN3_ENTROPY = {"median": "≈ 0", "p80": "0.672", "share_below_0.05": "> 50%"}


def _calibration_section(rows: Sequence[Row], data: dict | None = None) -> list[str]:
    """The published cells of the sweep's calibrated regimes beside this run's numbers (empty
    if it has none).

    Every cell of :data:`treespec_sim.calibrate.CELLS` (DDTree's Table 1 -- the chain and DDTree
    at B = 512, T = 0 and T = 1 -- and DDTree@64 at both temperatures; ``*`` derived, not
    published) with this run's mean, 95% interval and relative error, read from the rows that
    measure it most precisely (:func:`_fidelity_cells`), then the T = 1 token entropy of the
    stored fit (``data``: a parsed calibration file, default the package's).
    """
    cal = {r["regime"]: r for r in calibration_rows(data, regimes={r.get("regime")
                                                                   for r in rows})}
    if not cal:
        return []
    targets = table1_targets()
    measured = _fidelity_cells(rows)
    tol, pub = f"±{TOLERANCE:.0%}", QWEN3_ENTROPY
    out = ["## Calibration: the published numbers beside this run's", ""]
    lines, verdicts, widest = [], {}, 0.0
    for regime in cal:
        cells, off = [], {}
        for q in CELLS:
            t = targets[regime][q]
            star = "" if t["published"] else "*"
            r = measured.get((regime, q))
            if r is None:
                cells.append(f"{t['value']:.2f}{star} → —")
                continue
            mean, low, high = r.get("tau_mean"), r.get("tau_ci_low"), r.get("tau_ci_high")
            rel = mean / t["value"] - 1
            half = (high - low) / 2 / mean
            cells.append(f"{t['value']:.2f}{star} → {mean:.2f} [{low:.2f}, "
                         f"{high:.2f}] ({100 * rel:+.1f}%)")
            if t["published"]:
                # the one verdict rule: within the tolerance when the interval lies inside it
                v = judge(mean, low, high,
                          published_band(t["value"]), units=interval_units(r)[0] or None).verdict
                verdicts[v] = verdicts.get(v, 0) + 1
                widest = max(widest, half)
                if v != "holds":
                    off.setdefault(v, []).append(CELL_LABELS[q])
        h = cal[regime].get("entropy_t1") or {}
        entropy = (f"{h['median']:.3f} / {h['p80']:.3f}" if "median" in h and "p80" in h
                   else "—")
        share = f"{h['share_below_0.05']:.0%}" if "share_below_0.05" in h else "—"
        ok = ("yes" if not off else "—" if NO_VERDICT in off else "; ".join(
            f"{'no' if v == 'does not hold' else v} ({', '.join(c)})" for v, c in off.items()))
        lines.append(f"| {regime} | " + " | ".join(cells) + f" | {ok} | {entropy} | {share} |")
    n_pub = sum(verdicts.values())
    if not n_pub:
        verdict = "This run measures none of the published cells."
    elif verdicts.get(NO_VERDICT):
        verdict = (f"No verdict on the {n_pub} published cells this run measures: a cell needs "
                   f"{MIN_UNITS} contexts (a smoke test); the widest 95% interval is "
                   f"±{100 * widest:.1f}% of its mean.")
    else:
        verdict = (f"**{verdicts.get('holds', 0)} of {n_pub} published cells within {tol}** of "
                   "the published value in this run (the 95% interval inside the band), "
                   f"{verdicts.get('does not hold', 0)} outside it (the interval entirely "
                   f"outside), {verdicts.get('undecided', 0)} undecided (the interval across "
                   f"an edge); the widest 95% interval is ±{100 * widest:.1f}% of its mean.")
    out += [verdict + " Each regime is a synthetic world law fitted to all six cells at once "
            "(`treespec_sim.calibrate`; DDTree's Table 1 on Qwen3-8B, DDTree's entry compared "
            "at B = 512, and TEV's DDTree@64; `*`: no published value, derived from published "
            f"ratios, weighted {DERIVED_WEIGHT:g} in the fit and not held to the tolerance). "
            "A cell reads "
            "*target → this run's mean [95% interval] (relative error)*, from the rows that "
            "measure it on the most contexts (exact E[τ], `follow`, the regime's own "
            "drafter). The fit's own held-out and `--check` numbers, the between-world spread "
            "and the limitations: `docs/results/calibration.md`. The last columns set the "
            "target's token entropy at T = 1 beside Qwen3-8B's (Wang et al. 2025, "
            "arXiv 2506.01939).", "",
            "| regime | " + " | ".join(CELL_LABELS[q] for q in CELLS)
            + f" | published within {tol} (interval inside) | T = 1 token entropy median / "
            "p80, nats (Qwen3-8B: "
            f"{pub['median']} / {pub['p80']}) | share < 0.05 nats (Qwen3-8B: "
            f"{pub['share_below_0.05']}) |",
            "|---|" + "---|" * len(CELLS) + "---|---|---|", *lines]
    return [*out, ""]


def _fidelity_cells(rows: Sequence[Row]) -> dict[tuple[str, str], Row]:
    """``(regime, cell) -> row``: for each cell of :data:`CELLS` the row that measures it on the
    most contexts (:data:`treespec_sim.calibrate.CELL_SPECS`: exact E[τ] under ``follow``, the
    regime's own drafter), whichever family ran it."""
    best: dict[tuple[str, str], Row] = {}
    for r in rows:
        if r.get("verifier") != "follow" or r.get("drafter") not in (None, "", "none"):
            continue
        for q, (method, budget, t) in CELL_SPECS.items():
            if (r.get("method") == method and float(r.get("temperature", -1)) == t
                    and (budget is None or int(r.get("budget", -1)) == budget)
                    and not missing(r.get("tau_ci_low"))):
                key = (r.get("regime"), q)
                if key not in best or int(r.get("rounds", 0)) > int(best[key].get("rounds", 0)):
                    best[key] = r
    return best


def _family_size(family: str, plan: dict, rows: Sequence[Row]) -> str:
    """``"63 contexts per ddtree cell"``, or, for a precision target, the range the cells used."""
    unit = FAMILIES[family].grid.unit
    if plan.get("max_rounds") and not plan.get("precision"):
        used = sorted({int(r.get("rounds")) for r in rows if r.get("family") == family})
        span = (f"{used[0]}" if len(used) == 1 else f"{used[0]} to {used[-1]}") if used else "?"
        return (f"{span} {unit} per {family} cell (a pilot of {plan['rounds']}, then one second "
                "stage where deciding a claim of the cell takes more and fits under "
                f"{plan['max_rounds']}; each row's `rounds` says how many)")
    if not plan.get("precision"):
        return f"{plan['rounds']} {unit} per {family} cell"
    used = sorted({int(r.get("rounds")) for r in rows if r.get("family") == family})
    span = (f"{used[0]}" if len(used) == 1 else f"{used[0]} to {used[-1]}") if used else "?"
    cap = plan.get("max_rounds") or 64 * int(plan["rounds"])
    return (f"{span} {unit} per {family} cell (a pilot of {plan['rounds']}, then more until "
            f"every chain and DDTree τ interval is within ±{100 * plan['precision']:g}% of its "
            f"mean, at most {cap}; each row's `rounds` says how many)")


def _trace_section(record: dict, rows: Sequence[Row]) -> list[str]:
    """``## The trace``: what a ``trace:<name>`` regime's rows were replayed from (the models,
    dtype and device of the recording, its settings), and what their intervals are over (empty
    if the run has no trace; ``record["trace"]``, see :func:`treespec_sim.sweep.trace_record`).
    """
    tr = record.get("trace")
    if not tr:
        return []
    regime = tr.get("regime", "trace")
    if not any(r.get("regime") == regime for r in rows):
        return []
    st = tr.get("settings") or {}
    models = tr.get("models") or {}
    sampled = st.get("sampled")
    samp = (f"{sampled['method']}:{sampled['budget']} at T = {float(sampled['temperature']):g}"
            if sampled else "none")
    drafter = f"top {st['top_k']} per depth" if st.get("top_k") else "dense"
    target = (f"top {st['target_top_k']} per node, exact edges" if st.get("target_top_k")
              else "full rows")
    temps = ", ".join(f"{float(t):g}" for t in st.get("temperatures", []))
    return ["## The trace", "",
            f"Rows of regime `{regime}` replay the recorded rounds of a real decode "
            "(`docs/traces.md`): every number on them is the exact analysis of the recorded "
            "drafter marginals and target probabilities, as the live models would give it; "
            "nothing is synthetic. Every cell runs on each recorded round once, in order, and "
            f"its intervals are over the {tr.get('prompts', '?')} recorded prompts (the decoded "
            "sequences: one unit each; the tables' \"contexts\" and \"worlds\" read so: one "
            "world, the recording).", "",
            "| regime | target | drafter | dtype, device | rounds | B_max | T recorded | "
            "drafter storage | target storage | sampled tree | file (sha256) | recorded |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
            f"| `{regime}` | `{models.get('target', '?')}` | `{models.get('drafter', '?')}` | "
            f"{tr.get('dtype', '?')}, {tr.get('device', '?')} | {tr.get('rounds', '?')} "
            f"({tr.get('prompts', '?')} prompts × {st.get('rounds', '?')}) | "
            f"{st.get('b_max', '?')} | {temps} | {drafter} | {target} | {samp} | "
            f"`{tr.get('path', '?')}` ({str(tr.get('sha256', '?'))[:12]}) | "
            f"{tr.get('created', '?')} |", ""]


def _run_size(record: dict, rows: Sequence[Row], *, calibrated: bool) -> list[str]:
    """How much data stands behind every interval (rounds per cell, worlds per regime), and
    what the two kinds of interval mean."""
    tr = record.get("trace") or {}
    if tr and all(r.get("regime") == tr.get("regime") for r in rows):
        return [f"Run size: every cell replays the trace's {tr.get('rounds', '?')} recorded "
                f"rounds ({tr.get('label', '?')}); see *The trace* below.", ""]
    plan = record.get("plan") or {}
    fams = {f: plan[f] for f in FAMILIES if isinstance(plan.get(f), dict) and "rounds" in plan[f]}
    worlds = sorted({int(p.get("worlds", 1)) for p in fams.values()}
                    or {int(r.get("worlds")) for r in rows if r.get("worlds")})
    if not worlds:
        return []
    k = "/".join(map(str, worlds))
    out = []
    if fams:
        parts = [_family_size(f, p, rows) for f, p in fams.items()]
        seed = record.get("seed")
        seeds = (f"world seed {seed}" if worlds == [1] else
                 f"world seeds {seed} to {seed + max(worlds) - 1}" if isinstance(seed, int)
                 else "")
        text = (f"Run size: {', '.join(parts)}; each regime is {k} synthetic "
                f"world{'s' * (worlds != [1])} ({seeds}), every cell's rounds split evenly over "
                "them.")
        if calibrated:
            text += (" A calibrated regime's numbers scatter around its calibrated means "
                     "(measured on three other worlds) as any world's do; the between-world "
                     "intervals below show by how much.")
        out += [text, ""]
    if max(worlds) < 2:
        note = ("**Intervals.** One world per regime: every interval is over that world's "
                "contexts (or decoded sequences) only, not over worlds; another world would give "
                "other numbers by more than the intervals show.")
    else:
        note = ("**Two kinds of interval.** *Pooled*: over every context (or decoded sequence) "
                f"of the {k} worlds of a regime together, a t-interval or a paired percentile "
                "bootstrap (`treespec_sim.stats`); it says how precisely these worlds' mean is "
                "known, not how far another draw of worlds would move it, so it is narrow. "
                f"*Between worlds*: the t-interval over the {k} per-world means (or per-world "
                f"ratios and differences), with k − 1 degrees of freedom "
                f"({_dof_note(max(worlds))}); it is wide, and honest about world-to-world "
                "variation: a claim about a regime, rather than about these worlds, should hold "
                "on it. Each table names the interval it shows.")
    return [*out, note, ""]


def _dof_note(k: int) -> str:
    """``"2 with 3 worlds: the 97.5% t quantile is 4.30"``: why the between-world interval is
    wide."""
    if k < 2:
        return "none with one world"
    return f"{k - 1} with {k} worlds: the 97.5% t quantile is {t_quantile(k - 1):.2f}"


#: The repository's documentation folder, which the summary's links point into.
DOCS = Path(__file__).resolve().parent.parent / "docs"
# A Markdown link's target: ](target) up to a closing parenthesis or a space.
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _relative_target(target: str, base: Path, to: Path) -> str:
    """``target`` (relative to the folder ``base``) as a link from the folder ``to``.

    Absolute URLs, anchors and absolute paths are left alone. A ``docs/...`` target that does
    not exist under ``base`` is read from the repository root (summaries written before their
    links were relative to the run folder).
    """
    if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):
        return target
    path, sep, anchor = target.partition("#")
    src = base / path
    if not src.exists() and path.startswith("docs/"):
        src = DOCS.parent / path
    rel = Path(os.path.relpath(src.resolve(), to.resolve())).as_posix()
    return rel + sep + anchor


def _rebase_links(lines: Sequence[str], base: Path, to: Path) -> list[str]:
    """Every relative link of ``lines``, written from ``base``, rewritten to work from ``to``."""
    fix = lambda m: f"]({_relative_target(m.group(1), base, to)})"  # noqa: E731
    return [_LINK.sub(fix, line) for line in lines]


def _extrapolation_section(record: dict) -> list[str]:
    """The cells whose throughput priced latency outside a model's measured range (empty if
    none; ``record["extrapolated"]``, see :func:`treespec_sim.sweep.run_plan`)."""
    notes = record.get("extrapolated") or []
    if not notes:
        return []
    cells = sorted({n["cell"] for n in notes})
    out = ["## Latency priced outside its measured range", "",
           f"{len(cells)} cell(s) asked a latency model for costs outside the range it was "
           "measured on (`treespec_sim.cost.ExtrapolationWarning`); their modelled round "
           "times and throughputs there rest on the model's extension, not on a measurement.",
           "", "| cell | model | axis | requested | measured | outside the range |",
           "|---|---|---|---|---|---|"]
    for n in notes:
        req, got = n.get("requested") or ["?", "?"], n.get("measured") or ["?", "?"]
        unit = " tokens" if n.get("axis") == "tokens" else ""
        out.append(f"| `{n['cell']}` | `{n.get('model')}` | {n.get('axis')} | "
                   f"{req[0]}..{req[1]}{unit} | {got[0]}..{got[1]}{unit} | "
                   f"{n.get('action', '')} |")
    return [*out, ""]


def summary_markdown(rows: Sequence[Row], record: dict, *, folder: Path | None = None) -> str:
    """The human-readable summary of a sweep.

    Starts with the findings (:func:`findings_section`), then the run's size and what its
    intervals mean, a calibration table (target vs achieved) when any of the rows' regimes is
    a calibrated one (:func:`treespec_sim.calibrate.calibration_rows`), the cells that priced
    latency outside a model's measured range (``record["extrapolated"]``), then the tables of
    every family present, in registry order.

    Parameters
    ----------
    rows : sequence of dict
        The sweep's result rows.
    record : dict
        Its run record (``run.json``).
    folder : Path, optional
        Where the summary will be written: its links into ``docs/`` are made relative to it,
        so they work where the file lies. Without it they are relative to the repository root.
    """
    default = str(record.get("cost_model"))
    kind = cost_label(default)[len(default):]  # " (measured)" / " (estimate)"
    lines = [f"# treespec sweep: preset {record.get('preset')!r}", "",
             f"{len(rows)} result rows from {record.get('cells')} cells "
             f"({record.get('cells_skipped_on_resume', 0)} reused on resume), "
             f"{record.get('elapsed_s', 0):.0f} s, seed {record.get('seed')}, git "
             f"{record.get('git_commit', '?')[:10]}"
             + "".join(f"; earlier run: {e.get('cells', '?')} cells "
                       f"({e.get('cells_skipped_on_resume', 0)} reused), "
                       f"{float(e.get('elapsed_s') or 0):.0f} s on {e.get('workers', '?')} "
                       f"worker(s), git {str(e.get('git_commit') or '?')[:10]}, started "
                       f"{e.get('started', '?')}" for e in record.get("earlier_runs", []))
             + ". Every throughput (tok/s) is modelled, "
             "not measured: E[τ] / (C_d + C_v(B + 1)), drafting plus one verification pass "
             "over B + 1 tokens, timed by a latency model of `treespec_sim.cost` (a preset, a "
             "latency file, or on a trace its own recorded timings, `recorded`); each table "
             "names its model and whether it was measured or is an estimate (this run's "
             f"default: `{default}`{kind}). Figures: "
             + ", ".join(f"`{f}`" for f in record.get("figures", [])) + ".", ""]
    smoke = smoke_test(all_claims(rows))
    if smoke:
        lines += [smoke, ""]
    lines += findings_section(rows)
    calibration = _calibration_section(rows)
    lines += _run_size(record, rows, calibrated=bool(calibration))
    lines += _trace_section(record, rows)
    lines += calibration
    lines += _extrapolation_section(record)
    for family in FAMILIES.values():
        sub = _fam(rows, family.name)
        if sub:
            lines += family.tables(sub)
    lines = _once(lines, PAGE_NOTES.values())
    if folder is not None:
        lines = _rebase_links(lines, DOCS.parent, Path(folder))
    return "\n".join(lines) + "\n"


def _once(lines: Sequence[str], paragraphs) -> list[str]:
    """``lines`` with each of ``paragraphs`` (a table's note on a theory page) kept at its
    first appearance only (two tables that link one page would print its note twice)."""
    seen, out = set(), []
    notes = set(paragraphs)
    for line in lines:
        if line in notes:
            if line in seen:
                if out and out[-1] == "":
                    out.pop()  # the blank line that opened the repeated note
                continue
            seen.add(line)
        out.append(line)
    return out


# ----------------------------------------------------------------------------- figures
def write_figures(rows: Sequence[Row], out: Path) -> list[str]:
    """Draw every figure of every family that has rows; return the file names written."""
    import matplotlib

    matplotlib.use("Agg")
    written = []
    for family in FAMILIES.values():
        sub = _fam(rows, family.name)
        if not sub:
            continue
        for name, fig in family.figures.items():
            if not fig.applies(sub):
                continue
            fig.draw(sub, out / name)
            written.append(name)
    return written


def _figure_title(name: str) -> str:
    """A figure's title on the results page (its file name if no family draws it)."""
    return next((f.figures[name].title for f in FAMILIES.values() if name in f.figures), name)


# ----------------------------------------------------------------------------- results page
def results_page(run_dir: Path, page: Path) -> str:
    """Write a documentation page (e.g. ``docs/results.md``) from a finished sweep directory.

    The page is the run's ``summary.md`` with a header naming the command, the commit, the
    wall clock and the workers (all read from ``run.json``), and every figure embedded with a
    path relative to the page. Returns the text written.
    """
    run_dir, page = Path(run_dir), Path(page)
    record = read_json(run_dir / "run.json", "run record")
    if not isinstance(record, dict):
        raise ValueError(f"{run_dir / 'run.json'}: not a JSON object")
    summary = read_text(run_dir / "summary.md", "summary").splitlines()
    rel = Path(os.path.relpath(run_dir, page.parent)).as_posix()
    argv = [str(a) for a in record.get("command") or []]
    if argv and Path(argv[0]).name == "sweep.py":
        command = " ".join(["python -m treespec_sim.sweep", *argv[1:]])
    else:  # run_plan called from code
        command = f"run_plan (preset {record.get('preset')!r}) from {' '.join(argv) or '?'}"
    head = [
        f"# Results: the `{record.get('preset')}` sweep",
        "",
        f"Generated by `python -m treespec_sim.report {run_dir.as_posix()} --page "
        f"{page.as_posix()}` from the sweep `{command}`: {record.get('cells')} cells, "
        f"{record.get('elapsed_s', 0):.0f} s with {record.get('workers')} worker(s), git "
        f"{str(record.get('git_commit', '?'))[:10]}, seed {record.get('seed')}. The tables are "
        f"the run's `summary.md`; every row is in `{rel}/results.csv`, the configuration, "
        f"versions and cost-model provenance in `{rel}/run.json`.",
        "",
    ]
    figures = [f for f in record.get("figures", []) if (run_dir / f).exists()]
    for f in figures:
        head += [f"![{_figure_title(f)}]({rel}/{f})", ""]
    # Drop the summary's own title line; keep the rest verbatim but for its links, written
    # from the run folder, which must be relative to the page to resolve.
    body = summary[1:] if summary and summary[0].startswith("# ") else summary
    body = _rebase_links(body, run_dir, page.parent)
    text = "\n".join(head + body).rstrip() + "\n"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)
    return text


def build_parser() -> OneLineParser:
    """The parser of ``python -m treespec_sim.report``."""
    ap = OneLineParser(prog="python -m treespec_sim.report",
                       description="Write a results page from a finished sweep.")
    ap.add_argument("run_dir", type=Path, help="the sweep's --out directory")
    ap.add_argument("--page", type=Path, required=True, help="the Markdown page to write")
    return ap


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m treespec_sim.report RUN_DIR --page PAGE.md``: a results page from a sweep."""
    ap = build_parser()
    args = ap.parse_args(argv)
    for name in ("run.json", "summary.md"):
        if not (args.run_dir / name).exists():
            ap.error(f"run_dir: {args.run_dir / name} does not exist (run the sweep first)")
    results_page(args.run_dir, args.page)
    print(f"wrote {args.page}")


if __name__ == "__main__":
    main()
