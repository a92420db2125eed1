r"""Settings back out: what a regime says to configure in the engines.

From a regime (a calibrated one, or one fitted to an engine's log by
``python -m treespec_sim.acceptance fit``), for a drafter kind and a temperature:

* **the best static tree** (:func:`best_static_tree`): the ``B`` rank paths with the largest
  mean acceptance over contexts. A static tree names, for every node, the *rank* of its token
  among the drafter's candidates (rank 0 the drafter's first choice; a block-diffusion drafter
  ranks each depth's marginal, an autoregressive one each node's conditional given its
  parent); every context maps it to tokens. Under rule ``follow`` a round's expected length is
  ``1 + sum_u P(u)`` (the coverage identity, ``docs/theory/exit_law.md``), so a static tree's
  mean over contexts is ``1 + sum_u a(u)`` with ``a(u)`` the mean reach probability of rank
  path ``u``; ``a`` never grows from a parent to a child, and the ``B`` largest (ties to the
  shallower) form a tree: the optimal static tree of ``B`` nodes (``docs/theory/
  static_tree.md``, with the proof; ``tests/sim/test_export.py`` checks it against every
  tree of a small rank-path set);
* **TensorRT-LLM** ``eagle_choices`` (Medusa-style rank paths, ``EagleDecodingConfig``) of that
  tree;
* **SGLang**'s ``--speculative-num-steps``, ``--speculative-eagle-topk`` and
  ``--speculative-num-draft-tokens`` that best approximate a budget (the EAGLE beam SGLang
  builds, ``build_eagle_tree.py``, run in the regime: method ``ar-eagle[SxK]`` for an
  autoregressive drafter, ``eagle[SxK]`` on a block-diffusion drafter's marginals), with the
  ``tau`` each gives;
* **vLLM**'s synthetic acceptance (``rejection_sample_method: "synthetic"``,
  ``synthetic_acceptance_rates``: per position the share of steps that accept at least ``i + 1``
  drafts, non-increasing), so the engine replays the regime's acceptance law;
* **SGLang**'s ``--speculative-ddtree-budget`` (sgl-project/sglang PR #29907): the DDTree budget
  with the most tokens per second under a latency model (the nested DDTree curve,
  :attr:`treespec_sim.engine.Round.tau_curve`).

Schedules per batch size: every exporter is a function of one :class:`ExportRequest` (the
regime, drafter, temperature, budget, latency model, ``batch_size``) returning an
:class:`EngineSetting` (the settings, the text in the engine's syntax, the ``tau`` they give).
:func:`batch_point` is the one for a batch of ``b`` requests of the regime: the chain length
and the DDTree budget with the most tokens per second under the batch's costs
(:func:`treespec_sim.cost.batch_costs`; a batched latency model); :func:`schedule` runs it per
batch size into ``{batch_size: EngineSetting}``, and one function per engine renders that:

* **vLLM** ``num_speculative_tokens_per_batch_size`` (:func:`vllm_schedule`; Dynamic SD,
  vllm-project/vllm PR #32374): inclusive ``"lo-hi"`` batch-size ranges to a chain length, ``0``
  turning speculation off, ``num_speculative_tokens`` the startup maximum;
* **TensorRT-LLM** ``draft_len_schedule`` (:func:`trtllm_schedule`; NVIDIA/TensorRT-LLM PR
  #10860, ``dict[int, int]`` of the speculative config): each key the largest batch size of its
  draft length, speculation off past the largest key;
* the DDTree budget per batch size (:func:`ddtree_schedule`): no engine takes one yet (SGLang's
  ``--speculative-ddtree-budget``, PR #29907, is one value: the row of your batch size).

A batch size between two computed ones takes the value computed at the next larger one in both
engines' schedules (the keys are the computed sizes).

Command line::

    python -m treespec_sim.export REGIME --temperature 0 --drafter autoregressive \
           [--budget 16] [--engine all|trtllm|sglang|vllm|sglang-ddtree] [--cost-model M] [--json]
    python -m treespec_sim.export REGIME --temperature 0 --drafter block-diffusion \
           --batch-sizes 1 4 16 64 [--cost-model h200-qwen3-8b-batch] [--context-length 1024]
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from .cli import (
    OneLineParser,
    add_debug,
    add_json_flag,
    add_seed,
    positive_int,
    run,
    temperature,
)
from .cost import DEFAULT_CONTEXT_LENGTH, batch_costs, get_cost_model, round_time
from .engine import run_round
from .files import atomic_write_text, read_json
from .marginals import ranked_candidates
from .methods import METHODS
from .regime_laws import DRAFTERS, WorldSet, drafter_spec
from .stats import MeanCI, world_ci
from .synth import RegimeSpec, is_regime_file, resolve_regime
from .tree import DraftTree
from .validation import check_budget, check_positive_int, check_temperature, is_int

__all__ = ["ENGINES", "EXPORTERS", "SCHEDULES", "EngineSetting", "ExportRequest", "StaticTree",
           "batch_point", "best_static_tree", "ddtree_schedule", "export", "main", "rank_tree",
           "schedule", "sglang_triples", "trtllm_schedule", "vllm_schedule"]

#: Ranks a static tree may use at each node (its children are the drafter's top ``K``).
MAX_RANK = 16
#: The budgets the DDTree budget for SGLang is chosen from.
DDTREE_BUDGETS = (4, 8, 16, 32, 64, 128, 256, 512, 1024)
#: SGLang EAGLE triples tried: steps up to the drafter's depth, top-k of these.
SGLANG_TOPK = (1, 2, 4, 8)


# ----------------------------------------------------------------------------- the request
@dataclass(frozen=True)
class ExportRequest:
    """What every exporter reads.

    Attributes
    ----------
    regime : RegimeSpec
        The regime (its drafter knobs those of :attr:`drafter`).
    drafter : str
        ``"block-diffusion"`` or ``"autoregressive"``.
    temperature : float
    budget : int
        Tree nodes (root excluded): the static tree's size, SGLang's ``num_draft_tokens - 1``.
    width : int or None
        Drafted positions per step of a chain (vLLM's ``num_speculative_tokens``; default the
        drafter's depth).
    cost : str
        A latency preset or file (:func:`treespec_sim.cost.get_cost_model`).
    contexts, worlds, seed : int
        The regime's contexts (:class:`~treespec_sim.acceptance.WorldSet`).
    max_rank : int
        Candidates per node of the static tree.
    batch_size : int or None
        Requests per verification pass for :func:`batch_point` (``None``: 1).
    context_length : int
        Each request's context length, where :func:`batch_point` prices the batch.
    """

    regime: RegimeSpec
    drafter: str = "block-diffusion"
    temperature: float = 0.0
    budget: int = 16
    width: int | None = None
    cost: str = "h200-qwen3-8b"
    contexts: int = 128
    worlds: int = 4
    seed: int = 0
    max_rank: int = MAX_RANK
    batch_size: int | None = None
    context_length: int = DEFAULT_CONTEXT_LENGTH

    def __post_init__(self) -> None:
        if self.drafter not in DRAFTERS:
            raise ValueError(f"drafter: {self.drafter!r} is not one of {', '.join(DRAFTERS)}")
        check_temperature(self.temperature)
        check_positive_int(self.budget, "budget")
        check_positive_int(self.max_rank, "max_rank")
        if self.width is not None and not 1 <= self.width <= self.regime.depth:
            raise ValueError(f"width must be in [1, L = {self.regime.depth}]; got {self.width}")
        if self.batch_size is not None:
            check_positive_int(self.batch_size, "batch_size")
        check_positive_int(self.context_length, "context_length")

    def worlds_set(self) -> WorldSet:
        return _world_set(self.regime, self.contexts, self.worlds, self.seed)


_SETS: dict[tuple, WorldSet] = {}


def _world_set(spec: RegimeSpec, contexts: int, worlds: int, seed: int) -> WorldSet:
    """One :class:`WorldSet` per regime and setting in a process (every exporter of a request
    runs on the same worlds and contexts)."""
    key = (spec, contexts, worlds, seed)
    if key not in _SETS:
        if len(_SETS) > 4:
            _SETS.clear()
        _SETS[key] = WorldSet(spec, contexts=contexts, worlds=worlds, seed=seed)
    return _SETS[key]


@dataclass(frozen=True)
class EngineSetting:
    """One engine's settings for a regime.

    Attributes
    ----------
    engine : str
        A key of :data:`EXPORTERS`.
    settings : dict
        The values, as the engine's config takes them.
    text : str
        The settings in the engine's documented syntax (a command-line fragment, YAML, JSON).
    tau : MeanCI
        The regime's mean tokens per round with these settings (between-world interval).
    notes : tuple of str
    table : tuple of dict
        What was compared to choose (SGLang's triples, DDTree's budgets), where anything was.
    """

    engine: str
    settings: dict
    text: str
    tau: MeanCI
    notes: tuple[str, ...] = ()
    table: tuple[dict, ...] = ()

    def to_dict(self) -> dict:
        return {"engine": self.engine, "settings": self.settings, "text": self.text,
                "tau": self.tau.to_dict(), "notes": list(self.notes), "table": list(self.table)}


# ----------------------------------------------------------------------------- static tree
@dataclass(frozen=True)
class StaticTree:
    """The best static tree of a regime (:func:`best_static_tree`).

    Attributes
    ----------
    paths : tuple of tuple of int
        Rank paths, parents before children (the pop order: non-increasing acceptance).
    acceptance : ndarray float64 (B,)
        ``a(u)``: each path's mean reach probability over the contexts.
    world_acceptance : ndarray float64 (k, B)
        The same per world.
    drafter : str
    temperature : float
    """

    paths: tuple[tuple[int, ...], ...]
    acceptance: np.ndarray
    world_acceptance: np.ndarray
    drafter: str
    temperature: float

    @property
    def size(self) -> int:
        return len(self.paths)

    @property
    def depth(self) -> int:
        return max((len(p) for p in self.paths), default=0)

    @property
    def tau(self) -> float:
        """``1 + sum_u a(u)``: the tree's exact mean tokens per round on these contexts."""
        return 1.0 + float(self.acceptance.sum())

    def tau_ci(self) -> MeanCI:
        """The between-world interval of :attr:`tau`."""
        return _tau_ci(1.0 + self.world_acceptance.sum(axis=1))

    def eagle_choices(self) -> list[list[int]]:
        """The paths as TensorRT-LLM's ``eagle_choices``: breadth-first (by length, then
        lexicographic), as Medusa-style choice lists are written."""
        return [list(p) for p in sorted(self.paths, key=lambda p: (len(p), p))]


def rank_tree(paths: Sequence[tuple[int, ...]], ranked: Callable[[int, tuple[int, ...]],
                                                                  np.ndarray],
              root_token: int) -> DraftTree:
    """The tree of a context: rank paths (parents before children) mapped to tokens by
    ``ranked(depth, parent_tokens) -> tokens best first`` (the drafter's candidates)."""
    index = {(): 0}
    parent, token = [-1], [root_token]
    tokens_of = {(): ()}
    for p in paths:
        par = p[:-1]
        toks = tokens_of[par]
        cand = ranked(len(p), toks)
        if p[-1] >= cand.size:
            raise ValueError(f"rank path {p}: the drafter has only {cand.size} candidates")
        tok = int(cand[p[-1]])
        index[p] = len(parent)
        parent.append(index[par])
        token.append(tok)
        tokens_of[p] = (*toks, tok)
    return DraftTree.from_parents(np.array(parent, dtype=np.int64),
                                  np.array(token, dtype=np.int64))


def _ranker(world, ctx, drafter: str, k: int) -> Callable[[int, tuple[int, ...]], np.ndarray]:
    """``ranked(depth, parent_tokens)``: the drafter's top ``k`` tokens at ``depth`` (a
    block-diffusion drafter: of the depth's marginal, whatever the parent; an autoregressive
    one: of its conditional given the parent)."""
    cache: dict = {}
    if drafter == "block-diffusion":
        log_q = np.asarray(world.draft(ctx), dtype=np.float64)

        def ranked(depth: int, parents: tuple[int, ...]) -> np.ndarray:
            if depth not in cache:
                cache[depth] = ranked_candidates(log_q[depth - 1], -np.inf, k)[0]
            return cache[depth]
        return ranked

    def ranked_ar(depth: int, parents: tuple[int, ...]) -> np.ndarray:
        parent = parents[-1] if parents else int(ctx.last_token)
        key = (depth, parent)
        if key not in cache:
            row = np.asarray(world.draft_conditional(ctx, depth, parent), dtype=np.float64)
            with np.errstate(divide="ignore"):
                tok, val = ranked_candidates(np.log(row), -np.inf, k)
            cache[key] = tok[np.isfinite(val)]
        return cache[key]
    return ranked_ar


def best_static_tree(req: ExportRequest, budget: int | None = None) -> StaticTree:
    r"""The ``budget`` rank paths of largest mean acceptance: the optimal static tree under
    ``follow`` (module docstring; ``docs/theory/static_tree.md``).

    Best first: a heap of candidate paths keyed by ``(-a(u), depth, ranks)``; each pop emits a
    path and pushes its ``max_rank`` children, whose reach in each context is the parent's
    times the target's probability of the child's token (one target row per context and pop).
    Exact for the contexts of the request's worlds, over rank paths of ranks below
    ``max_rank``.

    Returns
    -------
    StaticTree
    """
    b = check_budget(req.budget if budget is None else budget)
    ws = req.worlds_set()
    t = float(req.temperature)
    k = req.max_rank
    ctxs = [(w, c) for w, cs in zip(ws.ref, ws.contexts, strict=True) for c in cs]
    world_of = np.concatenate([np.full(len(cs), i) for i, cs in enumerate(ws.contexts)])
    rankers = [_ranker(w, c, req.drafter, k) for w, c in ctxs]
    n = len(ctxs)
    depth_max = req.regime.depth
    # node state: per-context token paths and reach probabilities
    heap: list = []
    states: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {
        (): (np.zeros((n, 0), dtype=np.int64), np.ones(n))}

    def push_children(path: tuple[int, ...]) -> None:
        toks, reach = states[path]
        d = len(path) + 1
        if d > depth_max:
            return
        kids = np.full((n, k), -1, dtype=np.int64)
        probs = np.zeros((n, k))
        for i, (w, c) in enumerate(ctxs):
            if reach[i] == 0.0:
                continue
            cand = rankers[i](d, tuple(int(x) for x in toks[i]))[:k]
            row = w.target_row(c, toks[i], t)
            kids[i, : cand.size] = cand
            probs[i, : cand.size] = row[cand]
        for r in range(k):
            child_reach = reach * probs[:, r]
            child = (*path, r)
            states[child] = (np.concatenate([toks, kids[:, r:r + 1]], axis=1), child_reach)
            heapq.heappush(heap, (-float(child_reach.mean()), d, child))

    push_children(())
    paths, acc, per_world = [], [], []
    while heap and len(paths) < b:
        neg, _, path = heapq.heappop(heap)
        paths.append(path)
        reach = states[path][1]
        acc.append(-neg)
        per_world.append([reach[world_of == i].mean() for i in range(len(ws.contexts))])
        push_children(path)
    return StaticTree(tuple(paths), np.array(acc), np.array(per_world).T.reshape(
        len(ws.contexts), len(paths)), req.drafter, t)


# ----------------------------------------------------------------------------- exporters
def _law(req: ExportRequest, method, budget, *, cost=None, nested: bool = False):
    return req.worlds_set().law(method=method, budget=budget, temperature=req.temperature,
                                cost=cost)


def _trtllm(req: ExportRequest) -> EngineSetting:
    tree = best_static_tree(req)
    choices = tree.eagle_choices()
    settings = {"decoding_type": "Eagle", "max_draft_len": tree.depth,
                "eagle_choices": choices}
    text = ("speculative_config:\n  decoding_type: Eagle\n"
            f"  max_draft_len: {tree.depth}\n"
            "  speculative_model_dir: <your EAGLE drafter>\n"
            f"  eagle_choices: {json.dumps(choices)}\n")
    notes = ["TensorRT-LLM's EagleDecodingConfig: a static tree of rank paths (each path a "
             "list of the drafter's top-k ranks from the root); for "
             "trtllm-serve --extra_llm_api_options FILE.yaml"]
    if req.drafter == "block-diffusion":
        notes.append("ranks are of a block-diffusion drafter's per-depth marginals; an EAGLE "
                     "drafter ranks each node's conditional (export with --drafter "
                     "autoregressive for a regime fitted to an EAGLE log)")
    return EngineSetting("trtllm", settings, text, tree.tau_ci(), tuple(notes))


def sglang_triples(budget: int, depth: int) -> list[tuple[int, int, int]]:
    """SGLang's ``(steps, topk, num_draft_tokens)`` that verify ``budget + 1`` tokens: steps up
    to the drafter's ``depth``, top-k in :data:`SGLANG_TOPK`, the beam able to generate the
    budget (``topk + (steps - 1) topk^2 >= budget``; ``topk = 1``: a chain, ``steps =
    budget``)."""
    out = []
    for k in SGLANG_TOPK:
        for s in range(1, depth + 1):
            if k == 1 and s != budget:
                continue
            if k + (s - 1) * k * k >= budget and (k > 1 or s == budget):
                out.append((s, k, budget + 1))
    return out


def _tau_ci(world_means: np.ndarray) -> MeanCI:
    """Tokens per round over worlds (:func:`~treespec_sim.stats.world_ci`), the lower bound at
    least 1: a round commits its bonus token, and a few worlds' t-interval can reach below."""
    ci = world_ci(world_means)
    return MeanCI(ci.mean, max(ci.low, 1.0), ci.high) if ci.has_interval else ci


def _sglang(req: ExportRequest) -> EngineSetting:
    name = "ar-eagle" if req.drafter == "autoregressive" else "eagle"
    rows = []
    for s, k, n in sglang_triples(req.budget, req.regime.depth):
        d = _law(req, f"{name}[{s}x{k}]", n - 1)
        ci = _tau_ci(d.world_means())
        rows.append({"steps": s, "topk": k, "num_draft_tokens": n, "tau": ci.mean,
                     "tau_low": ci.low, "tau_high": ci.high})
    if not rows:
        raise ValueError(f"no SGLang triple verifies {req.budget + 1} tokens within the "
                         f"drafter's {req.regime.depth} steps")
    best = max(rows, key=lambda r: r["tau"])
    settings = {"speculative-num-steps": best["steps"], "speculative-eagle-topk": best["topk"],
                "speculative-num-draft-tokens": best["num_draft_tokens"]}
    text = " ".join(f"--{k} {v}" for k, v in settings.items())
    notes = [f"of {len(rows)} triples verifying {req.budget + 1} tokens (root included), the "
             "one with the largest tau; SGLang's beam (build_eagle_tree.py) run in the regime"]
    if req.drafter == "block-diffusion":
        notes.append("on a block-diffusion drafter's marginals; SGLang builds this beam for "
                     "EAGLE drafters (for DFlash see sglang-ddtree)")
    return EngineSetting("sglang", settings, text,
                         MeanCI(best["tau"], best["tau_low"], best["tau_high"]), tuple(notes),
                         tuple(rows))


def _vllm(req: ExportRequest) -> EngineSetting:
    k = req.width or req.regime.depth
    run_method = "ar-chain" if req.drafter == "autoregressive" else "chain"
    d = _law(req, run_method, k)
    probs = np.asarray(d.probs)
    tail = np.cumsum(probs[::-1])[::-1]  # P(tau >= j)
    rates = [round(float(tail[i + 1]), 4) if i + 1 < tail.size else 0.0 for i in range(k)]
    for a, b in pairwise(range(k)):  # rounding must not make them rise
        rates[b] = min(rates[b], rates[a])
    settings = {"num_speculative_tokens": k, "rejection_sample_method": "synthetic",
                "synthetic_acceptance_rates": rates}
    text = json.dumps({"speculative_config": settings})
    notes = ["vLLM's synthetic rejection sampler accepts position i with these unconditional "
             "rates (the share of steps that accept at least i + 1 drafts; non-increasing): "
             "the engine replays the regime's chain of k drafts (vllm serve ... "
             "--speculative-config '<the speculative_config object>', with your method and "
             "model)"]
    return EngineSetting("vllm", settings, text, _tau_ci(d.world_means()), tuple(notes))


_CURVES: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}


def _tau_curves(req: ExportRequest, method: str, top: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``follow`` tokens per round at every budget ``0..top`` of one deterministic round
    per context (a nested tree, or a chain, read by its prefixes:
    :attr:`~treespec_sim.engine.Round.tau_curve`), and each context's world: float64
    ``(contexts, top + 1)``, int64 ``(contexts,)``. Kept per request in a process (a schedule
    reads them at every batch size)."""
    key = (req.regime, req.temperature, req.contexts, req.worlds, req.seed, method, top)
    if key not in _CURVES:
        if len(_CURVES) > 8:
            _CURVES.clear()
        ws = req.worlds_set()
        curves, world_of = [], []
        for i, (w, cs) in enumerate(zip(ws.ref, ws.contexts, strict=True)):
            for c in cs:
                rnd = run_round(w, c, method=method, budget=top, temperature=req.temperature,
                                rng=np.random.default_rng(0), sample=False,
                                nested=METHODS[method].nested)
                curve = np.asarray(rnd.tau_curve, dtype=np.float64)
                curves.append(np.pad(curve, (0, top + 1 - curve.size), mode="edge"))
                world_of.append(i)
        _CURVES[key] = (np.array(curves), np.array(world_of))
    return _CURVES[key]


def _sglang_ddtree(req: ExportRequest) -> EngineSetting:
    cost = get_cost_model(req.cost)
    method = "ar-ddtree" if req.drafter == "autoregressive" else "ddtree"
    top = max(b for b in DDTREE_BUDGETS if b <= 1024)
    curves, world_of = _tau_curves(req, method, top)
    rows = []
    for b in DDTREE_BUDGETS:
        seconds = float(round_time(cost, b))
        per_world = np.array([curves[world_of == i, b].mean() for i in np.unique(world_of)])
        ci = _tau_ci(per_world)
        rows.append({"budget": b, "tau": ci.mean, "tau_low": ci.low, "tau_high": ci.high,
                     "round_s": seconds, "tokens_per_s": ci.mean / seconds})
    best = max(rows, key=lambda r: r["tokens_per_s"])
    settings = {"speculative-ddtree-budget": best["budget"]}
    text = f"--speculative-ddtree-budget {best['budget']}"
    notes = [f"the budget of {', '.join(str(b) for b in DDTREE_BUDGETS)} with the most tokens "
             f"per second under {req.cost} (tau from one nested DDTree round per context, "
             "exact for every budget); SGLang's DDTree is an open PR (sgl-project/sglang "
             "#29907)"]
    if req.drafter == "autoregressive":
        notes.append("an autoregressive drafter: DDTree's best-first rule on its conditional "
                     "path scores (ar-ddtree)")
    return EngineSetting("sglang-ddtree", settings, text,
                         MeanCI(best["tau"], best["tau_low"], best["tau_high"]), tuple(notes),
                         tuple(rows))


# ------------------------------------------------------------------- schedules per batch size
def _world_rates(curves: np.ndarray, world_of: np.ndarray, b: int, seconds: np.ndarray
                 ) -> np.ndarray:
    """Tokens per second of a batch of ``b`` requests per world (rows) and budget (columns):
    ``b`` times the world's mean tokens per round over the round's seconds."""
    means = np.array([curves[world_of == i].mean(axis=0) for i in np.unique(world_of)])
    return b * means / seconds[None, :]


def batch_point(req: ExportRequest) -> EngineSetting:
    """The chain length and the DDTree budget with the most tokens per second for a batch of
    ``req.batch_size`` requests of the regime, each at ``req.context_length``.

    A chain of ``K`` drafts (``K = 0``: no speculation, one token per request from a pass over
    the ``b`` roots, no drafter) and a DDTree of ``B`` nodes per request are priced by the
    batch's costs (:func:`treespec_sim.cost.batch_costs`: the drafter's forward plus a pass over
    ``b (K + 1)`` or ``b (B + 1)`` query tokens); their tokens per round are the regime's exact
    ``follow`` curves (every chain length and every budget from one round per context), every
    request of the batch from the regime (a homogeneous batch). ``tau`` of the returned
    setting is the chosen chain's, with its between-world interval; ``settings`` also holds the
    rates (tokens per second of the batch) with theirs.

    Raises
    ------
    ValueError
        A latency model without a batch axis for ``batch_size > 1``.
    """
    b = req.batch_size or 1
    model = get_cost_model(req.cost)
    draft, verify = batch_costs(model, [req.context_length] * b)
    auto = req.drafter == "autoregressive"
    L = req.regime.depth
    chain_curves, world_of = _tau_curves(req, "ar-chain" if auto else "chain", L)
    top = max(DDTREE_BUDGETS)
    tree_curves, tree_world = _tau_curves(req, "ar-ddtree" if auto else "ddtree", top)
    plain_s = float(np.asarray(verify(b)))
    ks = np.arange(L + 1)
    chain_s = np.asarray(verify(b * (ks + 1)), dtype=np.float64) + draft
    chain_s[0] = plain_s  # K = 0: no drafter runs
    chain_rates = _world_rates(chain_curves, world_of, b, chain_s)
    chain_rates[:, 0] = b / plain_s
    budgets = np.arange(1, top + 1)
    tree_s = np.asarray(verify(b * (budgets + 1)), dtype=np.float64) + draft
    tree_rates = _world_rates(tree_curves[:, 1:], tree_world, b, tree_s)
    k = int(np.argmax(chain_rates.mean(axis=0)))
    j = int(np.argmax(tree_rates.mean(axis=0)))
    chain_ci, tree_ci = world_ci(chain_rates[:, k]), world_ci(tree_rates[:, j])
    tau = _tau_ci(np.array([chain_curves[world_of == i, k].mean()
                            for i in np.unique(world_of)]))
    settings = {"batch_size": b, "chain_length": k, "ddtree_budget": int(budgets[j]),
                "context_length": req.context_length, "cost_model": str(req.cost),
                "chain_tokens_per_s": chain_ci.to_dict(), "ddtree_tokens_per_s": tree_ci.to_dict(),
                "plain_tokens_per_s": b / plain_s}
    table = ([{"batch_size": b, "drafts": "chain", "size": int(x),
               "tokens_per_s": float(chain_rates[:, x].mean())} for x in ks]
             + [{"batch_size": b, "drafts": "ddtree", "size": int(B),
                 "tokens_per_s": float(tree_rates[:, B - 1].mean())}
                for B in DDTREE_BUDGETS if B <= top])
    text = (f"batch {b}: chain length {k} ({chain_ci.text(0)} tokens/s), DDTree budget "
            f"{int(budgets[j])} ({tree_ci.text(0)} tokens/s), no speculation "
            f"{b / plain_s:.0f} tokens/s")
    notes = (f"a batch of {b} requests of {req.regime.name} at context {req.context_length}, "
             f"priced by {req.cost}; tokens/s of the whole batch (per request: divide by {b}); "
             "intervals between worlds",)
    return EngineSetting("batch", settings, text, tau, notes, tuple(table))


#: Batch sizes :func:`schedule` is computed at when none are given.
SCHEDULE_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)


def schedule(req: ExportRequest, batch_sizes=SCHEDULE_BATCH_SIZES) -> dict[int, EngineSetting]:
    """:func:`batch_point` at each batch size (strictly increasing positive integers)."""
    sizes = [check_positive_int(b, "batch_sizes[]") for b in batch_sizes]
    if not sizes or any(b2 <= b1 for b1, b2 in pairwise(sizes)):
        raise ValueError(f"batch_sizes must be strictly increasing positive integers; got "
                         f"{list(batch_sizes)}")
    return {b: batch_point(replace(req, batch_size=b)) for b in sizes}


def _schedule_table(points: dict[int, EngineSetting]) -> tuple[dict, ...]:
    return tuple({k: p.settings[k] for k in ("batch_size", "chain_length", "ddtree_budget")}
                 | {"chain_tokens_per_s": p.settings["chain_tokens_per_s"]["mean"],
                    "ddtree_tokens_per_s": p.settings["ddtree_tokens_per_s"]["mean"],
                    "plain_tokens_per_s": p.settings["plain_tokens_per_s"]}
                 for _, p in sorted(points.items()))


def _last_key(points: dict[int, EngineSetting], max_batch_size: int | None) -> int:
    last = max(points)
    if max_batch_size is None:
        return last
    return max(last, check_positive_int(max_batch_size, "max_batch_size"))


def vllm_schedule(points: dict[int, EngineSetting], *, max_batch_size: int | None = None
                  ) -> EngineSetting:
    """vLLM's ``num_speculative_tokens_per_batch_size`` from :func:`schedule`'s points.

    Keys are inclusive ``"lo-hi"`` ranges: the value computed at batch size ``b_j`` covers
    ``b_{j-1} + 1 .. b_j`` (the last range reaches ``max_batch_size``);
    ``num_speculative_tokens`` is the largest chain length (the engine's startup maximum).
    """
    sizes = sorted(points)
    last = _last_key(points, max_batch_size)
    per_size, lo = {}, 1
    for b in sizes:
        hi = last if b == sizes[-1] else b
        per_size[f"{lo}-{hi}"] = int(points[b].settings["chain_length"])
        lo = b + 1
    top = max(1, *per_size.values())
    settings = {"num_speculative_tokens": top, "num_speculative_tokens_per_batch_size": per_size}
    text = json.dumps({"speculative_config": settings})
    notes = ("vLLM Dynamic SD (vllm-project/vllm PR #32374): inclusive batch-size ranges to the "
             "chain length scheduled at that batch size, 0 turning speculation off; "
             "num_speculative_tokens is the startup maximum (add your method and model to the "
             "speculative_config)",)
    return EngineSetting("vllm-schedule", settings, text, points[sizes[0]].tau, notes,
                         _schedule_table(points))


def trtllm_schedule(points: dict[int, EngineSetting], *, max_batch_size: int | None = None
                    ) -> EngineSetting:
    """TensorRT-LLM's ``draft_len_schedule`` from :func:`schedule`'s points.

    Each key is the largest batch size of its draft length (the value computed there covers
    the sizes above the previous key); past the largest key TensorRT-LLM turns speculation
    off, so the last key is ``max_batch_size`` (default the largest computed size).
    """
    sizes = sorted(points)
    last = _last_key(points, max_batch_size)
    per_size = {(last if b == sizes[-1] else b): int(points[b].settings["chain_length"])
                for b in sizes}
    top = max(1, *per_size.values())
    settings = {"max_draft_len": top, "draft_len_schedule": per_size}
    text = ("speculative_config:\n"
            f"  max_draft_len: {top}\n"
            "  draft_len_schedule:\n"
            + "".join(f"    {b}: {k}\n" for b, k in per_size.items()))
    notes = ("TensorRT-LLM draft_len_schedule (NVIDIA/TensorRT-LLM PR #10860): batch size -> "
             "draft length, each key the largest batch size of its value; past the largest key "
             "speculation is off (for trtllm-serve --extra_llm_api_options FILE.yaml, with your "
             "decoding_type and drafter)",)
    return EngineSetting("trtllm-schedule", settings, text, points[sizes[0]].tau, notes,
                         _schedule_table(points))


def ddtree_schedule(points: dict[int, EngineSetting]) -> EngineSetting:
    """The DDTree budget per batch size from :func:`schedule`'s points (no engine takes a
    schedule of it yet: one value, the row of the batch size served)."""
    per_size = {b: int(p.settings["ddtree_budget"]) for b, p in sorted(points.items())}
    settings = {"ddtree_budget_per_batch_size": per_size}
    notes = ("no engine takes a per-batch-size DDTree budget; SGLang's --speculative-ddtree-"
             "budget (sgl-project/sglang PR #29907) is one value: use the row of the batch "
             "size you serve",)
    return EngineSetting("ddtree-schedule", settings, json.dumps(settings),
                         points[min(points)].tau, notes, _schedule_table(points))


#: Schedule renderers: name -> ``(points, max_batch_size) -> EngineSetting``.
SCHEDULES: dict[str, Callable[..., EngineSetting]] = {
    "vllm-schedule": vllm_schedule, "trtllm-schedule": trtllm_schedule,
    "ddtree-schedule": lambda points, max_batch_size=None: ddtree_schedule(points)}


#: Engine -> exporter ``(ExportRequest) -> EngineSetting``.
EXPORTERS: dict[str, Callable[[ExportRequest], EngineSetting]] = {
    "trtllm": _trtllm, "sglang": _sglang, "vllm": _vllm, "sglang-ddtree": _sglang_ddtree}
#: The engines, in output order.
ENGINES = tuple(EXPORTERS)


def export(req: ExportRequest, engines: Sequence[str] = ENGINES) -> list[EngineSetting]:
    """Each engine's settings for ``req`` (:data:`EXPORTERS`)."""
    for e in engines:
        if e not in EXPORTERS:
            raise ValueError(f"engine: {e!r} is not one of {', '.join(EXPORTERS)}")
    return [EXPORTERS[e](req) for e in engines]


# ----------------------------------------------------------------------------- CLI
def _regime_fit(name: str) -> dict:
    """What a fitted regime's file records of its log (``{}`` for a name)."""
    if not is_regime_file(name):
        return {}
    data = read_json(name, "regime file")
    entries = data.get("regimes") if isinstance(data, dict) else None
    if isinstance(entries, dict) and len(entries) == 1:
        fit = next(iter(entries.values())).get("fit")
        if isinstance(fit, dict):
            return fit
    return {}


def _regime_drafter(fit: dict) -> str | None:
    """The drafter kind a fitted regime's file records."""
    return str(fit["drafter"]) if fit.get("drafter") in DRAFTERS else None


def _regime_width(fit: dict) -> int | None:
    """The chain length of the log a regime was fitted to (vLLM's ``num_speculative_tokens``
    there), where it records a chain of a stated length."""
    k = fit.get("budget")
    if fit.get("method") in ("chain", "ar-chain") and is_int(k, numpy=False) and k >= 1:
        return k
    return None


def build_parser() -> OneLineParser:
    """The parser of ``python -m treespec_sim.export``."""
    ap = OneLineParser(prog="python -m treespec_sim.export",
                       description="A regime's settings for the engines: TensorRT-LLM "
                                   "eagle_choices (the best static tree), SGLang's EAGLE triple "
                                   "and DDTree budget, vLLM's synthetic acceptance rates "
                                   "(docs/engine_logs.md).")
    ap.add_argument("regime", help="a regime name or a fitted regime's .json file")
    ap.add_argument("--temperature", type=temperature, required=True, metavar="T",
                    help="the decode's temperature (required)")
    ap.add_argument("--drafter", choices=list(DRAFTERS), default=None,
                    help="the drafter's kind (default: the fitted file's, else required)")
    ap.add_argument("--budget", type=positive_int, default=16,
                    help="tree nodes, root excluded: the static tree's size and SGLang's "
                         "num_draft_tokens - 1 (default: %(default)s)")
    ap.add_argument("--width", type=positive_int, default=None, metavar="K",
                    help="vLLM's num_speculative_tokens (default: the chain length of the "
                         "log a fitted regime's file was fitted to, else the drafter's depth)")
    ap.add_argument("--engine", nargs="+", choices=(*ENGINES, "all"), default=["all"],
                    help="which engines (default: all)")
    ap.add_argument("--cost-model", default=None, metavar="M",
                    help="latency preset or file for the DDTree budget and the schedules "
                         "(default: h200-qwen3-8b; h200-qwen3-8b-batch with --batch-sizes)")
    ap.add_argument("--batch-sizes", type=positive_int, nargs="+", metavar="B", default=None,
                    help="instead of one request's settings, the schedules per batch size: "
                         "vLLM's num_speculative_tokens_per_batch_size, TensorRT-LLM's "
                         "draft_len_schedule and the DDTree budget, at these increasing batch "
                         "sizes (a batched --cost-model; default: none)")
    ap.add_argument("--max-batch-size", type=positive_int, default=None, metavar="N",
                    help="with --batch-sizes: the last schedule key's batch size (TensorRT-LLM "
                         "turns speculation off past it; default: the largest --batch-sizes)")
    ap.add_argument("--context-length", type=positive_int, default=DEFAULT_CONTEXT_LENGTH,
                    metavar="L", help="with --batch-sizes: each request's context length "
                                      "(default: %(default)s)")
    ap.add_argument("--contexts", type=positive_int, default=128,
                    help="contexts (default: %(default)s)")
    ap.add_argument("--worlds", type=positive_int, default=4,
                    help="worlds (default: %(default)s)")
    ap.add_argument("--max-rank", type=positive_int, default=MAX_RANK, metavar="K",
                    help="candidates per node of the static tree (default: %(default)s)")
    add_seed(ap, "world and context seed (default 0)")
    add_json_flag(ap, "print the settings as JSON only (default: text)")
    ap.add_argument("--out", type=Path, default=None,
                    help="write export.json there too (default: none)")
    add_debug(ap)
    return ap


def _body(args: argparse.Namespace) -> int:
    fit = _regime_fit(args.regime)
    drafter = args.drafter or _regime_drafter(fit)
    if drafter is None:
        raise ValueError("--drafter block-diffusion or autoregressive: the regime does not "
                         "record the drafter it models")
    spec = drafter_spec(resolve_regime(args.regime), drafter)
    width = args.width
    if width is None and (_regime_width(fit) or spec.depth + 1) <= spec.depth:
        width = _regime_width(fit)
    cost = args.cost_model or ("h200-qwen3-8b-batch" if args.batch_sizes else "h200-qwen3-8b")
    req = ExportRequest(spec, drafter, args.temperature, args.budget, width,
                        cost, args.contexts, args.worlds, args.seed, args.max_rank,
                        context_length=args.context_length)
    data = {"regime": spec.name, "drafter": drafter, "temperature": args.temperature,
            "budget": args.budget}
    if args.batch_sizes:
        if args.engine != ["all"]:
            raise ValueError("--engine does not apply with --batch-sizes (the schedules are "
                             f"{', '.join(SCHEDULES)})")
        points = schedule(req, args.batch_sizes)
        out = [render(points, max_batch_size=args.max_batch_size)
               for render in SCHEDULES.values()]
        data["points"] = [p.to_dict() for _, p in sorted(points.items())]
        if not args.json:
            print(f"Regime {spec.name} ({drafter} drafter, T = {args.temperature:g}), batches of "
                  f"{', '.join(map(str, sorted(points)))} under {cost}:")
            for _, p in sorted(points.items()):
                print(f"  {p.text}")
    else:
        if args.max_batch_size is not None:
            raise ValueError("--max-batch-size applies with --batch-sizes only")
        engines = ENGINES if "all" in args.engine else tuple(dict.fromkeys(args.engine))
        out = export(req, engines)
    data["settings"] = [s.to_dict() for s in out]
    if args.json:
        print(json.dumps(data, indent=1, default=_json_default))
    else:
        if not args.batch_sizes:
            print(f"Regime {spec.name} ({drafter} drafter, T = {args.temperature:g}), budget "
                  f"{args.budget}:")
        for s in out:
            print(f"\n[{s.engine}] tau {s.tau.text()}")
            print(s.text.rstrip())
            for n in s.notes:
                print(f"  - {n}")
    if args.out is not None:
        atomic_write_text(Path(args.out) / "export.json",
                          json.dumps(data, indent=1, default=_json_default))
    return 0


def _json_default(x: Any):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(type(x).__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m treespec_sim.export REGIME --temperature T ...``."""
    parser = build_parser()
    return run(parser, parser.parse_args(argv), _body)


if __name__ == "__main__":
    sys.exit(main())
