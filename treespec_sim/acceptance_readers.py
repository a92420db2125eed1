r"""Acceptance logs in the formats people have: the research repositories' and the engines'.

Every reader returns :class:`AcceptanceLog` values: per *unit* (a response, a request, a
logging window, an engine's counters) the rounds it verified and the tokens they committed,
and, where the log keeps it, how many rounds committed each ``tau = 1, 2, ...`` (the bonus token
counted). What a log determines and what it does not is recorded with it
(:attr:`AcceptanceLog.notes`, :attr:`AcceptanceLog.determines_law`):

* per-round lengths, a per-request histogram of accepted drafts, or a chain's per-position
  acceptance rates give the whole acceptance-length law of what the engine drafted (vLLM's
  rate at position ``i`` is the share of steps that accepted at least ``i + 1`` drafts, so
  ``P(tau = j + 1) = r_{j-1} - r_j``);
* a mean alone (SGLang's ``accept len`` line, a ``meta_info`` without its histogram) gives the
  mean, not the law;
* an engine's accept *rate* divides accepted drafts by a configured width (SGLang's
  ``num_draft_tokens - 1``); it is kept as logged and never read as a per-node rate.

Formats, detected from the content (fields and sources: ``docs/traces.md``, "Public logs", and
``tests/fixtures/logs/README.md``):

======================  ===========================================================
``benchmark``           DDTree/TEV ``benchmark.py --save-path FILE.pt`` (``torch.save``)
``caddtree-traces``     CaDDTree's ``--save-tree-traces`` (the same file, with round trees)
``jetspec``             JetSpec's ``bench/outputs/<run>/<method>.jsonl``
``spec-bench``          Spec-Bench answer JSONL (``choices[0].accept_lengths``)
``vllm-log``            vLLM's ``SpecDecoding metrics: ...`` log lines
``vllm-prometheus``     vLLM's Prometheus text (``vllm:spec_decode_num_*_total``)
``vllm-request``        vLLM's per-request ``metrics.speculative_decoding``
``sglang-meta``         SGLang's ``/generate`` ``meta_info`` (``spec_accept_histogram``)
``sglang-openai``       SGLang's OpenAI-API ``sglext.spec_tokens_details``
``sglang-log``          SGLang's ``Decode batch. ... accept len: ...`` log lines
``aiperf``              NVIDIA AIPerf ``profile_export.jsonl`` (``spec_decode_acceptance``)
======================  ===========================================================

Anything malformed or impossible is refused with one ``ValueError`` naming the file, the line
(or record) and the field: ``tau`` above ``L + 1`` (``L``: the drafted positions per step the
log states, else :data:`DEFAULT_WIDTH` or the caller's ``width``), negative, non-integral or
non-monotone counts, rates above 1, sums that contradict their parts. Every file is read
within the limits of :mod:`treespec_sim.files` (a line at a time within ``MAX_LINE_BYTES``, a
JSON document within ``MAX_TEXT_BYTES``, everything built within ``MAX_LOG_BYTES``).
"""

from __future__ import annotations

import math
import re
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .files import (
    MAX_LOG_BYTES,
    check_file,
    error_text,
    over_limit,
    parse_json,
    read_lines,
    read_text,
)
from .stats import MeanCI, batch_mean_ci
from .torch_save import Record, load_torch_save
from .validation import Interval, check_param, is_int, is_number

__all__ = ["DEFAULT_WIDTH", "FORMATS", "AcceptanceLog", "read_log", "read_logs"]

#: Drafted positions per step assumed where a log does not state them: a DFlash block of 16
#: tokens drafts ``L = 15`` (override with ``width=``; ``--width`` on the command lines).
DEFAULT_WIDTH = 15

#: Format key -> what it is (the ``source`` of an :class:`AcceptanceLog`).
FORMATS = {
    "benchmark": "DDTree/TEV benchmark.py --save-path (torch.save)",
    "caddtree-traces": "CaDDTree benchmark_caddtree.py --save-tree-traces (torch.save)",
    "jetspec": "JetSpec bench/outputs/<run>/<method>.jsonl",
    "spec-bench": "Spec-Bench answer JSONL (choices[0].accept_lengths)",
    "vllm-log": "vLLM 'SpecDecoding metrics' log lines",
    "vllm-prometheus": "vLLM Prometheus text exposition (vllm:spec_decode_num_*_total)",
    "vllm-request": "vLLM per-request metrics.speculative_decoding",
    "sglang-meta": "SGLang /generate meta_info (spec_verify_ct, spec_accept_histogram)",
    "sglang-openai": "SGLang OpenAI-API sglext.spec_tokens_details",
    "sglang-log": "SGLang 'Decode batch. ... accept len' log lines",
    "aiperf": "NVIDIA AIPerf profile_export.jsonl (spec_decode_acceptance)",
}

#: Rounding of vLLM's logged per-position rates (``{p:.3f}``) and mean (``%.2f``).
_RATE_ROUNDING = 0.0005
_MEAN_ROUNDING = 0.005


# ----------------------------------------------------------------------------- the value
@dataclass(frozen=True)
class AcceptanceLog:
    r"""What one method's acceptance log says, per unit, and what it leaves open.

    Attributes
    ----------
    path : str
        The file.
    source : str
        The format (a key of :data:`FORMATS`).
    method : str
        The log's method key (``"ddtree_tb64"``, ``"dflash"``, a file stem, ``"vllm"``, a
        Spec-Bench ``model_id``, ...).
    unit_sums : ndarray float64 (n,)
        Tokens committed per unit, the bonus counted (for a mean-only log with unknown rounds,
        the unit's mean).
    unit_rounds : ndarray float64 (n,)
        Rounds (verification steps) per unit; ones where :attr:`rounds_known` is false.
    counts : ndarray float64 (n, m) or None
        ``counts[u, k - 1]``: rounds of unit ``u`` that committed ``k`` tokens; reconstructed
        from rates (not integers) for vLLM's log lines; ``None`` where the log holds means only.
    rounds_known : bool
        Whether :attr:`unit_rounds` are the units' rounds (else each unit's mean weighs one).
    unit_name : str
        What a unit is (``"response"``, ``"request"``, ``"window"``, ``"engine"``).
    width : int or None
        Drafted positions per step where the log says (vLLM's ``num_spec_tokens``, the number
        of per-position rates, ``block_size - 1``): ``tau <= width + 1``.
    lengths, sequence : ndarray int64 (r,) or None
        Per-round ``tau`` in file order and the unit of each round, for logs that keep rounds.
    budgets : ndarray int64 (r,) or None
        Per-round tree budget (CaDDTree's traces) or tree size (JetSpec's ``tree_sizes``).
    temperature : float or None
        The decode's temperature where the log says.
    depth : int or None
        The drafter's block depth ``L`` where the log says (``block_size - 1``).
    accept_rate : float or None
        The engine's own accept rate as logged (accepted drafts over a configured width):
        not a per-node rate, kept for display.
    notes : tuple of str
        What the log determines and what it does not, in sentences.
    meta : dict
        Other settings the log holds.
    """

    path: str
    source: str
    method: str
    unit_sums: np.ndarray
    unit_rounds: np.ndarray
    counts: np.ndarray | None = None
    rounds_known: bool = True
    unit_name: str = "response"
    width: int | None = None
    lengths: np.ndarray | None = None
    sequence: np.ndarray | None = None
    budgets: np.ndarray | None = None
    temperature: float | None = None
    depth: int | None = None
    accept_rate: float | None = None
    notes: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def determines_law(self) -> bool:
        """Whether the log gives the whole acceptance-length law (not only its mean)."""
        return self.counts is not None

    @property
    def responses(self) -> int:
        """Units (responses, requests, windows, ...): the units of the intervals."""
        return int(self.unit_sums.size)

    @property
    def rounds(self) -> float | None:
        """Rounds in the log (``None`` where it does not say)."""
        return float(self.unit_rounds.sum()) if self.rounds_known else None

    @property
    def max_tau(self) -> int:
        """The largest ``tau`` a round of the log committed (a mean-only log: the ceiling of
        its largest unit mean)."""
        if self.counts is None:
            return math.ceil(float((self.unit_sums / self.unit_rounds).max()) - 1e-9)
        nz = np.flatnonzero(self.counts.sum(axis=0) > 0)
        return int(nz[-1]) + 1 if nz.size else 1

    def probs(self, max_tau: int | None = None) -> np.ndarray:
        """The acceptance-length law as fractions of rounds, ``(max_tau,)``: entry ``k - 1`` is
        the share of rounds that committed ``k`` tokens.

        Raises
        ------
        ValueError
            For a log of means only (the law is not in it), or ``max_tau`` below the log's
            longest round.
        """
        if self.counts is None:
            raise ValueError(f"{self.path}: the log gives the mean tokens per round, not their "
                             "law (no histogram, per-round lengths or per-position rates)")
        m = self.max_tau if max_tau is None else int(max_tau)
        if m < self.max_tau:
            raise ValueError(f"max_tau = {m} is below the log's longest round {self.max_tau}")
        total = self.counts.sum(axis=0)
        out = np.zeros(m)
        out[: min(m, total.size)] = total[:m]
        return out / out.sum()

    def histogram(self) -> np.ndarray:
        """Rounds per ``tau = 1..max_tau`` over every unit, float64 ``(max_tau,)``."""
        if self.counts is None:
            raise ValueError(f"{self.path}: the log holds means only")
        return self.counts.sum(axis=0)[: self.max_tau]

    def mean(self) -> MeanCI:
        """Mean tokens per round with its 95% t-interval over units (the ratio estimator over
        responses, requests or windows: :func:`treespec_sim.stats.batch_mean_ci`); a single
        unit has no interval (``MeanCI.has_interval`` false)."""
        return batch_mean_ci(self.unit_sums, self.unit_rounds)


# ----------------------------------------------------------------------------- collecting
class _Units:
    """Units as a reader meets them, with the checks every format shares."""

    def __init__(self, path: Path, width: int, width_why: str) -> None:
        self.path = path
        self.width = width
        self.why = width_why
        self.hists: list[np.ndarray | None] = []
        self.sums: list[float] = []
        self.rounds: list[float] = []
        self.lengths: list[np.ndarray] = []
        self.entries = 0
        self.cap = MAX_LOG_BYTES.get()

    def _spend(self, n: int, where: str) -> None:
        self.entries += n
        if 16 * self.entries > self.cap:
            raise over_limit(self.path, f"the acceptance data up to {where}", 16 * self.entries,
                             MAX_LOG_BYTES)

    def _check_tau(self, tau: int, where: str, what: str) -> None:
        if tau > self.width + 1:
            raise ValueError(f"{where}: {what} has tau = {tau} tokens in a round, more than "
                             f"L + 1 = {self.width + 1} ({self.why})")

    def add_hist(self, hist: np.ndarray, where: str, what: str) -> None:
        """A unit's rounds per ``tau = 1..`` (index ``tau - 1``)."""
        nz = np.flatnonzero(hist > 0)
        if nz.size:
            self._check_tau(int(nz[-1]) + 1, where, what)
        self._spend(hist.size, where)
        self.hists.append(hist)
        self.sums.append(float(np.dot(np.arange(1, hist.size + 1), hist)))
        self.rounds.append(float(hist.sum()))

    def add_lengths(self, lens: np.ndarray, where: str, what: str) -> None:
        if lens.size:
            self._check_tau(int(lens.max()), where, what)
        self._spend(lens.size, where)
        self.lengths.append(lens)
        self.add_hist(np.bincount(lens - 1).astype(np.float64) if lens.size else np.zeros(1),
                      where, what)

    def add_mean(self, mean: float, rounds: float | None, where: str, what: str) -> None:
        if not (math.isfinite(mean) and 1.0 <= mean):
            raise ValueError(f"{where}: {what} = {mean!r} is not a mean of at least 1 token per "
                             "round (the bonus token counted)")
        if mean > self.width + 1 + 1e-9:
            raise ValueError(f"{where}: {what} = {mean:g} tokens per round, more than L + 1 = "
                             f"{self.width + 1} ({self.why})")
        self._spend(2, where)
        self.hists.append(None)
        if rounds is None:
            self.sums.append(float(mean))
            self.rounds.append(math.nan)
        else:
            self.sums.append(float(mean) * rounds)
            self.rounds.append(float(rounds))

    def build(self, source: str, method: str, *, unit_name: str, width: int | None = None,
              temperature: float | None = None, depth: int | None = None,
              accept_rate: float | None = None, notes: Sequence[str] = (),
              meta: Mapping[str, Any] | None = None, budgets: np.ndarray | None = None,
              sequence: np.ndarray | None = None) -> AcceptanceLog:
        keep = [i for i, r in enumerate(self.rounds) if not (r == 0)]
        if not keep:
            raise ValueError(f"{self.path}: no rounds (no unit verified a draft)")
        rounds = np.array([self.rounds[i] for i in keep])
        sums = np.array([self.sums[i] for i in keep])
        known = not np.any(np.isnan(rounds))
        notes = list(notes)
        if not known:
            if not np.all(np.isnan(rounds)):
                raise ValueError(f"{self.path}: some units state their rounds and some do not")
            rounds = np.ones(rounds.size)
            notes.append(f"the log does not say how many rounds each {unit_name} verified: "
                         f"each {unit_name}'s mean weighs one")
        hists = [self.hists[i] for i in keep]
        counts = None
        if all(h is not None for h in hists):
            # each unit up to its longest round: trailing zeros never size the table
            sizes = [int(np.flatnonzero(h > 0).max(initial=-1)) + 1 for h in hists]
            m = max(max(sizes), 1)
            if 8 * len(hists) * m > self.cap:
                raise over_limit(self.path, f"its table of {len(hists)} {unit_name}s x {m} "
                                 "lengths", 8 * len(hists) * m, MAX_LOG_BYTES)
            counts = np.zeros((len(hists), m))
            for i, (h, n) in enumerate(zip(hists, sizes, strict=True)):
                counts[i, :n] = h[:n]
            notes.insert(0, "the log gives the whole acceptance-length law of what was drafted")
        else:
            missing = sum(h is None for h in hists)
            notes.insert(0, f"the log gives the mean tokens per round, not their law ({missing} "
                            f"of {len(hists)} {unit_name}s without a histogram, per-round "
                            "lengths or per-position rates)")
        if len(keep) < len(self.rounds):
            notes.append(f"{len(self.rounds) - len(keep)} {unit_name}s verified no draft and "
                         "are left out")
        lengths = np.concatenate(self.lengths) if self.lengths else None
        if lengths is not None and sequence is None:
            sequence = np.concatenate([np.full(x.size, i, dtype=np.int64)
                                       for i, x in enumerate(self.lengths)])
        return AcceptanceLog(str(self.path), source, method, sums, rounds, counts, known,
                             unit_name, width, lengths, sequence, budgets, temperature, depth,
                             accept_rate, tuple(notes), dict(meta or {}))


# ----------------------------------------------------------------------------- field checks
def _number(value: Any, where: str, what: str) -> float:
    if not is_number(value, numpy=False):
        raise ValueError(f"{where}: {what} = {value!r:.60} is not a number")
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{where}: {what} = {value!r} is not finite")
    return x


def _count(value: Any, where: str, what: str) -> int:
    """A non-negative integer count (an integral float such as ``2870.0`` passes)."""
    x = _number(value, where, what)
    if x < 0 or x != math.floor(x):
        raise ValueError(f"{where}: {what} = {value!r} is not a non-negative integer count")
    if x > 2**53:
        raise ValueError(f"{where}: {what} = {value!r} is beyond any log's count")
    return int(x)


def _rate(value: Any, where: str, what: str, *, tol: float = 0.0) -> float:
    x = _number(value, where, what)
    if x < 0 or x > 1 + tol:
        raise ValueError(f"{where}: {what} = {value!r} is not a rate in [0, 1]")
    return min(x, 1.0)


def _counts(values: Any, where: str, what: str) -> np.ndarray:
    """A dense list of non-negative integer counts, float64."""
    if not isinstance(values, list | tuple):
        raise ValueError(f"{where}: {what} must be a list of counts; got {type(values).__name__}")
    return np.array([_count(v, where, f"{what}[{i}]") for i, v in enumerate(values)],
                    dtype=np.float64)


def _sparse_counts(values: Any, where: str, what: str, cap: int) -> np.ndarray:
    """AIPerf's ``{"j": count}``: accepted drafts ``j`` -> steps, as a dense list."""
    if not isinstance(values, dict):
        raise ValueError(f"{where}: {what} must be an object of counts; got "
                         f"{type(values).__name__}")
    keys = {}
    for k, v in values.items():
        try:
            j = int(k)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: {what} has key {k!r:.30}, not an accepted-draft count"
                             ) from None
        if j < 0 or j > cap:
            raise ValueError(f"{where}: {what} has key {j}: a round that accepted {j} drafts "
                             f"commits {j + 1} tokens, more than L + 1 = {cap + 1}")
        keys[j] = _count(v, where, f"{what}[{k!r}]")
    out = np.zeros(max(keys, default=0) + 1)
    for j, c in keys.items():
        out[j] = c
    return out


def _lengths(values: Any, where: str) -> np.ndarray:
    """Per-round acceptance lengths (``tau >= 1`` integers)."""
    if not isinstance(values, np.ndarray | list | tuple):
        raise ValueError(f"{where}: acceptance lengths must be a list of integers")
    try:
        arr = np.asarray(values.tolist() if isinstance(values, np.ndarray) else list(values))
    except (ValueError, TypeError, OverflowError):
        raise ValueError(f"{where}: acceptance lengths must be a list of integers") from None
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.number)) or (
            arr.dtype == np.bool_):
        raise ValueError(f"{where}: acceptance lengths must be a list of integers")
    if arr.size and (not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr))
                     or arr.min() < 1 or arr.max() > 2**31):
        bad = int(np.flatnonzero(~np.isfinite(arr) | (arr != np.round(arr)) | (arr < 1)
                                 | (arr > 2**31))[0])
        raise ValueError(f"{where}: round {bad} has acceptance length {arr[bad].item()!r} (an "
                         "integer >= 1: tokens committed, the bonus counted)")
    return arr.astype(np.int64)


def _hist_of_accepted(hist: np.ndarray) -> np.ndarray:
    """Steps per accepted drafts ``j`` -> rounds per ``tau = j + 1`` (the same array: index
    ``j`` is ``tau - 1``)."""
    return hist


# ----------------------------------------------------------------------------- torch.save
def _benchmark_logs(obj: Any, path: Path, width: int | None) -> list[AcceptanceLog]:
    if not isinstance(obj, dict) or not isinstance(obj.get("responses"), list):
        raise ValueError(f"{path}: a benchmark.py --save-path file holds a dict with "
                         "'responses' (a list); this one does not")
    args = obj.get("args") if isinstance(obj.get("args"), dict) else {}
    t = args.get("temperature")
    if t is not None:
        t = _number(t, str(path), "args.temperature")
    block = obj.get("block_size", args.get("block_size"))
    depth = int(block) - 1 if is_int(block, numpy=False) and block >= 2 else None
    w, why = _width(depth, width, "block_size - 1, from the file")
    per: dict[str, dict[str, Any]] = {}
    for i, response in enumerate(obj["responses"]):
        if not isinstance(response, dict):
            raise ValueError(f"{path}: responses[{i}] is not a dict of method results")
        for key, res in response.items():
            where = f"{path}: responses[{i}][{key!r}]"
            if not isinstance(res, Record) or not hasattr(res, "acceptance_lengths"):
                raise ValueError(f"{where} has no acceptance_lengths")
            lens = _lengths(res.acceptance_lengths, where)
            d = per.setdefault(str(key), {"units": _Units(path, w, why), "budgets": [],
                                          "traces": False})
            trees = getattr(res, "round_trees", None)
            if trees:
                if not isinstance(trees, list) or len(trees) != lens.size:
                    raise ValueError(f"{where}: {len(trees) if isinstance(trees, list) else '?'} "
                                     f"round_trees for {lens.size} rounds")
                for r, tree in enumerate(trees):
                    acc = tree.get("accepted_indices") if isinstance(tree, dict) else None
                    if not isinstance(acc, list | tuple | np.ndarray) or "budget" not in tree:
                        raise ValueError(f"{where}: round_trees[{r}] lacks budget or "
                                         "accepted_indices")
                    if len(acc) != int(lens[r]):
                        raise ValueError(f"{where}: round {r} accepted {len(acc)} nodes (root "
                                         f"included) but its acceptance length is {lens[r]}")
                    d["budgets"].append(_count(tree["budget"], where,
                                               f"round_trees[{r}].budget"))
                d["traces"] = True
            d["units"].add_lengths(lens, where, "acceptance_lengths")
    meta = {k: v for k, v in obj.items() if k != "responses" and not isinstance(v, np.ndarray)}
    out = []
    for key, d in per.items():
        units: _Units = d["units"]
        if not units.lengths or not sum(x.size for x in units.lengths):
            continue
        budgets = np.asarray(d["budgets"], dtype=np.int64) if d["traces"] else None
        out.append(units.build("caddtree-traces" if d["traces"] else "benchmark", key,
                               unit_name="response", width=depth, temperature=t, depth=depth,
                               meta=meta, budgets=budgets))
    return out


def _width(stated: int | None, given: int | None, why: str) -> tuple[int, str]:
    """The drafted positions per step ``L`` the ``tau <= L + 1`` check uses, and why."""
    if stated is not None:
        if given is not None and given != stated:
            raise ValueError(f"width: the log states L = {stated} ({why}); got --width {given}")
        return stated, f"L = {stated}: {why}"
    if given is not None:
        return given, f"L = {given}: the width given"
    return DEFAULT_WIDTH, (f"L = {DEFAULT_WIDTH}, a DFlash block of 16, where the log does not "
                           "say; pass width= (--width) for another drafter")


# ----------------------------------------------------------------------------- lines
def _first_line(path: Path) -> str:
    for _, line in read_lines(path):
        if line.strip():
            return line.strip()
    return ""


# ----------------------------------------------------------------------------- vLLM lines
_VLLM_MARK = "SpecDecoding metrics:"
_VLLM_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"
_VLLM_RE = {
    "Mean acceptance length": re.compile(r"Mean acceptance length: " + _VLLM_NUM),
    "Accepted": re.compile(r"\bAccepted: " + _VLLM_NUM + r" tokens"),
    "Drafted": re.compile(r"\bDrafted: " + _VLLM_NUM + r" tokens"),
    "Avg Draft acceptance rate": re.compile(r"Avg Draft acceptance rate: " + _VLLM_NUM + "%"),
}
_VLLM_RATES = re.compile(r"Per-position acceptance rate: (.*?)(?:, Avg Draft|$)")


def _vllm_line(line: str, where: str) -> tuple[np.ndarray, float, float, float | None]:
    """One ``SpecDecoding metrics`` line: ``(rates, accepted, drafted, mean)``."""
    text = line.split(_VLLM_MARK, 1)[1]
    got: dict[str, float] = {}
    for name, rx in _VLLM_RE.items():
        m = rx.search(text)
        if m:
            got[name] = _number(float(m.group(1)), where, name)
    for name in ("Accepted", "Drafted"):
        if name not in got:
            raise ValueError(f"{where}: the SpecDecoding metrics line has no '{name}: N tokens'")
        _count(got[name], where, name)
    m = _VLLM_RATES.search(text.rstrip())
    if not m:
        raise ValueError(f"{where}: the SpecDecoding metrics line has no 'Per-position "
                         "acceptance rate' (the law needs it; a mean alone does not give it)")
    parts = [p.strip() for p in m.group(1).split(",") if p.strip()]
    try:
        raw = [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"{where}: Per-position acceptance rate {m.group(1)!r:.80} is not a "
                         "list of numbers") from None
    if not raw:
        raise ValueError(f"{where}: Per-position acceptance rate is empty")
    rates = np.array([_rate(r, where, f"Per-position acceptance rate[{i}]",
                            tol=_RATE_ROUNDING) for i, r in enumerate(raw)])
    for i in range(1, rates.size):
        if rates[i] > rates[i - 1] + 2 * _RATE_ROUNDING:
            raise ValueError(f"{where}: Per-position acceptance rate[{i}] = {rates[i]:g} is above "
                             f"rate[{i - 1}] = {rates[i - 1]:g} (the share of steps that accepted "
                             f"at least {i + 1} drafts cannot exceed the share that accepted "
                             f"{i}: the rates are non-increasing)")
    if "Avg Draft acceptance rate" in got:
        _rate(got["Avg Draft acceptance rate"] / 100, where, "Avg Draft acceptance rate",
              tol=_RATE_ROUNDING)
    if got["Accepted"] > got["Drafted"]:
        raise ValueError(f"{where}: Accepted = {got['Accepted']:g} tokens is more than Drafted = "
                         f"{got['Drafted']:g}")
    return rates, got["Accepted"], got["Drafted"], got.get("Mean acceptance length")


def _vllm_log(path: Path, width: int | None) -> AcceptanceLog:
    """vLLM's periodic ``SpecDecoding metrics`` lines: each line one window (a unit)."""
    hists, k = [], None
    estimated = 0
    units = None
    accepted_total = drafted_total = 0.0
    for n, line in read_lines(path):
        if _VLLM_MARK not in line:
            continue
        where = f"{path}: line {n}"
        rates, acc, drafted, mean = _vllm_line(line, where)
        if k is None:
            k = int(rates.size)
            w, why = _width(k, width, "the number of per-position rates, vLLM's "
                                      "num_speculative_tokens")
            units = _Units(path, w, why)
        elif rates.size != k:
            raise ValueError(f"{where}: {rates.size} per-position rates, where the earlier lines "
                             f"have {k} (num_speculative_tokens changed within the log)")
        if drafted == 0:
            continue
        drafts = drafted / k  # every draft of k tokens
        if mean is not None:
            full = 1.0 + acc / drafts
            if mean > full + _MEAN_ROUNDING + 1e-9:
                raise ValueError(f"{where}: Mean acceptance length {mean:g} is above 1 + "
                                 f"Accepted / (Drafted / k) = {full:.4f}, its largest possible "
                                 f"value with k = {k} drafts per step")
            if mean < full - _MEAN_ROUNDING - 1e-9:
                # some drafts were shorter than k: the number of drafts from the mean
                drafts = acc / (mean - 1.0) if mean > 1.0 else drafts
                estimated += 1
        tol = k * _RATE_ROUNDING + (_MEAN_ROUNDING if mean is not None else 0.0) + 1e-9
        if abs(rates.sum() - acc / drafts) > tol + 0.01 * acc / drafts:
            raise ValueError(f"{where}: Per-position acceptance rate sums to {rates.sum():.4f}, "
                             f"but Accepted / drafts = {acc / drafts:.4f} (they are the same "
                             "mean number of accepted drafts)")
        tail = np.concatenate([[1.0], rates, [0.0]])
        hist = np.clip(tail[:-1] - tail[1:], 0.0, None) * drafts
        units.add_hist(hist, where, "Per-position acceptance rate")
        hists.append(hist)
        accepted_total += acc
        drafted_total += drafted
    if k is None:
        raise ValueError(f"{path}: no '{_VLLM_MARK}' line")
    notes = [f"each line is one logging window of the whole engine (k = {k} drafts per step); "
             "the windows are the units of the interval",
             "the number of drafts per window is Drafted / k (vLLM does not log it); the "
             "histogram is rebuilt from the per-position rates, rounded to 3 decimals"]
    if estimated:
        notes.append(f"{estimated} window(s) had drafts shorter than k: their number of drafts "
                     "comes from the mean acceptance length instead")
    return units.build("vllm-log", "vllm", unit_name="window", width=k,
                       accept_rate=accepted_total / drafted_total if drafted_total else None,
                       notes=notes)


# ----------------------------------------------------------------------------- SGLang lines
_SGLANG_MARK = "Decode batch"
_SGLANG_LEN = re.compile(r"accept len: " + _VLLM_NUM)
_SGLANG_RATE = re.compile(r"accept rate: " + _VLLM_NUM)


def _sglang_log(path: Path, width: int | None) -> AcceptanceLog:
    """SGLang's ``Decode batch. ... accept len: X, accept rate: Y`` lines: a mean per window,
    the window's number of verification steps not logged."""
    w, why = _width(None, width, "")
    units = _Units(path, w, why)
    rates = []
    for n, line in read_lines(path):
        if _SGLANG_MARK not in line or "accept len:" not in line:
            continue
        where = f"{path}: line {n}"
        m = _SGLANG_LEN.search(line)
        if not m:
            raise ValueError(f"{where}: 'accept len:' is not followed by a number")
        units.add_mean(_number(float(m.group(1)), where, "accept len"), None, where,
                       "accept len")
        r = _SGLANG_RATE.search(line)
        if r:
            rates.append(_rate(float(r.group(1)), where, "accept rate"))
    if not units.sums:
        raise ValueError(f"{path}: no '{_SGLANG_MARK}. ... accept len: ...' line")
    notes = ["each line is one logging window; SGLang logs its mean accept length, not the "
             "steps it verified nor their law",
             "SGLang's accept rate divides accepted drafts by the configured width "
             "(num_draft_tokens - 1): not a per-node rate; kept as logged"]
    return units.build("sglang-log", "sglang", unit_name="window", width=width,
                       accept_rate=float(np.mean(rates)) if rates else None, notes=notes)


# ----------------------------------------------------------------------------- Prometheus
_PROM_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_PROM_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_PROM_NAMES = {"vllm:spec_decode_num_drafts": "drafts",
               "vllm:spec_decode_num_draft_tokens": "draft_tokens",
               "vllm:spec_decode_num_accepted_tokens": "accepted",
               "vllm:spec_decode_num_accepted_tokens_per_pos": "per_pos"}


def _prom_labels(text: str, where: str) -> dict[str, str]:
    out, pos = {}, 0
    text = text.strip()
    while pos < len(text):
        m = _PROM_LABEL.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"{where}: labels {{{text:.80}}} are not name=\"value\" pairs")
        out[m.group(1)] = m.group(2)
        pos = m.end()
    return out


def _prometheus(path: Path, width: int | None) -> AcceptanceLog:
    """vLLM's spec-decode counters from a ``/metrics`` scrape: one unit per label set (an
    engine, a model), position labels aside."""
    units = None
    k_all = None
    drafted_total = accepted_total = 0.0
    for key, g in _prom_groups(path).items():
        label = ", ".join(f"{a}={b!r}" for a, b in key) or "no labels"
        drafts, c = _prom_chain(path, label, g)
        if k_all is None:
            k_all = c.size
            w, why = _width(k_all, width, "the number of per-position counters, vLLM's "
                                          "num_speculative_tokens")
            units = _Units(path, w, why)
        _prom_check_counts(path, g, drafts, c)
        if "draft_tokens" in g:
            drafted_total += g["draft_tokens"]
            accepted_total += c.sum()
        if drafts == 0:
            continue
        tail = np.concatenate([[drafts], c, [0.0]])
        units.add_hist(tail[:-1] - tail[1:], f"{path}: the counters of {label}",
                       "accepted_tokens_per_pos")
    notes = [f"counters since the engine started (one scrape), k = {k_all} drafts per step; "
             "one unit per label set (an engine): a single engine has no interval",
             "P(tau >= i + 2) = accepted_tokens_per_pos[i] / drafts: the whole law of the chain"]
    return units.build("vllm-prometheus", "vllm", unit_name="engine", width=k_all,
                       accept_rate=accepted_total / drafted_total if drafted_total else None,
                       notes=notes)


def _prom_groups(path: Path) -> dict[tuple, dict[str, Any]]:
    """The scrape's spec-decode counters by label set (position aside): each kind's value
    (:data:`_PROM_NAMES`; ``per_pos``: position -> count) and the line it was on (``line``);
    the label sets that have drafts or per-position counts."""
    groups: dict[tuple, dict[str, Any]] = {}
    for n, line in read_lines(path):
        where = f"{path}: line {n}"
        sample = _prom_sample(line, where)
        if sample is None:
            continue
        metric, kind, value, key, pos = sample
        g = groups.setdefault(key, {"per_pos": {}, "line": {}})
        if kind == "per_pos":
            if pos is None or not pos.isdigit():
                raise ValueError(f"{where}: {metric} needs a position=\"i\" label")
            if int(pos) in g["per_pos"]:
                raise ValueError(f"{where}: {metric} position {pos} appears twice")
            g["per_pos"][int(pos)] = value
            g["line"][("per_pos", int(pos))] = n
        else:
            if kind in g:
                raise ValueError(f"{where}: {metric} appears twice for the same labels")
            g[kind] = value
            g["line"][kind] = n
    groups = {k: g for k, g in groups.items() if "drafts" in g or g["per_pos"]}
    if not groups:
        raise ValueError(f"{path}: no vllm:spec_decode_num_drafts_total counter")
    return groups


def _prom_sample(line: str, where: str) -> tuple[str, str, float, tuple, str | None] | None:
    """A sample line of a spec-decode counter as ``(metric, kind, value, label set,
    position label)``; ``None`` for a blank line, a comment or another metric."""
    s = line.strip()
    if not s or s.startswith("#"):
        return None
    m = _PROM_LINE.match(s)
    if not m:
        raise ValueError(f"{where}: not a Prometheus sample line (name{{labels}} value)")
    name = m.group(1).removesuffix("_total")
    if m.group(1).endswith("_created") or name not in _PROM_NAMES:
        return None
    try:
        value = float(m.group(4))
    except ValueError:
        raise ValueError(f"{where}: {m.group(1)} has value {m.group(4)!r:.40}, not a number"
                         ) from None
    value = float(_count(value, where, m.group(1)))
    labels = _prom_labels(m.group(3) or "", where)
    pos = labels.pop("position", None)
    return m.group(1), _PROM_NAMES[name], value, tuple(sorted(labels.items())), pos


def _prom_chain(path: Path, label: str, g: dict[str, Any]) -> tuple[float, np.ndarray]:
    """A label set's drafts and its accepted counts at positions ``0..k-1`` (float64
    ``(k,)``): both present, no position missing."""
    if "drafts" not in g:
        raise ValueError(f"{path}: the counters with {label} have per-position counts but no "
                         "vllm:spec_decode_num_drafts_total")
    drafts = g["drafts"]
    pp = g["per_pos"]
    if not pp:
        raise ValueError(f"{path}: line {g['line']['drafts']}: no "
                         "vllm:spec_decode_num_accepted_tokens_per_pos_total for "
                         f"{label} (the law needs the per-position counts)")
    k = max(pp) + 1
    if k != len(pp):  # the first missing positions, never range(k): k is the file's word
        missing = [i for i in range(len(pp) + 1) if i not in pp][:5]
        raise ValueError(f"{path}: the per-position counters of {label} lack position(s) "
                         f"{missing}{' ...' if k - len(pp) > len(missing) else ''} (the "
                         f"largest is {k - 1})")
    return drafts, np.array([pp[i] for i in range(k)])


def _prom_check_counts(path: Path, g: dict[str, Any], drafts: float, c: np.ndarray) -> None:
    """The counters agree: the per-position counts ``c`` do not increase from ``drafts`` on,
    sum to the accepted tokens, and lie within the draft tokens (where those are given)."""
    k = c.size
    prev = drafts
    for i in range(k):
        if c[i] > prev:
            where = f"{path}: line {g['line'][('per_pos', i)]}"
            what = "vllm:spec_decode_num_drafts_total" if i == 0 else f"position {i - 1}"
            raise ValueError(f"{where}: accepted_tokens_per_pos at position {i} is {c[i]:g}, "
                             f"more than at {what} ({prev:g}): the counts are non-increasing")
        prev = c[i]
    if "accepted" in g and abs(g["accepted"] - c.sum()) > 0.5:
        raise ValueError(f"{path}: line {g['line']['accepted']}: "
                         f"vllm:spec_decode_num_accepted_tokens_total = {g['accepted']:g} is "
                         f"not the sum of the per-position counts ({c.sum():g})")
    if "draft_tokens" in g:
        dt = g["draft_tokens"]
        if dt < c.sum() or dt > drafts * k + 0.5:
            raise ValueError(f"{path}: line {g['line']['draft_tokens']}: "
                             f"vllm:spec_decode_num_draft_tokens_total = {dt:g} is outside "
                             f"[accepted = {c.sum():g}, drafts x k = {drafts * k:g}]")


# ----------------------------------------------------------------------------- JSON records
def _records(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` of a JSON-lines file (one object a line, read a line at a time) or
    of one JSON document (an object, or an array of objects, read within MAX_TEXT_BYTES)."""
    first = _first_line(path)
    try:
        parse_json(first, str(path))
        jsonl = first.startswith("{")
    except ValueError:
        jsonl = False
    if jsonl:
        for n, line in read_lines(path):
            if line.strip():
                yield f"{path}: line {n}", parse_json(line, f"{path}: line {n}")
        return
    doc = parse_json(read_text(path, "acceptance log"), str(path))
    if isinstance(doc, list):
        for i, rec in enumerate(doc):
            yield f"{path}: record {i}", rec
    else:
        yield f"{path}: record 0", doc


def _dig(rec: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(rec, dict):
            return None
        rec = rec.get(k)
    return rec


def _kind(rec: Any) -> str | None:
    """The format of one JSON record (``None``: none of them)."""
    if not isinstance(rec, dict):
        return None
    if "accept_lengths" in rec or "acceptance_lengths" in rec:
        return "jetspec"
    ch = rec.get("choices")
    c0 = ch[0] if isinstance(ch, list) and ch and isinstance(ch[0], dict) else {}
    if "accept_lengths" in c0:
        return "spec-bench"
    if "spec_decode_acceptance" in rec:
        return "aiperf"
    if isinstance(rec.get("metrics"), dict) and "speculative_decoding" in rec["metrics"]:
        return "vllm-request"
    if "acceptance_histogram" in rec and "num_spec_steps" in rec:
        return "vllm-request"
    if isinstance(rec.get("sglext"), dict) or "spec_correct_drafts_histogram" in rec:
        return "sglang-openai"
    if isinstance(rec.get("meta_info"), dict) or "spec_verify_ct" in rec \
            or "spec_accept_histogram" in rec or isinstance(c0.get("meta_info"), dict):
        return "sglang-meta"
    return None


def _json_logs(path: Path, width: int | None) -> list[AcceptanceLog]:
    kind = None
    state: dict[str, Any] = {}
    skipped = 0
    for where, rec in _records(path):
        k = _kind(rec)
        if kind is None:
            if k is None:
                if isinstance(rec, dict) and "metadata" in rec and "metrics" in rec:
                    skipped += 1  # an AIPerf record without spec-decode data
                    continue
                raise ValueError(f"{where} is none of the JSON formats read ({_json_names()})")
            kind = k
            state = _READERS[kind][0](path, width)
        elif k != kind:
            if kind == "aiperf" and isinstance(rec, dict) and "metadata" in rec:
                skipped += 1
                continue
            raise ValueError(f"{where} is not a {FORMATS[kind]} record like the lines before "
                             "it" + (f" (it looks like {FORMATS[k]})" if k else ""))
        _READERS[kind][1](state, rec, where)
    if kind is None:
        raise ValueError(f"{path}: no record with acceptance data")
    if skipped:
        state.setdefault("notes", []).append(f"{skipped} record(s) without spec-decode "
                                             "acceptance data left out")
    return _READERS[kind][2](state)


def _json_names() -> str:
    return ", ".join(FORMATS[k] for k in ("jetspec", "spec-bench", "vllm-request",
                                          "sglang-meta", "sglang-openai", "aiperf"))


def _start(path: Path, width: int | None, why: str = "", stated: int | None = None) -> dict:
    w, reason = _width(stated, width, why)
    return {"path": path, "units": _Units(path, w, reason), "width": stated, "notes": [],
            "temps": set(), "rates": [], "method": None, "sizes": [], "sizes_ok": True,
            "given": width}


# JetSpec ---------------------------------------------------------------------
def _jetspec_rec(st: dict, rec: dict, where: str) -> None:
    key = "accept_lengths" if "accept_lengths" in rec else "acceptance_lengths"
    lens = _lengths(rec[key], where)
    mean = rec.get("accept_len_mean")
    if mean is not None and lens.size and abs(_number(mean, where, "accept_len_mean")
                                              - lens.mean()) > 1e-6:
        raise ValueError(f"{where}: accept_len_mean {mean} is not the mean of its {key} "
                         f"({lens.mean():.6g})")
    st["units"].add_lengths(lens, where, key)
    ts = rec.get("tree_sizes")
    if not isinstance(ts, list) or len(ts) != lens.size:
        st["sizes_ok"] = False
    else:
        st["sizes"].append(np.array([_count(x, where, "tree_sizes") for x in ts],
                                    dtype=np.int64))
    if "temperature" in rec:
        st["temps"].add(_number(rec["temperature"], where, "temperature"))


def _jetspec_done(st: dict) -> list[AcceptanceLog]:
    path = st["path"]
    if len(st["temps"]) > 1:
        raise ValueError(f"{path}: responses at several temperatures {sorted(st['temps'])}")
    sizes = np.concatenate(st["sizes"]) if st["sizes_ok"] and st["sizes"] else None
    return [st["units"].build("jetspec", path.stem, unit_name="response", width=None,
                              temperature=st["temps"].pop() if st["temps"] else None,
                              budgets=sizes, notes=st["notes"])]


# Spec-Bench --------------------------------------------------------------------
_TEMP_IN_ID = re.compile(r"-temp(?:erature)?-([0-9]+(?:\.[0-9]+)?)")


def _spec_bench_rec(st: dict, rec: dict, where: str) -> None:
    choices = rec.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ValueError(f"{where}: choices is not a non-empty list")
    for i, ch in enumerate(choices):
        if not isinstance(ch, dict) or "accept_lengths" not in ch:
            raise ValueError(f"{where}: choices[{i}] has no accept_lengths")
        lens = _lengths(ch["accept_lengths"], f"{where}: choices[{i}].accept_lengths")
        st["units"].add_lengths(lens, where, f"choices[{i}].accept_lengths")
    mid = rec.get("model_id")
    if mid is not None:
        if st["method"] not in (None, mid):
            raise ValueError(f"{where}: model_id {mid!r:.60} differs from the earlier lines' "
                             f"{st['method']!r:.60} (one run per file)")
        st["method"] = str(mid)
        m = _TEMP_IN_ID.search(str(mid))
        if m:
            st["temps"].add(float(m.group(1)))


def _spec_bench_done(st: dict) -> list[AcceptanceLog]:
    notes = st["notes"] + ["Spec-Bench keeps the tokens each step added (the bonus counted) per "
                           "choice; it does not say the tree the method drafted"]
    t = st["temps"].pop() if len(st["temps"]) == 1 else None
    if t is not None:
        notes.append(f"temperature {t:g} read from the model_id ('-temperature-{t:g}', as "
                     "Spec-Bench's inference scripts name their runs)")
    return [st["units"].build("spec-bench", st["method"] or st["path"].stem,
                              unit_name="response", temperature=t, notes=notes)]


# vLLM per request ----------------------------------------------------------------
def _check_histogram(hist: np.ndarray, steps: int, acc: int, block: dict, where: str, f: str,
                     st: dict) -> None:
    """Refuse an acceptance histogram that disagrees with its block's step and accepted-draft
    counts (SGLang's ``speculative_decoding`` metrics and AIPerf's record share the fields);
    keep ``(accepted, drafted)`` for the acceptance rate."""
    if hist.sum() != steps:
        raise ValueError(f"{where}: {f}acceptance_histogram sums to {hist.sum():g} steps, but "
                         f"num_spec_steps = {steps}")
    accepted = float(np.dot(np.arange(hist.size), hist))
    if accepted != acc:
        raise ValueError(f"{where}: {f}acceptance_histogram accepts {accepted:g} drafts, but "
                         f"num_accepted_draft_tokens = {acc}")
    if "num_draft_tokens" in block:
        drafted = _count(block["num_draft_tokens"], where, f + "num_draft_tokens")
        if acc > drafted:
            raise ValueError(f"{where}: {f}num_accepted_draft_tokens = {acc} is more than "
                             f"num_draft_tokens = {drafted}")
        st["rates"].append((acc, drafted))
    if "draft_acceptance_rate" in block:
        _rate(block["draft_acceptance_rate"], where, f + "draft_acceptance_rate", tol=1e-9)


def _vllm_request_rec(st: dict, rec: dict, where: str) -> None:
    sd = rec["metrics"]["speculative_decoding"] if "metrics" in rec and isinstance(
        rec.get("metrics"), dict) else rec
    if sd is None:
        st["notes"].append(f"{where}: metrics.speculative_decoding is null (n > 1, or no "
                           "speculative decoding): left out")
        return
    if not isinstance(sd, dict):
        raise ValueError(f"{where}: metrics.speculative_decoding is not an object")
    f = "metrics.speculative_decoding."
    for name in ("acceptance_histogram", "num_spec_steps", "num_accepted_draft_tokens"):
        if name not in sd:
            raise ValueError(f"{where}: {f}{name} is missing")
    hist = _counts(sd["acceptance_histogram"], where, f + "acceptance_histogram")
    steps = _count(sd["num_spec_steps"], where, f + "num_spec_steps")
    acc = _count(sd["num_accepted_draft_tokens"], where, f + "num_accepted_draft_tokens")
    k = sd.get("num_spec_tokens")
    if k is not None:
        k = _count(k, where, f + "num_spec_tokens")
        if st["width"] is None:
            st.update(_start(st["path"], st["given"], "num_spec_tokens, from the log", k),
                      notes=st["notes"], width=k)
        elif st["width"] != k:
            raise ValueError(f"{where}: {f}num_spec_tokens = {k}, where earlier requests have "
                             f"{st['width']}")
        if hist.size > k + 1:
            raise ValueError(f"{where}: {f}acceptance_histogram has {hist.size} entries, more "
                             f"than num_spec_tokens + 1 = {k + 1}")
    _check_histogram(hist, steps, acc, sd, where, f, st)
    if "mean_acceptance_length" in sd and steps:
        mean = _number(sd["mean_acceptance_length"], where, f + "mean_acceptance_length")
        if abs(mean - (1 + acc / steps)) > 1e-6:
            raise ValueError(f"{where}: {f}mean_acceptance_length = {mean:g} is not 1 + "
                             f"num_accepted_draft_tokens / num_spec_steps = {1 + acc / steps:g}")
    per = sd.get("per_step_accepted")
    if per is not None:
        steps_acc = _counts(per, where, f + "per_step_accepted")
        if steps_acc.size != steps or steps_acc.sum() != acc:
            raise ValueError(f"{where}: {f}per_step_accepted has {steps_acc.size} steps summing "
                             f"to {steps_acc.sum():g}; num_spec_steps = {steps}, "
                             f"num_accepted_draft_tokens = {acc}")
        st["units"].add_lengths(steps_acc.astype(np.int64) + 1, where, f + "per_step_accepted")
    else:
        st["units"].add_hist(_hist_of_accepted(hist), where, f + "acceptance_histogram")


def _vllm_request_done(st: dict) -> list[AcceptanceLog]:
    acc = sum(a for a, _ in st["rates"])
    drafted = sum(d for _, d in st["rates"])
    notes = st["notes"] + ["per request: the histogram of accepted drafts per verification "
                           "step (the whole law of the chain vLLM drafted)"]
    return [st["units"].build("vllm-request", "vllm", unit_name="request", width=st["width"],
                              accept_rate=acc / drafted if drafted else None, notes=notes)]


# SGLang meta_info -----------------------------------------------------------------------
def _sglang_meta_rec(st: dict, rec: dict, where: str) -> None:
    if isinstance(rec.get("meta_info"), dict):
        infos = [("meta_info.", rec["meta_info"])]
    elif isinstance(rec.get("choices"), list):
        infos = [(f"choices[{i}].meta_info.", c.get("meta_info"))
                 for i, c in enumerate(rec["choices"]) if isinstance(c, dict)]
    else:
        infos = [("", rec)]
    for f, mi in infos:
        if not isinstance(mi, dict):
            raise ValueError(f"{where}: {f.rstrip('.')} is not an object")
        _sglang_unit(st, where, f, mi.get("spec_accept_histogram"), mi.get("spec_verify_ct"),
                     mi.get("spec_accept_length"), mi.get("spec_accept_rate"),
                     mi.get("completion_tokens"), "spec_accept_histogram", None,
                     mi.get("spec_draft_token_num"), "spec_draft_token_num")


def _sglang_openai_rec(st: dict, rec: dict, where: str) -> None:
    d = _dig(rec, "sglext", "spec_tokens_details") if "sglext" in rec else rec
    f = "sglext.spec_tokens_details." if "sglext" in rec else ""
    if d is None:
        st["notes"].append(f"{where}: sglext.spec_tokens_details is missing (the request did "
                           "not ask for return_spec_tokens_details): left out")
        return
    if not isinstance(d, dict):
        raise ValueError(f"{where}: sglext.spec_tokens_details is not an object")
    _sglang_unit(st, where, f, d.get("spec_correct_drafts_histogram"), d.get("spec_verify_ct"),
                 d.get("spec_accept_length"), d.get("spec_accept_rate"), None,
                 "spec_correct_drafts_histogram", d.get("spec_num_correct_drafts"),
                 d.get("spec_num_proposed_drafts"), "spec_num_proposed_drafts")


def _sglang_unit(st: dict, where: str, f: str, hist, verify, length, rate, completion,
                 hist_name: str, correct, proposed, proposed_name: str) -> None:
    if hist is None and verify is None:
        raise ValueError(f"{where}: {f}spec_verify_ct and {f}{hist_name} are missing (no "
                         "speculative decoding in this response?)")
    if verify is not None:
        verify = _count(verify, where, f + "spec_verify_ct")
    if rate is not None:
        st["rates"].append(_rate(rate, where, f + "spec_accept_rate", tol=1e-9))
    if proposed is not None:
        proposed = _count(proposed, where, f + proposed_name)
        if verify:
            # SGLang proposes num_draft_tokens - 1 drafts per verification step
            w = proposed / verify
            if w != math.floor(w) or w < 1:
                raise ValueError(f"{where}: {f}{proposed_name} = {proposed} is not a whole "
                                 f"number of drafts per step (spec_verify_ct = {verify})")
            st.setdefault("widths", {})[int(w)] = where
    if correct is not None:
        correct = _count(correct, where, f + "spec_num_correct_drafts")
        if proposed is not None and correct > proposed:
            raise ValueError(f"{where}: {f}spec_num_correct_drafts = {correct} is more than "
                             f"{proposed_name} = {proposed}")
    if length is not None:
        length = _number(length, where, f + "spec_accept_length")
    if hist is not None and (not isinstance(hist, list) or hist):
        h = _counts(hist, where, f + hist_name)
        if verify is not None and h.sum() != verify:
            raise ValueError(f"{where}: {f}{hist_name} sums to {h.sum():g} steps, but "
                             f"spec_verify_ct = {verify}")
        if correct is not None and np.dot(np.arange(h.size), h) != correct:
            raise ValueError(f"{where}: {f}{hist_name} accepts {np.dot(np.arange(h.size), h):g} "
                             f"drafts, but spec_num_correct_drafts = {correct}")
        if length is not None and length > st["units"].width + 1 + 1e-9:
            raise ValueError(f"{where}: {f}spec_accept_length = {length:g} tokens per round, "
                             f"more than L + 1 = {st['units'].width + 1} ({st['units'].why})")
        st["units"].add_hist(_hist_of_accepted(h), where, f + hist_name)
        return
    if length is None and completion is not None and verify:
        length = _count(completion, where, f + "completion_tokens") / verify
    if length is None:
        raise ValueError(f"{where}: {f}spec_accept_length is missing (and no histogram)")
    st["units"].add_mean(length, float(verify) if verify else None, where,
                         f + "spec_accept_length")


def _sglang_done(source: str) -> Any:
    def done(st: dict) -> list[AcceptanceLog]:
        widths = st.get("widths", {})
        width = st["given"]
        notes = list(st["notes"])
        if len(widths) > 1:
            a, b = sorted(widths)[:2]
            raise ValueError(f"{widths[b]}: {b} drafts per verification step, where "
                             f"{widths[a]} has {a} (num_draft_tokens changed within the log)")
        if widths:
            w = next(iter(widths))
            if width is not None and width != w:
                raise ValueError(f"width: the log proposes {w} drafts per step (its proposed "
                                 f"drafts over spec_verify_ct); got --width {width}")
            units = st["units"]
            for h in units.hists:
                if h is not None and np.flatnonzero(h > 0).max(initial=0) > w:
                    raise ValueError(f"{widths[w]}: a step accepted "
                                     f"{np.flatnonzero(h > 0).max()} drafts, more than the {w} "
                                     "proposed per step")
            width = w
            notes.append(f"{w} drafts per step: the proposed drafts over spec_verify_ct "
                         "(SGLang's num_draft_tokens - 1: a chain's length, or a tree's size)")
        notes += [
            "SGLang does not log whether it drafted a chain (--speculative-eagle-topk 1) or a "
            "tree: modelled as a chain" + ("" if widths else " of the width given (--width; "
                                            f"default {DEFAULT_WIDTH})")
            + " unless --drafted says otherwise",
            "SGLang's accept rate divides accepted drafts by a configured width "
            "(num_draft_tokens - 1): not a per-node rate; kept as logged"]
        rates = st["rates"]
        return [st["units"].build(source, "sglang", unit_name="request", width=width,
                                  accept_rate=float(np.mean(rates)) if rates else None,
                                  notes=notes)]
    return done


# AIPerf -------------------------------------------------------------------------------
def _aiperf_rec(st: dict, rec: dict, where: str) -> None:
    sa = rec.get("spec_decode_acceptance")
    f = "spec_decode_acceptance."
    if sa is None:
        st["notes"].append(f"{where}: no spec_decode_acceptance: left out")
        return
    if not isinstance(sa, dict):
        raise ValueError(f"{where}: spec_decode_acceptance is not an object")
    k = sa.get("num_spec_tokens")
    if k is not None:
        k = _count(k, where, f + "num_spec_tokens")
        if st["width"] is None:
            st.update(_start(st["path"], st["given"], "num_spec_tokens, from the log", k),
                      notes=st["notes"], width=k, method=st["method"])
        elif st["width"] != k:
            raise ValueError(f"{where}: {f}num_spec_tokens = {k}, where earlier records have "
                             f"{st['width']}")
    for name in ("acceptance_histogram", "num_spec_steps", "num_accepted_draft_tokens"):
        if name not in sa:
            raise ValueError(f"{where}: {f}{name} is missing")
    hist = _sparse_counts(sa["acceptance_histogram"], where, f + "acceptance_histogram",
                          st["units"].width)
    steps = _count(sa["num_spec_steps"], where, f + "num_spec_steps")
    acc = _count(sa["num_accepted_draft_tokens"], where, f + "num_accepted_draft_tokens")
    _check_histogram(hist, steps, acc, sa, where, f, st)
    engine = sa.get("engine")
    if isinstance(engine, str):
        st["method"] = f"aiperf:{engine}"
    st["units"].add_hist(_hist_of_accepted(hist), where, f + "acceptance_histogram")


def _aiperf_done(st: dict) -> list[AcceptanceLog]:
    acc = sum(a for a, _ in st["rates"])
    drafted = sum(d for _, d in st["rates"])
    return [st["units"].build("aiperf", st["method"] or "aiperf", unit_name="request",
                              width=st["width"], notes=st["notes"],
                              accept_rate=acc / drafted if drafted else None)]


def _json_start(why: str = "") -> Any:
    return lambda path, width: _start(path, width, why)


#: JSON format -> (start(path, width) -> state, add(state, record, where), done(state)).
_READERS = {
    "jetspec": (_json_start(), _jetspec_rec, _jetspec_done),
    "spec-bench": (_json_start(), _spec_bench_rec, _spec_bench_done),
    "vllm-request": (_json_start(), _vllm_request_rec, _vllm_request_done),
    "sglang-meta": (_json_start(), _sglang_meta_rec, _sglang_done("sglang-meta")),
    "sglang-openai": (_json_start(), _sglang_openai_rec, _sglang_done("sglang-openai")),
    "aiperf": (_json_start(), _aiperf_rec, _aiperf_done),
}


# ----------------------------------------------------------------------------- detection
def _text_kind(path: Path, maybe_json: bool = False) -> str:
    """``vllm-prometheus``, ``vllm-log`` or ``sglang-log`` from the lines of a text file
    (``"json"`` for a file that starts with ``[`` and has none of their lines)."""
    for _, line in read_lines(path):
        s = line.strip()
        if s.startswith(("vllm:spec_decode", "# HELP vllm:", "# TYPE vllm:")):
            return "vllm-prometheus"
        if _VLLM_MARK in line:
            return "vllm-log"
        if _SGLANG_MARK in line and "accept len:" in line:
            return "sglang-log"
    if maybe_json:
        return "json"
    raise ValueError(f"{path}: none of the formats read: not a torch.save file, not JSON, and "
                     f"no '{_VLLM_MARK}', 'vllm:spec_decode_*' or '{_SGLANG_MARK}. ... accept "
                     "len' line (docs/traces.md, 'Public logs')")


def read_logs(path: Path | str, *, width: int | None = None) -> tuple[AcceptanceLog, ...]:
    """Every method's acceptance data in a log (format detected from the content).

    Parameters
    ----------
    path : path
        A log of one of :data:`FORMATS`.
    width : int, optional
        Drafted positions per step ``L`` where the log does not state it (the check
        ``tau <= L + 1``; default :data:`DEFAULT_WIDTH`); refused where the log states another.

    Returns
    -------
    tuple of AcceptanceLog

    Raises
    ------
    ValueError
        Naming the file: missing, not one of the formats, or malformed (which line or record,
        which field).
    """
    path = Path(path)
    try:
        check_file(path, "log file")
    except ValueError:
        raise ValueError(f"log file {path} does not exist") from None
    if width is not None:
        check_param(width, "width", Interval("int", 1, numpy=False))
    try:
        if zipfile.is_zipfile(path):
            logs = _benchmark_logs(load_torch_save(path), path, width)
        else:
            first = _first_line(path)
            kind = "json" if first.startswith("{") else _text_kind(path, first.startswith("["))
            if kind == "json":
                logs = _json_logs(path, width)
            else:
                logs = [{"vllm-prometheus": _prometheus, "vllm-log": _vllm_log,
                         "sglang-log": _sglang_log}[kind](path, width)]
    except (TypeError, KeyError, AttributeError, OverflowError, IndexError) as exc:
        # a field of an unexpected type deep in a well-formed file
        raise ValueError(f"{path}: malformed log ({type(exc).__name__}: {error_text(exc)})"
                         ) from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply") from None
    if not logs:
        raise ValueError(f"{path}: no rounds")
    return tuple(logs)


def read_log(path: Path | str, method: str | None = None, *, width: int | None = None
             ) -> AcceptanceLog:
    """One method of a log: ``method``, or the only one, or the last speculative one (the
    largest DDTree budget, else ``caddtree``, else ``dflash``); ``baseline`` (autoregressive)
    is never the default."""
    logs = {lg.method: lg for lg in read_logs(path, width=width)}
    if method is not None:
        if method not in logs:
            raise ValueError(f"method {method!r} is not in {path}; its methods: "
                             f"{', '.join(logs)}")
        return logs[method]
    spec = [k for k in logs if k != "baseline"] or list(logs)
    trees = sorted((k for k in spec if re.fullmatch(r".*tb(\d+)", k)),
                   key=lambda k: int(re.fullmatch(r".*tb(\d+)", k).group(1)))
    for pick in (trees[-1:] if trees else []) + [k for k in ("caddtree", "dflash") if k in spec]:
        return logs[pick]
    return logs[spec[-1]]
