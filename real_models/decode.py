r"""The decoding loop: every method drafts, builds, verifies and commits with ``treespec_sim``.

One round (research note §2.3–2.4):

1. **draft** — the drafter's one forward over ``[b, m × L]`` gives ``log_q`` (L, V) (float32
   log-softmax of the logits, untempered, as DDTree builds its tree);
2. **build** — a ``treespec_sim`` policy turns ``log_q`` into a :class:`~treespec_sim.DraftTree`
   (``chain``, ``ddtree``, ``caddtree``; for sampled trees DDTree's shape filled by
   :func:`treespec_sim.policies.sampled.fill_shape`), plus the 4-D mask;
3. **verify** — one target forward over the root and the nodes gives the rows;
4. **decide** — the logits become float64 target laws at temperature ``T``, computed lazily
   where the verifier reads them (:class:`real_models.target.LogitsOracle`, a
   ``treespec_sim`` target oracle), and :func:`treespec_sim.verify.verify` picks the accepted
   path and the bonus token;
5. **commit** — the target KV cache is compacted to the accepted path, and the drafter's context
   cache grows by the accepted nodes' hidden states.

The prompt's last token is the first round's root: the prefill caches ``prompt[:-1]``, so every
emitted token, the first included, comes out of a verifier. The ``ar`` baseline makes the
draw predraw-and-follow makes on the root-only tree, one plain forward per token, with no tree
machinery (so speedups are measured against a lean baseline).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import numpy as np

from treespec_sim import DraftTree
from treespec_sim._sampling import sample_categorical
from treespec_sim.policies import caddtree, chain, ddtree, exhaustive_budget_tree
from treespec_sim.policies.sampled import fill_shape
from treespec_sim.verify import verify

from ._deps import require
from .bundle import Bundle
from .drafter import DraftCache
from .target import LogitsOracle

torch = require("torch")

__all__ = ["METHODS", "DecodeResult", "RoundStats", "decode", "generate", "method_rules",
           "resolve_cost"]

#: Methods and the verification rules each accepts (the first is the default).
METHODS: dict[str, tuple[str, ...]] = {
    "ar": ("follow",),
    "chain": ("follow", "tev"),
    "ddtree": ("follow", "tev"),
    "caddtree": ("follow", "tev"),
    "exhaustive": ("follow", "tev"),
    "sampled-ddtree": ("rrsw", "rrs", "traversal", "univer"),
}
#: Drafting scheme for each sampled-tree rule (:data:`treespec_sim.policies.sampled`).
SCHEME_FOR_RULE = {"rrs": "iid", "rrsw": "without_replacement",
                   "traversal": "without_replacement", "univer": "without_replacement"}
STAGES = ("draft", "build", "verify", "decide", "commit")


def method_rules(method: str) -> tuple[str, ...]:
    """Rules valid for ``method`` (first = default); unknown methods raise ``ValueError``."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known methods: {', '.join(METHODS)}")
    return METHODS[method]


@dataclass(frozen=True)
class RoundStats:
    """One round: tokens committed, tree size and the time split (seconds).

    ``draft`` covers the drafter forward (and its context-cache update), ``verify`` the target
    forward; ``build`` (policy + mask), ``decide`` (rows + verifier) and ``commit`` (cache
    compaction) are the overhead outside the two model forwards.
    """

    tau: int
    tree_size: int
    draft: float
    build: float
    verify: float
    decide: float
    commit: float

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


@dataclass
class _Prefilled:
    """State right after the prefill (reusable: every run restores from it)."""

    prompt: np.ndarray
    root: int
    target_snapshot: list
    draft_cache: DraftCache | None
    seconds: float


def _sync(bundle: Bundle) -> None:
    if bundle.device.type == "cuda":
        torch.cuda.synchronize()


def _clock(bundle: Bundle) -> float:
    _sync(bundle)
    return time.perf_counter()


def check_request(bundle: Bundle, prompt_ids, max_new_tokens: int, method: str, rule: str | None,
                  temperature: float, budget: int | None) -> tuple[np.ndarray, str]:
    """Validate a generation request before any forward; return (prompt array, rule)."""
    rules = method_rules(method)
    rule = rules[0] if rule is None else rule
    if rule not in rules:
        raise ValueError(f"rule {rule!r} does not apply to method {method!r}; use one of "
                         f"{', '.join(rules)}")
    t = float(temperature)
    if not (np.isfinite(t) and t >= 0):
        raise ValueError(f"temperature must be finite and >= 0; got {temperature!r}")
    if method == "sampled-ddtree" and t == 0:
        raise ValueError("method 'sampled-ddtree' draws tree tokens from the drafter at "
                         "temperature T; it needs T > 0 (use 'ddtree' for T = 0)")
    if method != "ar" and bundle.drafter is None:
        raise ValueError(f"method {method!r} needs a drafter; the bundle was loaded without one")
    if method in ("ddtree", "caddtree", "exhaustive", "sampled-ddtree"):
        if budget is None or isinstance(budget, bool) or not isinstance(budget, int | np.integer) \
                or budget < 1:
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


@torch.inference_mode()
def _prefill(bundle: Bundle, prompt: np.ndarray, with_drafter: bool) -> _Prefilled:
    t0 = _clock(bundle)
    feats = bundle.target.prefill(prompt[:-1], want_features=with_drafter)
    dcache = None
    if with_drafter:
        dcache = DraftCache(len(bundle.drafter.layers))
        pos = torch.arange(prompt.size - 1, device=bundle.device)[None]
        bundle.drafter.extend_cache(dcache, feats, pos)
    snap = bundle.target.snapshot()
    return _Prefilled(prompt, int(prompt[-1]), snap, dcache, _clock(bundle) - t0)


class _Drafting:
    """The drafter side of a round: embedding, block forward, log-probabilities."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self.embed = bundle.target.model.get_input_embeddings()
        self.head = bundle.target.model.get_output_embeddings()
        self.block = torch.full((1, bundle.block_size), bundle.spec.mask_token_id,
                                dtype=torch.long, device=bundle.device)

    @torch.inference_mode()
    def log_q(self, cache: DraftCache, root: int, start: int):
        """(log_q float32 numpy (L, V), logits tensor (L, V))."""
        self.block[0, 0] = root
        emb = self.embed(self.block)
        if self.bundle.spec.input_embedding_scale != 1.0:
            emb = emb * self.bundle.spec.input_embedding_scale
        hidden = self.bundle.drafter.draft(cache, emb, start)
        logits = self.bundle.drafter.logits(hidden, self.head)[0].float()
        return torch.log_softmax(logits, dim=-1).cpu().numpy(), logits


def latency_profile(bundle: Bundle, max_budget: int, *, repeats: int = 3):
    """Measured verification and draft costs for CaDDTree (``PiecewiseLinearCost``).

    Times the target's tree forward at ``n = 1, 2, 4, ...`` query tokens up to
    ``max_budget + 1`` on a short dummy context (median of ``repeats``), made non-decreasing.
    """
    from treespec_sim.cost import PiecewiseLinearCost

    prompt = np.arange(2, 34, dtype=np.int64) % bundle.vocab_size
    pf = _prefill(bundle, prompt, with_drafter=True)
    drafting = _Drafting(bundle)
    sizes = sorted({1, *[2 ** k for k in range(1, 12) if 2 ** k <= max_budget + 1],
                    max_budget + 1})
    secs = []
    for n in sizes:
        tree = DraftTree.from_parents(np.arange(-1, n - 1), np.full(n, 3))  # a path of n nodes
        ts = []
        for _ in range(repeats):
            bundle.target.restore(pf.target_snapshot)
            t0 = _clock(bundle)
            bundle.target.verify_forward(tree)
            ts.append(_clock(bundle) - t0)
        secs.append(float(np.median(ts)))
    ds = []
    for _ in range(repeats):
        t0 = _clock(bundle)
        drafting.log_q(pf.draft_cache, pf.root, pf.prompt.size - 1)
        ds.append(_clock(bundle) - t0)
    secs = np.maximum.accumulate(np.asarray(secs))
    return PiecewiseLinearCost(tuple(float(s) for s in sizes), tuple(float(s) for s in secs),
                               float(np.median(ds)), name="measured",
                               provenance=f"real_models.latency_profile on {bundle.device}",
                               estimate=False)


def _costs_at(cost, context_length: int):
    """(draft seconds, ``n -> verify seconds``) of a latency model at ``context_length``.

    Models with a context axis (``TabulatedCost``) are read at the round's cache length;
    others ignore it.
    """
    ell = max(int(context_length), 1)
    return (float(cost.draft_cost(ell)),
            lambda n: cost.verify_cost(n, ell))


def resolve_cost(bundle: Bundle, cost, *, on_mismatch: str = "error"):
    """A latency model for ``bundle`` and the run-record warnings: (model, notes).

    ``cost`` may be a latency model, a path to a latency ``.json`` (checked against the
    bundle's device and model shapes by :func:`real_models.profile.load_profile`: a wrong
    schema raises ``ValueError``, another device type or other shapes raise
    :class:`real_models.profile.ProfileMismatch` unless ``on_mismatch="warn"``), or a preset
    name of :data:`treespec_sim.cost.PRESETS` (accepted with a warning: presets describe other
    hardware and models).
    """
    from pathlib import Path

    from treespec_sim.cost import PRESETS, get_cost_model

    from .profile import load_profile

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


@torch.inference_mode()
def _run(bundle: Bundle, pf: _Prefilled, n_tokens: int, *, method: str, rule: str,
         budget: int | None, temperature: float, rng: np.random.Generator,
         cost=None, on_round=None, on_draft=None) -> DecodeResult:
    """Decode ``n_tokens`` tokens from a prefilled state (restored, not consumed).

    ``on_round(tree, forward, context)``, if given, is called after each verification forward
    with the committed tokens so far (prompt included); it must not touch the KV cache.
    ``on_draft(log_q)``, if given, receives each round's drafter log-probabilities (L, V).
    """
    if method == "ar":
        return _run_ar(bundle, pf, n_tokens, temperature=temperature, rng=rng)
    target = bundle.target
    target.restore(pf.target_snapshot)
    dcache = copy.copy(pf.draft_cache)
    if dcache is not None:
        dcache.keys, dcache.values = list(dcache.keys), list(dcache.values)
    drafting = _Drafting(bundle)
    L = bundle.depth
    root = pf.root
    out: list[int] = []
    rounds: list[RoundStats] = []
    t_begin = _clock(bundle)
    while len(out) < n_tokens:
        start = target.length
        t0 = _clock(bundle)
        proposal = None
        log_q, dlogits = drafting.log_q(dcache, root, start)
        if on_draft is not None:
            on_draft(log_q)
        t1 = _clock(bundle)
        if method == "chain":
            tree = chain(log_q, L, root_token=root)
        elif method == "ddtree":
            tree = ddtree(log_q, budget, root_token=root)
        elif method == "caddtree":
            cd, cv = _costs_at(cost, start)
            tree = caddtree(log_q, draft_cost=cd, verify_cost=cv, max_budget=budget,
                            root_token=root)
        elif method == "exhaustive":
            cd, cv = _costs_at(cost, start)
            tree = exhaustive_budget_tree(log_q, draft_cost=cd, verify_cost=cv,
                                          max_budget=budget, root_token=root)
        else:  # sampled: DDTree's shape, tokens drawn from the tempered drafter
            shape = ddtree(log_q, budget, root_token=root)
            prop_rows = torch.softmax(dlogits.double() / temperature, dim=-1).cpu().numpy()
            tree, proposal = fill_shape(shape, prop_rows, scheme=SCHEME_FOR_RULE[rule], rng=rng)
        mask = target.tree_mask(tree, start) if tree.size else None
        t2 = _clock(bundle)
        fwd = target.verify_forward(tree, want_features=True, mask=mask)
        t3 = _clock(bundle)
        if on_round is not None:
            on_round(tree, fwd, [*pf.prompt.tolist(), *out])
            t3 = _clock(bundle)
        rows = LogitsOracle(fwd.logits, temperature)
        outcome = verify(tree, rows, rule=rule, rng=rng, proposal=proposal)
        t4 = _clock(bundle)
        nodes = [0, *outcome.path]
        target.commit(start, nodes)
        t5 = _clock(bundle)
        pos = torch.arange(start, start + len(nodes), device=bundle.device)[None]
        bundle.drafter.extend_cache(dcache, fwd.features[:, nodes], pos)
        t6 = _clock(bundle)
        out.extend(outcome.tokens)
        root = outcome.bonus
        rounds.append(RoundStats(outcome.tau, tree.size, (t1 - t0) + (t6 - t5), t2 - t1,
                                 t3 - t2, t4 - t3, t5 - t4))
    return DecodeResult(out[:n_tokens], rounds, pf.seconds, _clock(bundle) - t_begin)


@torch.inference_mode()
def _run_ar(bundle: Bundle, pf: _Prefilled, n_tokens: int, *, temperature: float,
            rng: np.random.Generator) -> DecodeResult:
    """The autoregressive baseline: one plain one-token forward and one exact draw per token.

    The draw is the one predraw-and-follow makes on the root-only tree (argmax, first maximal
    index, at ``T = 0``; :func:`treespec_sim._sampling.sample_categorical` on the float64 row
    otherwise), without building a tree, so the baseline carries no tree overhead.
    """
    target = bundle.target
    target.restore(pf.target_snapshot)
    root = pf.root
    out: list[int] = []
    rounds: list[RoundStats] = []
    t_begin = _clock(bundle)
    while len(out) < n_tokens:
        t0 = _clock(bundle)
        logits = target.step(root)
        t1 = _clock(bundle)
        if temperature == 0.0:
            root = int(torch.argmax(logits))
        else:
            row = torch.softmax(logits.to(torch.float64) / temperature, dim=-1).cpu().numpy()
            root = sample_categorical(row, rng)
        t2 = _clock(bundle)
        out.append(root)
        rounds.append(RoundStats(1, 0, 0.0, 0.0, t1 - t0, t2 - t1, 0.0))
    return DecodeResult(out, rounds, pf.seconds, _clock(bundle) - t_begin)


def decode(bundle: Bundle, prompt_ids, max_new_tokens: int, *, method: str, budget: int | None
           = None, temperature: float = 0.0, seed: int | None = 0, rule: str | None = None,
           rng: np.random.Generator | None = None, cost=None,
           cost_mismatch: str = "error") -> DecodeResult:
    """Generate ``max_new_tokens`` tokens after ``prompt_ids``; return tokens and round stats.

    Parameters
    ----------
    bundle : Bundle
        From :func:`real_models.load`.
    prompt_ids : sequence of int
        At least 2 tokens; ``len + max_new_tokens + block_size`` must fit the context.
    max_new_tokens : int
    method : {"ar", "chain", "ddtree", "caddtree", "exhaustive", "sampled-ddtree"}
        ``chain`` is DFlash's argmax chain (length ``L``); ``ddtree`` the DDTree of ``budget``
        nodes; ``caddtree`` CaDDTree up to ``budget`` with a latency profile measured on this
        bundle (or ``cost``); ``exhaustive`` the budget maximising the same throughput ratio over
        every prefix; ``sampled-ddtree`` DDTree's shape with tokens drawn from the drafter at
        ``temperature`` (``rule`` picks the verifier and the drafting scheme).
    budget : int, optional
        Tree nodes (root excluded; the maximum for ``caddtree`` and ``exhaustive``); required
        for every tree method but ``chain``.
    temperature : float
        ``0`` is greedy.
    seed : int, optional
        Seeds ``numpy.random.default_rng`` (ignored when ``rng`` is given).
    rule : str, optional
        Verifier (:data:`METHODS` lists the valid ones per method; default the first).
    rng : numpy.random.Generator, optional
    cost : latency model, path of a latency ``.json``, or preset name, optional
        For ``caddtree`` and ``exhaustive`` (default: :func:`latency_profile` of this bundle).
        A file is checked against this bundle (:func:`resolve_cost`); costs are read at each
        round's context length.
    cost_mismatch : {"error", "warn"}
        What a latency file for another device type or other model shapes does: raise
        :class:`real_models.profile.ProfileMismatch`, or run and record the mismatch in
        ``DecodeResult.notes``.
    """
    prompt, rule = check_request(bundle, prompt_ids, max_new_tokens, method, rule, temperature,
                                 budget)
    rng = np.random.default_rng(seed) if rng is None else rng
    notes: list[str] = []
    if method in ("caddtree", "exhaustive"):
        if cost is None:
            cost = latency_profile(bundle, int(budget))
        else:
            cost, notes = resolve_cost(bundle, cost, on_mismatch=cost_mismatch)
    pf = _prefill(bundle, prompt, with_drafter=method != "ar")
    res = _run(bundle, pf, int(max_new_tokens), method=method, rule=rule,
               budget=None if budget is None else int(budget), temperature=float(temperature),
               rng=rng, cost=cost)
    res.notes.extend(notes)
    return res


def generate(bundle: Bundle, prompt_ids, max_new_tokens: int, *, method: str,
             budget: int | None = None, temperature: float = 0.0, seed: int | None = 0,
             rule: str | None = None) -> list[int]:
    """Token ids of the continuation (see :func:`decode`, which also returns statistics)."""
    return decode(bundle, prompt_ids, max_new_tokens, method=method, budget=budget,
                  temperature=temperature, seed=seed, rule=rule).tokens

