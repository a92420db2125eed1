"""The calibration's published data: what the regimes were fitted to, and the stored fit read back.

The published numbers (:data:`PUBLISHED`: DDTree and TEV Table 1, :data:`TABLE1`: DDTree Table 1
at both temperatures), the targets derived from them (:func:`derive_targets`,
:func:`table1_targets`), the cells a fit measures (:data:`CELLS`, :data:`CELL_SPECS`), what
"reproduces a published value" means (:func:`published_band`, :func:`published_verdict`) and the
stored fit as rows (:func:`calibration_rows`). The report reads this module; the fitter,
:mod:`treespec_sim.calibrate`, fits to it (and re-exports its names).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .files import read_json
from .synth.regimes import CALIBRATION_FILE
from .verdicts import ClaimedRange, judge

__all__ = [
    "BEST_BUDGET",
    "BUDGET",
    "CALIBRATED_REGIMES",
    "CELLS",
    "CELL_LABELS",
    "CELL_SPECS",
    "DATASET_NAMES",
    "DERIVED_WEIGHT",
    "PUBLISHED",
    "PUBLISHED_BUDGET_CURVE",
    "QUANTITIES",
    "QUANTITY_LABELS",
    "T1_NEAREST",
    "TABLE1",
    "TOLERANCE",
    "Target",
    "calibration_rows",
    "derive_targets",
    "load_calibration_file",
    "published_band",
    "published_verdict",
    "table1_targets",
    "within_tolerance",
]

#: The eight regimes, in the order of the CaDDTree paper's task list.
CALIBRATED_REGIMES = ("math500", "gsm8k", "aime25", "humaneval", "mbpp", "livecodebench",
                      "mt-bench", "alpaca")
#: DDTree budget of the calibrated tree quantity.
BUDGET = 64
#: Relative tolerance the fit must reach on fresh seeds.
TOLERANCE = 0.05

#: The calibrated quantities, in table order, with their labels.
QUANTITIES = ("chain", "ddtree64", "ddtree64_t1")
QUANTITY_LABELS = {"chain": "chain τ (T = 0)", "ddtree64": "DDTree@64 τ (T = 0)",
                   "ddtree64_t1": "DDTree@64 τ (T = 1)"}

# ---------------------------------------------------------------------- published numbers
#: Published Qwen3-8B numbers at T = 0 (H200, batch 1, HF; tau counts the bonus token).
#: DDTree's tau and speedup against its node budget on MATH-500 (Qwen3-8B, T = 0, 8xH200):
#: the DDTree project's figure ``math500-budget-tradeoff`` (github.com/liranringel/ddtree,
#: branch ``site``, ``public/assets/project/math500-budget-tradeoff.pdf``), read off the PDF's
#: vector paths through its axis ticks (to ~0.001); its B = 512 tau is Table 1's 10.73 and its
#: dashed DFlash lines Table 1's 7.79 and 5.56x. The only published tau below B = 64.
PUBLISHED_BUDGET_CURVE: dict[str, dict[int, float]] = {
    "tau": {16: 8.606, 32: 9.266, 64: 9.748, 128: 10.202, 256: 10.427, 512: 10.731,
            1024: 10.975},
    "speedup": {16: 6.094, 32: 6.601, 64: 6.968, 128: 7.326, 256: 7.434, 512: 7.518,
                1024: 6.821},
}

#: ``chain``: DFlash tau (DDTree Table 1); ``ddtree64``: DDTree tau at B = 64 (TEV Table 1);
#: ``dflash_speedup`` and ``ddtree_speedup`` (best B) from DDTree Table 1 and its project page.
#: ``None`` = not published. Sources and page numbers: ``docs/results/calibration.md``.
#: ``ddtree64_t1``: DDTree tau at B = 64 and T = 1 (TEV Table 1).
PUBLISHED: dict[str, dict[str, float | None]] = {
    "math500": {"chain": 7.79, "ddtree64": 9.76, "ddtree64_t1": 8.17, "dflash_speedup": 5.56,
                "ddtree_speedup": 7.52},
    "gsm8k": {"chain": 6.57, "ddtree64": 8.49, "ddtree64_t1": 7.84, "dflash_speedup": 4.78,
              "ddtree_speedup": 6.75},
    "aime25": {"chain": 7.39, "ddtree64": None, "ddtree64_t1": None, "dflash_speedup": 5.32,
               "ddtree_speedup": 7.0},
    "humaneval": {"chain": 6.61, "ddtree64": 8.01, "ddtree64_t1": 7.06, "dflash_speedup": 4.84,
                  "ddtree_speedup": 6.9},
    "mbpp": {"chain": 5.99, "ddtree64": None, "ddtree64_t1": None, "dflash_speedup": None,
             "ddtree_speedup": 6.4},
    "livecodebench": {"chain": 7.22, "ddtree64": None, "ddtree64_t1": None,
                      "dflash_speedup": None, "ddtree_speedup": 7.1},
    "mt-bench": {"chain": 4.28, "ddtree64": 5.54, "ddtree64_t1": 5.03, "dflash_speedup": 2.56,
                 "ddtree_speedup": 4.10},
    "alpaca": {"chain": 3.12, "ddtree64": None, "ddtree64_t1": None, "dflash_speedup": 2.07,
               "ddtree_speedup": 3.36},
}
#: The numbers of a :data:`PUBLISHED` entry; the datasets with all five (MATH-500, GSM8K,
#: HumanEval, MT-Bench) are the reference set of every derivation ratio.
_KEYS = ("chain", "ddtree64", "ddtree64_t1", "dflash_speedup", "ddtree_speedup")
#: Where the T = 1 value is not published: the published dataset of the same kind whose
#: T = 1 / T = 0 DDTree@64 ratio is applied to the regime's T = 0 target.
T1_NEAREST = {"aime25": "math500", "mbpp": "humaneval", "livecodebench": "humaneval",
              "alpaca": "mt-bench"}


@dataclass(frozen=True)
class Target:
    """The three calibration targets of a regime and where they come from."""

    chain: float
    ddtree64: float
    chain_derivation: str
    ddtree64_derivation: str
    ddtree64_t1: float
    ddtree64_t1_derivation: str

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def derive_targets(published: dict[str, dict[str, float | None]] | None = None
                   ) -> dict[str, Target]:
    r"""Targets for every calibrated regime; unpublished values derived from published ones.

    The chain is published for every regime (DDTree Table 1). With the reference set ``R``
    of the datasets with all five numbers published (MATH-500, GSM8K, HumanEval, MT-Bench):

    * ``g`` = mean over ``R`` of DDTree@64 / chain (the tree's gain at B = 64);
    * ``a`` = mean over ``R`` of (DDTree@64 / chain) / (DDTree best-B speedup / DFlash
      speedup): how the tau gain at B = 64 relates to the published *speedup* gain;
    * ``m`` = mean over ``R`` of DDTree@64 tau / DDTree best-B speedup.

    Then

    * AIME25: DDTree@64 = chain · a · (7.0 / 5.32);
    * Alpaca: DDTree@64 = chain · a · (3.36 / 2.07);
    * MBPP, LiveCodeBench (no DFlash speedup published): DDTree@64 = m · speedup
      (where a chain is missing, as in older tables, chain = DDTree@64 / g, or
      DDTree@64 / (a · speedup ratio) where DDTree@64 is published);
    * DDTree@64 at ``T = 1`` where it is not published: the regime's DDTree@64 target times the
      published ``T = 1 / T = 0`` ratio of the nearest published dataset (:data:`T1_NEAREST`:
      AIME25 from MATH-500, MBPP and LiveCodeBench from HumanEval, Alpaca from MT-Bench).

    Parameters
    ----------
    published : dict, optional
        Defaults to :data:`PUBLISHED`.

    Returns
    -------
    dict of str to Target
    """
    pub = PUBLISHED if published is None else published
    ref = [pub[r] for r in CALIBRATED_REGIMES if all(pub[r][k] is not None for k in _KEYS)]
    g = float(np.mean([r["ddtree64"] / r["chain"] for r in ref]))
    a = float(np.mean([(r["ddtree64"] / r["chain"])
                       / (r["ddtree_speedup"] / r["dflash_speedup"]) for r in ref]))
    m = float(np.mean([r["ddtree64"] / r["ddtree_speedup"] for r in ref]))
    out: dict[str, Target] = {}
    for name in CALIBRATED_REGIMES:
        p = pub[name]
        chain_v, dd_v = p["chain"], p["ddtree64"]
        c_src = "published (DDTree Table 1, DFlash column)" if chain_v is not None else ""
        d_src = "published (TEV Table 1, DDTree at B = 64)" if dd_v is not None else ""
        if chain_v is not None and dd_v is None and p["dflash_speedup"] is None:
            dd_v = m * p["ddtree_speedup"]
            d_src = f"m x DDTree best-B speedup = {m:.4f} x {p['ddtree_speedup']:g}"
        elif chain_v is not None and dd_v is None:
            s_ratio = p["ddtree_speedup"] / p["dflash_speedup"]
            dd_v = chain_v * a * s_ratio
            d_src = (f"chain x a x (DDTree speedup / DFlash speedup) = {chain_v:g} x {a:.4f} x "
                     f"({p['ddtree_speedup']:g} / {p['dflash_speedup']:g})")
        elif dd_v is not None and chain_v is None:
            s_ratio = p["ddtree_speedup"] / p["dflash_speedup"]
            chain_v = dd_v / (a * s_ratio)
            c_src = (f"DDTree@64 / (a x DDTree speedup / DFlash speedup) = {dd_v:g} / ({a:.4f} x "
                     f"{p['ddtree_speedup']:g} / {p['dflash_speedup']:g})")
        elif chain_v is None and dd_v is None:
            dd_v = m * p["ddtree_speedup"]
            chain_v = dd_v / g
            d_src = f"m x DDTree best-B speedup = {m:.4f} x {p['ddtree_speedup']:g}"
            c_src = f"DDTree@64 / g = {dd_v:.4f} / {g:.4f}"
        t1_v = p["ddtree64_t1"]
        t1_src = "published (TEV Table 1, DDTree at B = 64, T = 1)"
        if t1_v is None:
            ref_pub = pub[T1_NEAREST[name]]
            ratio = ref_pub["ddtree64_t1"] / ref_pub["ddtree64"]
            t1_v = dd_v * ratio
            t1_src = (f"DDTree@64 x {DATASET_NAMES[T1_NEAREST[name]]}'s T1/T0 ratio = {dd_v:.4f} x "
                      f"({ref_pub['ddtree64_t1']:g} / {ref_pub['ddtree64']:g})")
        out[name] = Target(round(float(chain_v), 3), round(float(dd_v), 3), c_src, d_src,
                           round(float(t1_v), 3), t1_src)
    return out

#: Each regime's dataset, as the papers name it.
DATASET_NAMES = {"math500": "MATH-500", "gsm8k": "GSM8K", "aime25": "AIME25",
            "humaneval": "HumanEval", "mbpp": "MBPP", "livecodebench": "LiveCodeBench",
            "mt-bench": "MT-Bench", "alpaca": "Alpaca"}

#: DDTree Table 1 (Qwen3-8B, 8xH200, bf16, block 16, at most 2048 new tokens; liranringel/ddtree,
#: branch ``site``, ``src/data/results.tex``): per dataset the DFlash chain tau and DDTree's tau
#: at its best node budget, at T = 0 and T = 1 (``docs/results/calibration.md``, "Fidelity").
TABLE1: dict[str, dict[str, float]] = {
    "math500": {"chain": 7.79, "ddtree_best": 10.73, "chain_t1": 6.46, "ddtree_best_t1": 9.54},
    "gsm8k": {"chain": 6.57, "ddtree_best": 9.54, "chain_t1": 5.93, "ddtree_best_t1": 8.95},
    "aime25": {"chain": 7.39, "ddtree_best": 9.86, "chain_t1": 4.79, "ddtree_best_t1": 7.71},
    "humaneval": {"chain": 6.61, "ddtree_best": 9.67, "chain_t1": 5.48, "ddtree_best_t1": 8.59},
    "mbpp": {"chain": 5.99, "ddtree_best": 9.07, "chain_t1": 5.30, "ddtree_best_t1": 8.34},
    "livecodebench": {"chain": 7.22, "ddtree_best": 10.28, "chain_t1": 6.61,
                      "ddtree_best_t1": 9.53},
    "mt-bench": {"chain": 4.28, "ddtree_best": 6.58, "chain_t1": 3.77, "ddtree_best_t1": 6.02},
    "alpaca": {"chain": 3.12, "ddtree_best": 5.09, "chain_t1": 2.94, "ddtree_best_t1": 4.89},
}
#: The node budget at which DDTree's best-budget entry of Table 1 is compared.
BEST_BUDGET = 512
#: The cells of the Table-1 fit: chain, DDTree@64 and DDTree@512 at T = 0, then at T = 1.
CELLS = ("chain", "ddtree64", "ddtree512", "chain_t1", "ddtree64_t1", "ddtree512_t1")
#: What each cell measures: ``(method, budget, temperature)``, exact E[tau] under ``follow``
#: (budget None: the chain at the drafter's depth).
CELL_SPECS = {f"{q}{sfx}": (method, budget, t)
              for sfx, t in (("", 0.0), ("_t1", 1.0))
              for q, method, budget in (("chain", "chain", None), ("ddtree64", "ddtree", BUDGET),
                                        (f"ddtree{BEST_BUDGET}", "ddtree", BEST_BUDGET))}
CELL_LABELS = {"chain": "chain T = 0", "ddtree64": "DDTree@64 T = 0",
               "ddtree512": "DDTree@512 T = 0", "chain_t1": "chain T = 1",
               "ddtree64_t1": "DDTree@64 T = 1", "ddtree512_t1": "DDTree@512 T = 1"}
#: Weight of a derived (unpublished) cell in the fit's least squares; published cells weigh 1.
DERIVED_WEIGHT = 0.25

def table1_targets() -> dict[str, dict[str, dict[str, object]]]:
    """Per regime and cell of :data:`CELLS`: ``value``, ``published``, ``source``, ``weight``.

    Chain and DDTree@512 (DDTree's best budget, compared at B = 512) at T = 0 and T = 1 are
    published for every regime (:data:`TABLE1`); DDTree@64 at T = 0 and T = 1 where TEV publishes
    it (:data:`PUBLISHED`: MATH-500, GSM8K, HumanEval, MT-Bench). Elsewhere DDTree@64 is derived
    as :func:`derive_targets` derives it, and weighs :data:`DERIVED_WEIGHT` in the fit.
    """
    derived = derive_targets()
    out: dict[str, dict[str, dict[str, object]]] = {}
    for name in CALIBRATED_REGIMES:
        t1, p = TABLE1[name], PUBLISHED[name]
        cells: dict[str, dict[str, object]] = {}
        for sfx in ("", "_t1"):
            temp = "T = 1" if sfx else "T = 0"
            for q, key in (("chain", "chain"), ("ddtree512", "ddtree_best")):
                cells[q + sfx] = {"value": t1[key + sfx], "published": True, "weight": 1.0,
                                  "source": f"published (DDTree Table 1, {temp})"}
            dd = p[f"ddtree64{sfx}"]
            if dd is not None:
                cells["ddtree64" + sfx] = {"value": dd, "published": True, "weight": 1.0,
                                           "source": f"published (TEV Table 1, B = 64, {temp})"}
            else:
                t = derived[name]
                cells["ddtree64" + sfx] = {
                    "value": getattr(t, "ddtree64" + sfx), "published": False,
                    "weight": DERIVED_WEIGHT,
                    "source": "derived: " + getattr(t, f"ddtree64{sfx}_derivation")}
        out[name] = {q: cells[q] for q in CELLS}
    return out

def within_tolerance(value: float, target: float, tol: float = TOLERANCE) -> bool:
    """Whether ``value`` lies within the relative tolerance ``tol`` of ``target``."""
    return abs(value - target) <= tol * target


def load_calibration_file(path: Path | str) -> dict:
    """The parsed calibration file at ``path`` (an empty dict where there is none)."""
    if not Path(path).exists():
        return {}
    data = read_json(path, "calibration file")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a calibration file holds a JSON object")
    return data

def published_band(target: float) -> ClaimedRange:
    """What reproducing a published value means: within :data:`TOLERANCE` of it."""
    return ClaimedRange(target * (1 - TOLERANCE), target * (1 + TOLERANCE))


def published_verdict(mean: float, low: float, high: float, target: float) -> str:
    """Whether a measured cell reproduces its published value within :data:`TOLERANCE`, by
    the one verdict rule (:func:`treespec_sim.verdicts.judge`) on its 95% interval: ``"yes"``
    (the interval inside :func:`published_band`), ``"NO"`` (entirely outside),
    ``"undecided"``."""
    v = judge(mean, low, high, published_band(target)).verdict
    return {"holds": "yes", "does not hold": "NO"}.get(v, "undecided")


def calibration_rows(data: dict | None = None, regimes: Iterable[str] | None = None
                     ) -> list[dict[str, object]]:
    """The stored fit, one flat dict per regime (in :data:`CALIBRATED_REGIMES` order).

    Parameters
    ----------
    data : dict, optional
        The parsed calibration file; defaults to the package's (:data:`CALIBRATION_FILE`).
    regimes : iterable of str, optional
        Keep only these; names that are not calibrated (or not in ``data``) are skipped.

    Returns
    -------
    list of dict
        Keys ``regime``, ``family``; per quantity ``q`` in :data:`QUANTITIES`:
        ``q_target``, ``q_published`` (the target is published, not derived), ``q_mean``,
        ``q_se``, ``q_n``, ``q_within`` (achieved mean within :data:`TOLERANCE` of the target),
        ``q_worlds`` (per-world means); ``within`` (the file's ``within_tolerance``: every
        published cell of the six within :data:`TOLERANCE`), ``world_seeds``,
        ``context_seed`` (of the achieved values), ``entropy_t1`` (token-entropy quantiles at
        ``T = 1``) and ``knobs`` (the regime's full knob dict).
    """
    if data is None:
        data = load_calibration_file(CALIBRATION_FILE)
    keep = None if regimes is None else set(regimes)
    stored = data.get("regimes", {})
    out: list[dict[str, object]] = []
    for name in CALIBRATED_REGIMES:
        e = stored.get(name)
        if e is None or (keep is not None and name not in keep):
            continue
        t, a = e["target"], e["achieved"]
        row: dict[str, object] = {"regime": name, "family": e["family"]}
        for q in QUANTITIES:
            if q not in t or q not in a:        # a file from before the T = 1 fit
                continue
            row[f"{q}_target"] = t[q]
            row[f"{q}_published"] = t[f"{q}_derivation"].startswith("published")
            row[f"{q}_mean"] = a[q]["mean"]
            row[f"{q}_se"] = a[q]["se"]
            row[f"{q}_n"] = a[q]["n"]
            row[f"{q}within_tolerance"] = within_tolerance(a[q]["mean"], t[q])
            row[f"{q}_worlds"] = list(a.get("per_world", {}).get(q, []))
        # the file's verdict where it has one (every published cell of the six within the
        # tolerance); an older file's: all three quantities
        row["within"] = bool(e.get("within_tolerance",
                                   all(row.get(f"{q}within_tolerance", False) for q in QUANTITIES)))
        row["world_seeds"] = list(a.get("world_seeds", []))
        row["context_seed"] = a.get("context_seed")
        row["entropy_t1"] = dict(a.get("entropy_t1", {}))
        row["knobs"] = e["knobs"]
        out.append(row)
    return out
