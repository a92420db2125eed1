r"""Decoding with real models: every round runs through :func:`treespec_sim.engine.run_round`.

:func:`decode` prefills the prompt (:func:`real_models.backend.prefill`), wraps the bundle in a
:class:`~real_models.backend.ModelBackend` and decodes with :func:`treespec_sim.engine.decode`:
the drafter's ``log_q``, the method's builder from the one registry
(:data:`treespec_sim.methods.METHODS`), one tree-attention target forward, the verifier and the
commit (KV-cache compaction, drafter context-cache growth) are the engine's round, the same as
on a synthetic world. Method names and their lossless rules are the registry's
(:func:`treespec_sim.methods.resolve_rule`); cost-aware methods (``caddtree``, ``exhaustive``,
``longrun``) read their latency model at each round's context length.

The prompt's last token is the first round's root: the prefill caches ``prompt[:-1]``, so every
emitted token, the first included, comes out of a verifier.

``ar`` is the one method outside the registry: the real-model **autoregressive baseline**, one
plain one-token forward and one exact draw per token, with no tree and no round loop, so that
speedups are measured against a lean baseline. It draws what predraw-and-follow draws on the
root-only tree (argmax at ``T = 0``, :func:`treespec_sim._sampling.sample_categorical` on the
float64 row otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from treespec_sim import DraftTree, engine
from treespec_sim._sampling import sample_categorical
from treespec_sim.cost import PRESETS, PiecewiseLinearCost, get_cost_model
from treespec_sim.methods import Method, get_method, resolve_rule
from treespec_sim.validation import check_temperature

from ._deps import require
from .backend import DecodeState, Drafting, ModelBackend, Prefilled, clock, prefill
from .bundle import Bundle
from .profile import load_profile

torch = require("torch")

__all__ = ["AR", "DecodeResult", "RoundStats", "check_request", "decode", "generate",
           "latency_profile", "resolve_cost", "run_from"]

#: The autoregressive baseline's name (not a registered method: it builds no tree).
AR = "ar"


@dataclass(frozen=True)
class RoundStats:
    """One round: tokens committed, tree size and the time split (seconds).

    ``draft`` is the drafter's block forward plus its context-cache update, ``verify`` the
    target's tree forward; ``build`` (policy + 4-D mask), ``decide`` (rows + verifier) and
    ``commit`` (KV-cache compaction) are the overhead outside the two model forwards.

    Built from the engine's :attr:`treespec_sim.engine.Round.timings` (stages draft, build,
    verify, decide, commit, measured by ``run_round``/``commit`` with the backend's clock),
    with three sub-steps the backend times moved to the stage they belong to: the mask is built
    inside ``target_oracle`` (counted as build), the oracle's set-up after the forward (counted
    as decide), and the drafter's context-cache extension now runs inside the engine's commit
    (it needs the accepted path) but is drafter work, counted as draft, as before.
    """

    tau: int
    tree_size: int
    draft: float
    build: float
    verify: float
    decide: float
    commit: float

    @classmethod
    def of(cls, rnd: engine.Round, split: Mapping[str, float]) -> RoundStats:
        """The statistics of a committed engine round (``split``: :attr:`DecodeState.split`)."""
        t = rnd.timings
        mask, rows, extend = split.get("mask", 0.0), split.get("rows", 0.0), \
            split.get("extend", 0.0)
        return cls(rnd.sampled_tau, rnd.tree_size, t["draft"] + extend, t["build"] + mask,
                   t["verify"] - mask - rows, t["decide"] + rows, t["commit"] - extend)

    @property
    def total(self) -> float:
        return self.draft + self.build + self.verify + self.decide + self.commit

    @property
    def overhead(self) -> float:
        """Seconds outside the two model forwards."""
        return self.build + self.decide + self.commit


@dataclass
class DecodeResult:
    """Generated token ids and per-round statistics."""

    tokens: list[int]
    rounds: list[RoundStats] = field(default_factory=list)
    prefill_s: float = 0.0
    decode_s: float = 0.0
    #: Warnings for the run record (e.g. a latency file measured on another CPU model).
    notes: list[str] = field(default_factory=list)

    @property
    def tau(self) -> float:
        """Mean tokens per round (bonus included)."""
        return float(np.mean([r.tau for r in self.rounds])) if self.rounds else float("nan")

    def tokens_per_second(self) -> float:
        return len(self.tokens) / self.decode_s if self.decode_s > 0 else float("nan")


# ---------------------------------------------------------------------------- requests
def _method(method: str) -> Method | None:
    """The registry entry of ``method`` (None for the ``ar`` baseline)."""
    if method == AR:
        return None
    try:
        return get_method(method)[0]
    except ValueError as exc:
        raise ValueError(f"{exc}; and {AR!r}, the autoregressive baseline") from None


def _rule(spec: Method | None, rule: str | None, temperature: float) -> str:
    if spec is None:
        if rule not in (None, "follow"):
            raise ValueError(f"rule {rule!r} is not lossless for method {AR!r} (one exact draw "
                             "per token); use follow")
        return "follow"
    return resolve_rule(spec, rule, temperature)


def check_request(bundle: Bundle, prompt_ids, max_new_tokens: int, method: str, rule: str | None,
                  temperature: float, budget: int | None) -> tuple[np.ndarray, str]:
    """Validate a generation request before any forward; return (prompt array, rule).

    ``method`` is ``"ar"`` or a name of :data:`treespec_sim.methods.METHODS`; ``rule`` must be
    lossless for it at ``temperature`` (default: the registry's first).
    """
    spec = _method(method)
    t = check_temperature(temperature)
    rule = _rule(spec, rule, t)
    if spec is not None and bundle.drafter is None:
        raise ValueError(f"method {method!r} needs a drafter; the bundle was loaded without one")
    if spec is not None and spec.uses_budget and (
            budget is None or isinstance(budget, bool)
            or not isinstance(budget, int | np.integer) or budget < 1):
        raise ValueError(f"method {method!r} needs a budget >= 1 (tree nodes); got {budget!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int | np.integer) \
            or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1; got {max_new_tokens!r}")
    arr = np.asarray(prompt_ids)
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError(f"prompt_ids must be a 1-D sequence of at least 2 token ids; got shape "
                         f"{arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"prompt_ids must be integers; got dtype {arr.dtype}")
    bad = np.flatnonzero((arr < 0) | (arr >= bundle.vocab_size))
    if bad.size:
        raise ValueError(f"prompt_ids[{bad[0]}] = {arr[bad[0]]} is outside the vocabulary "
                         f"(V = {bundle.vocab_size})")
    need = arr.size + int(max_new_tokens) + bundle.block_size
    limit = bundle.max_positions
    if bundle.drafter is not None:
        limit = min(limit, int(bundle.drafter.config.max_position_embeddings))
    if need > limit:
        raise ValueError(f"prompt too long for the context: {arr.size} prompt tokens + "
                         f"{max_new_tokens} new tokens + a block of {bundle.block_size} need "
                         f"{need} positions, but the context holds {limit}")
    return arr.astype(np.int64), rule


# ---------------------------------------------------------------------------- costs
def latency_profile(bundle: Bundle, max_budget: int, *, repeats: int = 3) -> PiecewiseLinearCost:
    """Measured verification and draft costs for CaDDTree (``PiecewiseLinearCost``).

    Times the target's tree forward at ``n = 1, 2, 4, ...`` query tokens up to
    ``max_budget + 1`` on a short dummy context (median of ``repeats``), made non-decreasing.
    """
    prompt = np.arange(2, 34, dtype=np.int64) % bundle.vocab_size
    pf = prefill(bundle, prompt, with_drafter=True)
    drafting = Drafting(bundle)
    sizes = sorted({1, *[2 ** k for k in range(1, 12) if 2 ** k <= max_budget + 1],
                    max_budget + 1})
    secs = []
    for n in sizes:
        tree = DraftTree.from_parents(np.arange(-1, n - 1), np.full(n, 3))  # a path of n nodes
        ts = []
        for _ in range(repeats):
            bundle.target.restore(pf.target_snapshot)
            t0 = clock(bundle)
            bundle.target.verify_forward(tree)
            ts.append(clock(bundle) - t0)
        secs.append(float(np.median(ts)))
    ds = []
    for _ in range(repeats):
        t0 = clock(bundle)
        drafting.log_q(pf.draft_cache, pf.root, pf.prompt.size - 1)
        ds.append(clock(bundle) - t0)
    secs = np.maximum.accumulate(np.asarray(secs))
    return PiecewiseLinearCost(tuple(float(s) for s in sizes), tuple(float(s) for s in secs),
                               float(np.median(ds)), name="measured",
                               provenance=f"real_models.latency_profile on {bundle.device}",
                               estimate=False)


def resolve_cost(bundle: Bundle, cost, *, on_mismatch: str = "error"):
    """A latency model for ``bundle`` and the run-record warnings: (model, notes).

    ``cost`` may be a latency model, a path to a latency ``.json`` (checked against the
    bundle's device and model shapes by :func:`real_models.profile.load_profile`: a wrong
    schema raises ``ValueError``, another device type or other shapes raise
    :class:`real_models.profile.ProfileMismatch` unless ``on_mismatch="warn"``), or a preset
    name of :data:`treespec_sim.cost.PRESETS` (accepted with a warning: presets describe other
    hardware and models).
    """
    if isinstance(cost, str | Path):
        key = str(cost)
        if key in PRESETS:
            return get_cost_model(key), [f"latency preset {key!r} describes other hardware "
                                         f"and models than {bundle.device} / this bundle"]
        return load_profile(key, bundle, on_mismatch=on_mismatch)
    if not (hasattr(cost, "draft_cost") and hasattr(cost, "verify_cost")):
        raise ValueError(f"cost must be a latency model, a latency .json path or a preset "
                         f"name; got {type(cost).__name__}")
    return cost, []


# ---------------------------------------------------------------------------- decoding
def run_from(bundle: Bundle, pf: Prefilled, n_tokens: int, *, method: str,
             rule: str | None = None, budget: int | None = None, temperature: float = 0.0,
             rng: np.random.Generator, cost=None, options: Mapping | None = None,
             on_round: Callable[[engine.Round, DecodeState], None] | None = None
             ) -> DecodeResult:
    """Decode ``n_tokens`` tokens from a prefilled state (restored, not consumed).

    Every round is :func:`treespec_sim.engine.run_round` on a
    :class:`~real_models.backend.ModelBackend`, committed with
    :func:`treespec_sim.engine.commit` (through :func:`treespec_sim.engine.decode`); ``ar``
    runs the lean autoregressive baseline instead (see the module docstring).

    Parameters
    ----------
    bundle : Bundle
    pf : Prefilled
        From :func:`real_models.backend.prefill` (``with_drafter=True`` for tree methods).
    n_tokens : int
    method, rule, budget, temperature, cost, options
        As :func:`decode` (``cost`` a latency model, already resolved; ``rule`` default the
        registry's first lossless rule).
    rng : numpy.random.Generator
        Drafted tokens of sampled methods, then the verifier's coins.
    on_round : callable, optional
        ``on_round(round, state)`` sees every :class:`treespec_sim.engine.Round` after its
        verification and before its commit; ``state.forward`` holds the verification forward
        (logits, features) and ``state.tokens`` the prompt and the tokens committed so far
        (its last one is the round's root). It must not touch the KV cache; its time is in no
        stage of :class:`RoundStats`.
    """
    if method == AR:
        return _run_ar(bundle, pf, n_tokens, temperature=check_temperature(temperature),
                       rng=rng)
    if not _method(method).needs_cost:
        cost = None  # Round.cost_s is not reported here; only cost-aware builders read it
    backend = ModelBackend(bundle)
    state = backend.start(pf)

    def record(rnd: engine.Round) -> RoundStats:
        return RoundStats.of(rnd, state.split)  # read right after the round's commit

    t0 = clock(bundle)
    res = engine.decode(backend, state, n_tokens=n_tokens, rng=rng, record=record,
                        on_round=on_round, method=method, budget=budget, rule=rule,
                        temperature=temperature, cost=cost, options=options)
    return DecodeResult(res.tokens.tolist(), list(res.records), pf.seconds, clock(bundle) - t0)


@torch.inference_mode()
def _run_ar(bundle: Bundle, pf: Prefilled, n_tokens: int, *, temperature: float,
            rng: np.random.Generator) -> DecodeResult:
    """The autoregressive baseline: one plain one-token forward and one exact draw per token.

    Deliberately outside the round loop: no tree, no verifier, so the baseline carries no tree
    overhead (the draw equals predraw-and-follow's on the root-only tree).
    """
    target = bundle.target
    target.restore(pf.target_snapshot)
    root = pf.root
    out: list[int] = []
    rounds: list[RoundStats] = []
    t_begin = clock(bundle)
    while len(out) < n_tokens:
        t0 = clock(bundle)
        logits = target.step(root)
        t1 = clock(bundle)
        if temperature == 0.0:
            root = int(torch.argmax(logits))
        else:
            row = torch.softmax(logits.to(torch.float64) / temperature, dim=-1).cpu().numpy()
            root = sample_categorical(row, rng)
        t2 = clock(bundle)
        out.append(root)
        rounds.append(RoundStats(1, 0, 0.0, 0.0, t1 - t0, t2 - t1, 0.0))
    return DecodeResult(out, rounds, pf.seconds, clock(bundle) - t_begin)


def decode(bundle: Bundle, prompt_ids, max_new_tokens: int, *, method: str, budget: int | None
           = None, temperature: float = 0.0, seed: int | None = 0, rule: str | None = None,
           rng: np.random.Generator | None = None, cost=None,
           cost_mismatch: str = "error", options: Mapping | None = None) -> DecodeResult:
    """Generate ``max_new_tokens`` tokens after ``prompt_ids``; return tokens and round stats.

    Parameters
    ----------
    bundle : Bundle
        From :func:`real_models.load`.
    prompt_ids : sequence of int
        At least 2 tokens; ``len + max_new_tokens + block_size`` must fit the context.
    max_new_tokens : int
    method : str
        ``"ar"`` (the autoregressive baseline) or any name of
        :data:`treespec_sim.methods.METHODS`: e.g. ``chain`` (DFlash's argmax chain of length
        ``L``), ``ddtree`` (the DDTree of ``budget`` nodes), ``caddtree`` (CaDDTree up to
        ``budget`` with a latency profile measured on this bundle, or ``cost``),
        ``exhaustive`` (the budget maximising the same throughput ratio over every prefix),
        ``sampled-ddtree`` (DDTree's shape with tokens drawn per depth from the drafter's
        marginals tempered to ``temperature``; ``rule`` picks the verifier and the drawing
        scheme), ``tsubame``, ``sampled-tree[WxD]``, ...
    budget : int, optional
        Tree nodes (root excluded; the maximum for cost-aware methods); required for every
        method that reads a budget (every tree method but the chains).
    temperature : float
        ``0`` is greedy (sampled methods then take their top-k tokens, verified with
        ``follow``).
    seed : int, optional
        Seeds ``numpy.random.default_rng`` (ignored when ``rng`` is given).
    rule : str, optional
        Verifier: one of :func:`treespec_sim.methods.lossless_rules` for the method at
        ``temperature`` (default: the first).
    rng : numpy.random.Generator, optional
    cost : latency model, path of a latency ``.json``, or preset name, optional
        For cost-aware methods (default: :func:`latency_profile` of this bundle). A file is
        checked against this bundle (:func:`resolve_cost`); costs are read at each round's
        context length.
    cost_mismatch : {"error", "warn"}
        What a latency file for another device type or other model shapes does: raise
        :class:`real_models.profile.ProfileMismatch`, or run and record the mismatch in
        ``DecodeResult.notes``.
    options : mapping, optional
        Method-specific extras (``{"lam": tokens_per_second}`` for ``longrun``).
    """
    prompt, rule = check_request(bundle, prompt_ids, max_new_tokens, method, rule, temperature,
                                 budget)
    rng = np.random.default_rng(seed) if rng is None else rng
    notes: list[str] = []
    spec = _method(method)
    if spec is not None and spec.needs_cost:
        if cost is None:
            cost = latency_profile(bundle, int(budget))
        else:
            cost, notes = resolve_cost(bundle, cost, on_mismatch=cost_mismatch)
    pf = prefill(bundle, prompt, with_drafter=spec is not None)
    res = run_from(bundle, pf, int(max_new_tokens), method=method, rule=rule,
                   budget=None if budget is None else int(budget),
                   temperature=float(temperature), rng=rng, cost=cost, options=options)
    res.notes.extend(notes)
    return res


def generate(bundle: Bundle, prompt_ids, max_new_tokens: int, *, method: str,
             budget: int | None = None, temperature: float = 0.0, seed: int | None = 0,
             rule: str | None = None) -> list[int]:
    """Token ids of the continuation (see :func:`decode`, which also returns statistics)."""
    return decode(bundle, prompt_ids, max_new_tokens, method=method, budget=budget,
                  temperature=temperature, seed=seed, rule=rule).tokens
