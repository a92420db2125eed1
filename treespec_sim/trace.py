r"""Recorded real rounds as a backend: the trace format, its reader and its replay.

A *trace* keeps, for every recorded round of a real decode, what the exact analysis of any tree
inside a recorded superset tree needs (``docs/traces.md`` documents every field):

* the context (token ids; the last one is the round's root);
* the drafter's per-depth log-marginals (dense ``(L, V)``, or the top ``K`` per depth and the
  log of the remaining mass);
* a deterministic superset tree, DDTree at ``B_max`` from those marginals, and the target's
  rows at its nodes (full rows as float32 logits, or at each recorded temperature the edge
  probabilities, the argmax and the top ``K_t`` entries with the remaining mass);
* optionally a sampled tree with its proposal laws and the target's full rows at its nodes;
* the sampled outcome of the decode (accepted path, bonus) and measured draft/verify seconds.

:func:`load` returns a :class:`Trace`, which implements :class:`treespec_sim.engine.Backend`:
``run_round(trace, trace.contexts[i], method=..., budget=..., temperature=..., rng=...)`` is
exact for every tree inside the recorded data (see ``docs/traces.md``, "What replays exactly"),
and anything outside it raises ``ValueError`` naming what is missing: a temperature that was
not recorded, a tree larger than ``B_max``, a node outside the superset tree, a target row that
was stored as its top entries only.

The writer :func:`write` is used by the recorder (``python -m real_models.record``); it writes
one ``.npz`` file (a JSON header plus arrays) atomically (:mod:`treespec_sim.files`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .files import (
    MAX_TRACE_BYTES,
    NpyMember,
    atomic_path,
    check_file,
    human_bytes,
    npz_members,
    open_zip,
    over_limit,
    parse_json,
    read_npz_member,
)
from .marginals import LazyLogMarginals
from .methods import get_method
from .policies import superset
from .policies.draft import Draft
from .proposal import ProposalRows
from .rows import same_tree
from .tree import DraftTree
from .validation import check_rng, check_temperature, is_int, is_number
from .verify import MATCHING_RULES

__all__ = ["FORMAT", "TopKLogMarginals", "Trace", "TraceContext", "TraceRows", "array_bounds",
           "check_arrays", "expected_bytes", "load", "read", "rows_from_logits", "superset",
           "write"]

#: The format name and version written in every trace's header (``docs/traces.md``).
FORMAT = "treespec-trace/1"


# ----------------------------------------------------------------------------- sizes
def expected_bytes(*, rounds: int, vocab_size: int, depth: int, b_max: int,
                   temperatures: Sequence[float], top_k: int = 0, target_top_k: int = 0,
                   sampled_size: int = 0, sampled_laws: int | None = None,
                   context_tokens: int = 64, superset_size: int | None = None) -> int:
    r"""Uncompressed bytes of a trace's arrays (``docs/traces.md``, "Size"): an upper bound on
    the file (``.npz`` is compressed).

    Parameters
    ----------
    rounds : int
        Recorded rounds ``R``.
    vocab_size, depth, b_max : int
        ``V``, ``L``, ``B_max``.
    temperatures : sequence of float
        The recorded temperatures.
    top_k : int
        Drafter entries kept per depth (``0``: dense ``(L, V)``).
    target_top_k : int
        Target entries kept per node and positive temperature (``0``: full float32 logits).
    sampled_size : int
        Nodes of the recorded sampled tree (``0``: none).
    sampled_laws : int, optional
        Distinct proposal laws per sampled tree (default: ``sampled_size``, an upper bound).
    context_tokens : int
        Mean context length in tokens.
    superset_size : int, optional
        Nodes of the superset tree (default ``2 b_max + L``, the bound of :func:`superset`:
        DDTree's ``b_max``, at most ``L`` chain nodes and ``b_max`` dynamic-tree nodes).

    Returns
    -------
    int
    """
    n1 = (2 * b_max + depth if superset_size is None else superset_size) + 1
    per = 4 * context_tokens + 8 * 8 + 8 * n1 + 4 * depth  # context, scalars, tree, outcome
    if top_k:
        per += depth * top_k * 8 + depth * 8
    else:
        per += depth * vocab_size * 4
    positive = [t for t in temperatures if t > 0]
    if target_top_k:
        per += 4 * n1  # argmax
        per += len(positive) * n1 * (8 + 8 + target_top_k * 8)
    else:
        per += n1 * vocab_size * 4
    if sampled_size:
        s1 = sampled_size + 1
        laws = sampled_size if sampled_laws is None else sampled_laws
        per += 12 * s1 + laws * vocab_size * 8 + s1 * vocab_size * 4
    return int(rounds * per)


# ----------------------------------------------------------------------------- contexts
@dataclass(frozen=True, eq=False)
class TraceContext:
    """A recorded context: the ``ctx`` of a :class:`Trace`.

    Attributes
    ----------
    index : int
        Its round in the trace (``trace.contexts[index] is self``).
    prompt : int
        The prompt it was decoded from.
    round : int
        Its round within that prompt's decode (``0`` first).
    tokens : ndarray int64 (n,)
        The prompt and every token committed before this round (read-only); the last one is
        the round's root.
    """

    index: int
    prompt: int
    round: int
    tokens: np.ndarray

    @property
    def last_token(self) -> int:
        """The round's root (the last committed token)."""
        return int(self.tokens[-1])

    @property
    def length(self) -> int:
        """Cached positions before the round (every token but the root)."""
        return int(self.tokens.size - 1)


# ----------------------------------------------------------------------------- drafter
class TopKLogMarginals(LazyLogMarginals):
    """Drafter log-marginals recorded as the top ``K`` entries per depth and the remaining mass.

    :meth:`top` is exact for ``k <= K``; :meth:`values` for the recorded tokens. :meth:`dense`
    fills the unrecorded entries with the remaining mass spread evenly (each strictly below the
    ``K``-th entry), so every builder that reads at most the top ``K`` entries of a depth
    builds exactly the tree it builds on the live marginals (``docs/traces.md``, "What replays
    exactly"); entries outside the top ``K`` are not the drafter's.

    Parameters
    ----------
    tokens : ndarray int (L, K)
        The top tokens per depth, best first (DDTree's rank order).
    log_probs : ndarray float (L, K)
    rest : ndarray float (L,)
        ``log`` of the mass outside the top ``K`` (``-inf`` when none).
    vocab_size : int
    """

    def __init__(self, tokens: np.ndarray, log_probs: np.ndarray, rest: np.ndarray,
                 vocab_size: int) -> None:
        super().__init__(tokens.shape[0], vocab_size)
        self.k = int(tokens.shape[1])
        self._tok = np.asarray(tokens, dtype=np.int64)
        self._lp = np.asarray(log_probs, dtype=np.float64)
        self._rest = np.asarray(rest, dtype=np.float64)

    def top(self, row: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        row = self._check_row(row)
        k = min(int(k), self.shape[1])
        if k > self.k:
            raise ValueError(f"the drafter's top {k} at depth {row + 1} are not recorded: the "
                             f"trace keeps the top {self.k} per depth (record with a larger "
                             "--top-k)")
        return self._tok[row, :k].copy(), self._lp[row, :k].copy()

    def values(self, row: int, tokens: np.ndarray) -> np.ndarray:
        row = self._check_row(row)
        tokens = np.asarray(tokens, dtype=np.int64)
        pos = {int(t): i for i, t in enumerate(self._tok[row])}
        missing = [int(t) for t in tokens.ravel() if int(t) not in pos]
        if missing:
            raise ValueError(f"the drafter's log-probability of token {missing[0]} at depth "
                             f"{row + 1} is not recorded (outside the top {self.k})")
        return np.array([self._lp[row, pos[int(t)]] for t in tokens.ravel()],
                        dtype=np.float64).reshape(tokens.shape)

    def _dense(self) -> np.ndarray:
        L, V = self.shape
        out = np.empty((L, V), dtype=np.float64)
        n_rest = V - self.k
        for d in range(L):
            fill = -math.inf
            if n_rest > 0 and np.isfinite(self._rest[d]):
                fill = min(float(self._rest[d]) - math.log(n_rest),
                           float(np.nextafter(self._lp[d, -1], -np.inf)))
            out[d] = fill
            out[d, self._tok[d]] = self._lp[d]
        return out


# ----------------------------------------------------------------------------- target rows
def rows_from_logits(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Rows at ``temperature`` from float32 logits ``(m, V)``, as the live oracle computes
    them: ``softmax(logits / T)`` in float64, one-hot of the first maximum at ``T = 0``."""
    if temperature == 0.0:
        out = np.zeros(logits.shape, dtype=np.float64)
        out[np.arange(logits.shape[0]), np.argmax(logits, axis=1)] = 1.0
        return out
    lg = logits.astype(np.float64) / temperature
    lg -= lg.max(axis=1, keepdims=True)
    e = np.exp(lg)
    return e / e.sum(axis=1, keepdims=True)


class TraceRows:
    """Target rows of one tree inside a trace's recorded data (a
    :class:`~treespec_sim.rows.TargetOracle`).

    Parameters
    ----------
    tree : DraftTree
        The queried tree.
    node_of : ndarray int (n+1,)
        The recorded node each of its nodes is (in the superset or the sampled tree).
    temperature : float
    vocab_size : int
    logits : ndarray float32 (m, V), optional
        Full rows of the recorded nodes (as logits).
    edges : ndarray float64 (m,), optional
        The recorded edge probabilities (top-k storage), node ``u``'s ``p_{parent(u)}(x_u)``.
    argmax : ndarray int (m,), optional
        The recorded argmax per node (top-k storage; ``T = 0`` rows).
    what : str
        Names the storage in the refusal of a row that is not recorded.
    """

    def __init__(self, tree: DraftTree, node_of: np.ndarray, temperature: float,
                 vocab_size: int, *, logits: np.ndarray | None = None,
                 edges: np.ndarray | None = None, argmax: np.ndarray | None = None,
                 what: str = "") -> None:
        self.tree = tree
        self.node_of = node_of
        self.temperature = float(temperature)
        self._V = int(vocab_size)
        self._logits = logits
        self._edges = edges
        self._argmax = argmax
        self._what = what
        self._rows: dict[int, np.ndarray] = {}

    @property
    def shape(self) -> tuple[int, int]:
        return (self.tree.n_nodes, self._V)

    def row(self, v: int) -> np.ndarray:
        v = int(v)
        r = self._rows.get(v)
        if r is None:
            u = int(self.node_of[v])
            if self._logits is not None:
                r = rows_from_logits(self._logits[u:u + 1], self.temperature)[0]
            elif self.temperature == 0.0:
                r = np.zeros(self._V, dtype=np.float64)
                r[int(self._argmax[u])] = 1.0
            else:
                raise ValueError(
                    f"the target's full row at node {v} (T = {self.temperature:g}) is not "
                    f"recorded: {self._what}; exact E[tau], coverage and exits need only edge "
                    "probabilities (run_round(..., sample=False)), a sampled outcome needs full "
                    "rows (record with --target-top-k 0)")
            r.flags.writeable = False
            self._rows[v] = r
        return r

    def edge_probs(self, tree: DraftTree) -> np.ndarray:
        out = np.ones(tree.n_nodes, dtype=np.float64)
        if tree.size == 0:
            return out
        nodes = self.node_of[1:]
        if self._logits is None:
            if self.temperature == 0.0:
                par = self.node_of[tree.parent[1:]]
                out[1:] = (self._argmax[par] == tree.token[1:]).astype(np.float64)
            else:
                out[1:] = self._edges[nodes]
            return out
        par = self.node_of[tree.parent[1:]]
        inner, inv = np.unique(par, return_inverse=True)
        lg = self._logits[inner].astype(np.float64)
        if self.temperature == 0.0:
            out[1:] = (np.argmax(lg, axis=1)[inv] == tree.token[1:]).astype(np.float64)
            return out
        lg /= self.temperature
        mx = lg.max(axis=1, keepdims=True)
        lse = (mx[:, 0] + np.log(np.exp(lg - mx).sum(axis=1)))
        out[1:] = np.exp(lg[inv, tree.token[1:]] - lse[inv])
        return out


# ----------------------------------------------------------------------------- the trace
def _temps_key(t: float) -> str:
    return f"{float(t):g}"


class Trace:
    """A recorded trace as a :class:`treespec_sim.engine.Backend` (see the module docstring).

    Attributes
    ----------
    header : dict
        The JSON header (models, dtype, device, settings; ``docs/traces.md``).
    contexts : tuple of TraceContext
        The recorded contexts, in order (prompt by prompt, round by round).
    depth, vocab_size, b_max : int
    temperatures : tuple of float
        The recorded target temperatures.
    arrays : mapping of str to ndarray
        The stored arrays (read-only).
    """

    def __init__(self, header: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        if header.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} trace: header format is {header.get('format')!r}")
        self.header = dict(header)
        self.arrays = dict(arrays)
        s = self.header["settings"]
        self.depth = int(self.header["L"])
        self.vocab_size = int(self.header["V"])
        self.b_max = int(s["b_max"])
        self.temperatures = tuple(float(t) for t in s["temperatures"])
        self.top_k = int(s["top_k"])
        self.target_top_k = int(s["target_top_k"])
        a = self.arrays
        off, toks = a["ctx_offsets"], a["ctx_tokens"].astype(np.int64)
        ctxs = []
        for r in range(int(a["prompt"].size)):
            t = toks[off[r]:off[r + 1]].copy()
            t.flags.writeable = False
            ctxs.append(TraceContext(r, int(a["prompt"][r]), int(a["round"][r]), t))
        self.contexts: tuple[TraceContext, ...] = tuple(ctxs)
        self._children: dict[int, dict[tuple[int, int], int]] = {}
        self._log_q: dict[int, Any] = {}
        self._superset: dict[int, DraftTree] = {}
        self._sampled: dict[int, Draft] = {}
        sp = s.get("sampled")
        self.sampled_spec: dict | None = dict(sp) if sp else None

    _CACHES = ("_children", "_log_q", "_superset", "_sampled")

    def __getstate__(self) -> dict:
        """Pickled without its caches (a sweep's worker processes rebuild them)."""
        state = dict(self.__dict__)
        for name in self._CACHES:
            state[name] = {}
        return state

    # ------------------------------------------------------------------ facts
    def __len__(self) -> int:
        return len(self.contexts)

    def __repr__(self) -> str:
        m = self.header.get("models", {})
        return (f"Trace({len(self)} rounds, target={m.get('target')!r}, "
                f"drafter={m.get('drafter')!r}, V={self.vocab_size}, L={self.depth}, "
                f"B_max={self.b_max}, T={list(self.temperatures)})")

    @property
    def label(self) -> str:
        """A short label: models and device (for reports)."""
        m = self.header.get("models", {})
        return (f"{Path(str(m.get('target', '?'))).name}+{Path(str(m.get('drafter', '?'))).name}"
                f" on {self.header.get('device', '?')}")

    def _ctx(self, ctx: Any) -> int:
        if not isinstance(ctx, TraceContext) or not (
                0 <= ctx.index < len(self.contexts) and self.contexts[ctx.index] is ctx):
            raise ValueError(f"ctx must be one of this trace's contexts (trace.contexts[i]); "
                             f"got {type(ctx).__name__}")
        return ctx.index

    def _check_temperature(self, temperature: float) -> float:
        t = check_temperature(temperature)
        if t not in self.temperatures:
            raise ValueError(f"temperature T = {t:g} is not recorded in this trace (recorded: "
                             f"{', '.join(_temps_key(x) for x in self.temperatures)})")
        return t

    def superset_tree(self, ctx: TraceContext) -> DraftTree:
        """The recorded deterministic superset tree of ``ctx``'s round (:func:`superset`)."""
        r = self._ctx(ctx)
        tree = self._superset.get(r)
        if tree is None:
            n1 = int(self.arrays["tree_size"][r]) + 1
            tree = DraftTree.from_parents(self.arrays["tree_parent"][r, :n1].astype(np.int64),
                                          self.arrays["tree_token"][r, :n1].astype(np.int64))
            self._superset[r] = tree
        return tree

    def recorded_outcome(self, ctx: TraceContext) -> tuple[tuple[int, ...], int]:
        """The decode's sampled outcome of ``ctx``'s round: (accepted superset node ids, bonus)."""
        r = self._ctx(ctx)
        path = self.arrays["outcome_path"][r]
        return tuple(int(v) for v in path[path >= 0]), int(self.arrays["outcome_bonus"][r])

    def timings(self, ctx: TraceContext) -> dict[str, float]:
        """Measured seconds of ``ctx``'s recorded round: ``draft`` and ``verify`` (the superset
        tree's forward), ``sampled_verify`` when a sampled tree was recorded."""
        r = self._ctx(ctx)
        out = {"draft": float(self.arrays["draft_s"][r]),
               "verify": float(self.arrays["verify_s"][r])}
        if "s_verify_s" in self.arrays:
            out["sampled_verify"] = float(self.arrays["s_verify_s"][r])
        return out

    # ------------------------------------------------------------------ Backend
    def sample_context(self, rng: np.random.Generator) -> TraceContext:
        """A recorded context drawn uniformly (what a sweep's fresh contexts are on a trace)."""
        check_rng(rng)
        return self.contexts[int(rng.integers(len(self.contexts)))]

    def advance(self, ctx: TraceContext, tokens: Sequence[int]) -> TraceContext:
        """The next recorded context, when committing ``tokens`` leads to it; else
        ``ValueError`` (that context was not recorded)."""
        r = self._ctx(ctx)
        nxt = np.concatenate([ctx.tokens, np.asarray(list(tokens), dtype=np.int64)])
        if r + 1 < len(self.contexts):
            c = self.contexts[r + 1]
            if c.prompt == ctx.prompt and np.array_equal(c.tokens, nxt):
                return c
        raise ValueError(f"the context after round {r} with tokens {list(tokens)} is not "
                         "recorded in this trace (only the recorded decode's next context is)")

    def context_length(self, ctx: TraceContext) -> int:
        return ctx.length

    def check_round(self, ctx: TraceContext, *, method: str, budget: int | None,
                    temperature: float) -> None:
        """Refuse, before the round is built (:func:`treespec_sim.engine.run_round` calls it),
        a temperature that was not recorded and, on a top-k trace, a cost-aware method's
        ``budget`` above the recorded ``K``: its budget curve would read unrecorded drafter
        entries (``docs/traces.md``, "What replays exactly"). Everything else is refused where
        it leaves the data (the tree's size, a node, a row)."""
        self._ctx(ctx)
        self._check_temperature(temperature)
        if not (self.top_k and budget is not None and int(budget) > self.top_k):
            return
        try:
            m, _ = get_method(method)
        except ValueError:  # an unknown method: run_round names it
            return
        if m.needs_cost:
            raise ValueError(f"budget: {method!r} reads the drafter's marginals up to its "
                             f"max budget {int(budget)}, above the recorded top K = "
                             f"{self.top_k} per depth (record with --top-k >= {int(budget)})")

    def draft(self, ctx: TraceContext):
        """The recorded drafter marginals: float32 ``(L, V)`` (dense) or
        :class:`TopKLogMarginals`; the same object for the same context."""
        r = self._ctx(ctx)
        lq = self._log_q.get(r)
        if lq is None:
            a = self.arrays
            if self.top_k:
                lq = TopKLogMarginals(a["q_top_tokens"][r], a["q_top_logp"][r],
                                      a["q_rest_logp"][r], self.vocab_size)
            else:
                lq = a["log_q"][r]
            self._log_q[r] = lq
        return lq

    def _children_of(self, r: int) -> dict[tuple[int, int], int]:
        ch = self._children.get(r)
        if ch is None:
            n1 = int(self.arrays["tree_size"][r]) + 1
            par = self.arrays["tree_parent"][r, :n1]
            tok = self.arrays["tree_token"][r, :n1]
            ch = {(int(par[u]), int(tok[u])): u for u in range(1, n1)}
            self._children[r] = ch
        return ch

    def target_oracle(self, ctx: TraceContext, tree: DraftTree, temperature: float
                      ) -> TraceRows:
        """The recorded target rows of ``tree`` (inside the superset tree, or the recorded
        sampled tree) at a recorded ``temperature``; ``ValueError`` naming what is missing."""
        r = self._ctx(ctx)
        t = self._check_temperature(temperature)
        if not isinstance(tree, DraftTree):
            raise ValueError(f"tree must be a DraftTree; got {type(tree).__name__}")
        if tree.root_token != ctx.last_token:
            raise ValueError(f"tree.token[0] = {tree.root_token} must be the context's root "
                             f"token {ctx.last_token}")
        sampled = self._sampled_draft(r)
        if sampled is not None and same_tree(sampled.tree, tree):
            if t != sampled.temperature:
                raise ValueError(f"the recorded sampled tree's target rows are recorded at "
                                 f"T = {sampled.temperature:g} only; got T = {t:g}")
            return TraceRows(tree, np.arange(tree.n_nodes), t, self.vocab_size,
                             logits=self.arrays["s_target_logits"][r])
        if tree.size > self.b_max:
            raise ValueError(f"budget: the tree has {tree.size} nodes, more than the recorded "
                             f"B_max = {self.b_max} (the superset tree's budget)")
        ch = self._children_of(r)
        node_of = np.zeros(tree.n_nodes, dtype=np.int64)
        for v in range(1, tree.n_nodes):
            u = ch.get((int(node_of[tree.parent[v]]), int(tree.token[v])))
            if u is None:
                path = [int(x) for x in tree.paths()[v - 1]]
                raise ValueError(f"node {v} (depth {int(tree.depth[v])}, path {path}) is "
                                 f"outside the recorded superset tree of round {r} (DDTree, "
                                 f"chain and dynamic tree at B_max = {self.b_max}); its target "
                                 "row is not recorded")
            node_of[v] = u
        a = self.arrays
        if not self.target_top_k:
            return TraceRows(tree, node_of, t, self.vocab_size, logits=a["target_logits"][r])
        j = self.temperatures.index(t)
        return TraceRows(tree, node_of, t, self.vocab_size,
                         edges=a[f"edge_t{j}"][r] if t > 0 else None,
                         argmax=a["target_argmax"][r],
                         what=f"the trace keeps the top {self.target_top_k} entries per node")

    # ------------------------------------------------------------------ sampled tree
    def _sampled_draft(self, r: int) -> Draft | None:
        if self.sampled_spec is None:
            return None
        d = self._sampled.get(r)
        if d is None:
            a = self.arrays
            n1 = int(a["s_size"][r]) + 1
            tree = DraftTree.from_parents_multiset(a["s_parent"][r, :n1].astype(np.int64),
                                                   a["s_token"][r, :n1].astype(np.int64))
            row_of = a["s_row_of"][r, :n1].astype(np.int64)
            lo = int(a["s_law_offsets"][r])
            local = np.where(row_of >= 0, row_of - lo, -1)
            hi = int(a["s_law_offsets"][r + 1])
            laws = tuple(np.asarray(a["s_laws"][i], dtype=np.float64) for i in range(lo, hi))
            prop = ProposalRows(laws, local, self.vocab_size)
            d = Draft(tree, prop, scheme=str(self.sampled_spec["scheme"]),
                      temperature=float(self.sampled_spec["temperature"]))
            self._sampled[r] = d
        return d

    def recorded_draft(self, ctx: TraceContext) -> Draft:
        """The recorded sampled tree of ``ctx``'s round with its proposal laws
        (:class:`treespec_sim.engine.RecordedDrafts`: what the ``recorded`` method replays,
        ``run_round(trace, ctx, method="recorded", rule="rrsw",
        temperature=trace.sampled_spec["temperature"], rng=rng)``; the rule must be lossless
        for its scheme)."""
        d = self._sampled_draft(self._ctx(ctx))
        if d is None:
            raise ValueError("this trace has no recorded sampled tree (record with "
                             "--sampled-tree SPEC)")
        return d


# ----------------------------------------------------------------------------- files
def write(path: Path | str, header: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> Path:
    """Write a trace file (``.npz``: ``header`` as JSON bytes, then the arrays) atomically.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    hdr = dict(header)
    hdr["format"] = FORMAT
    blob = np.frombuffer(json.dumps(hdr, sort_keys=True).encode(), dtype=np.uint8)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez_compressed(f, header=blob, **{k: np.asarray(v) for k, v in arrays.items()})
    return path


def read(path: Path | str) -> tuple[dict, dict[str, np.ndarray]]:
    """The header and the arrays of a trace file, checked before and after they are read.

    Nothing is decompressed before every member's declared shape and dtype have been checked
    against what the trace's own header justifies (:func:`array_bounds`) and their total
    against :data:`~treespec_sim.files.MAX_TRACE_BYTES`; after reading, the arrays' offsets,
    sizes and token ids are checked against each other (:func:`check_arrays`). No pickle is
    ever loaded. A recorder's checkpoint (``FILE.part``: arrays ``r<i>.<key>``) is checked
    against the limit and for plain number types only.

    Returns
    -------
    header : dict
    arrays : dict of str to ndarray
        Read-only.

    Raises
    ------
    ValueError
        One line naming the file: not a zip archive, a member that is not a plain array, a
        damaged member, a header that is not a trace's, a shape or dtype the header does not
        justify, sizes above the limit, arrays inconsistent with each other.
    """
    path = check_file(path, "trace")
    archive = open_zip(path, "trace")
    with archive:
        try:
            members = npz_members(archive, path)
        except ValueError as exc:
            raise ValueError(f"{path}: not a trace file ({exc})") from None
        header = _read_header(archive, members, path)
        checkpoint = any(_CHECKPOINT.fullmatch(k) for k in members)
        bounds = None if checkpoint else array_bounds(header, path)
        total = 0
        for m in members.values():
            if m.name == "header":
                continue
            if bounds is not None:
                _check_member(m, bounds, path)
            total += m.nbytes
        if total > MAX_TRACE_BYTES.get():
            raise over_limit(path, "its arrays", total, MAX_TRACE_BYTES)
        arrays = {k: read_npz_member(archive, m, path) for k, m in members.items()
                  if k != "header"}
    if not checkpoint:
        check_arrays(header, arrays, path)
    for v in arrays.values():
        v.flags.writeable = False
    return header, arrays


#: A recorder's checkpoint member (``real_models.record``): round ``i``'s array ``key``.
_CHECKPOINT = re.compile(r"r\d+\..+")
#: The largest JSON header a trace may carry.
_MAX_HEADER_BYTES = 1 << 20


def _read_header(archive, members: Mapping[str, NpyMember], path: Path) -> dict:
    m = members.get("header")
    if m is None:
        raise ValueError(f"{path}: not a trace file (no header)")
    if m.dtype != np.uint8 or len(m.shape) != 1 or m.nbytes > _MAX_HEADER_BYTES:
        raise ValueError(f"{path}: not a trace file (its header is {m.dtype} {m.shape}, not "
                         f"JSON bytes of at most {human_bytes(_MAX_HEADER_BYTES)})")
    header = parse_json(read_npz_member(archive, m, path).tobytes(), f"{path}: header")
    if not isinstance(header, dict):
        raise ValueError(f"{path}: not a trace file (its header is not a JSON object)")
    if header.get("format") != FORMAT:
        raise ValueError(f"{path}: format {header.get('format')!r:.60} is not {FORMAT!r}")
    return header


def _header_int(header: Mapping, key: str, path: Path, *, low: int = 0) -> int:
    obj: Any = header
    for part in key.split("."):
        obj = obj.get(part) if isinstance(obj, Mapping) else None
    if not is_int(obj, numpy=False) or obj < low:
        raise ValueError(f"{path}: header {key} = {obj!r:.40} is not an integer >= {low}")
    return obj


def array_bounds(header: Mapping, path: Path | str = "trace") -> dict[str, tuple[str, tuple]]:
    """Every array a trace with this header may hold: its kind (``"i"`` integer, ``"f"``
    float) and its largest shape, from the header's ``L``, ``V``, ``prompts`` and settings
    (``docs/traces.md``, "Arrays").

    Raises
    ------
    ValueError
        A header field that is missing or not a valid number (named).
    """
    path = Path(path)
    s = header.get("settings")
    if not isinstance(s, Mapping):
        raise ValueError(f"{path}: header has no settings object")
    L, V = _header_int(header, "L", path, low=1), _header_int(header, "V", path, low=1)
    prompts = _header_int(header, "prompts", path)
    rounds = _header_int(header, "settings.rounds", path)
    b_max = _header_int(header, "settings.b_max", path, low=1)
    k = _header_int(header, "settings.top_k", path)
    kt = _header_int(header, "settings.target_top_k", path)
    prompt_tokens = _header_int(header, "settings.prompt_tokens", path)
    temps = s.get("temperatures")
    if not (isinstance(temps, list) and 0 < len(temps) <= 64 and all(
            is_number(t, numpy=False) and math.isfinite(t) and t >= 0 for t in temps)):
        raise ValueError(f"{path}: header settings.temperatures = {temps!r:.60} is not a list "
                         "of finite temperatures >= 0")
    sampled = s.get("sampled")
    if sampled is not None:
        t = sampled.get("temperature") if isinstance(sampled, Mapping) else None
        if not (isinstance(sampled, Mapping) and isinstance(sampled.get("method"), str)
                and sampled.get("scheme") in MATCHING_RULES and is_number(t, numpy=False)
                and math.isfinite(t) and t >= 0):
            raise ValueError(f"{path}: header settings.sampled = {sampled!r:.80} is not null "
                             "or {method, budget, temperature, rule, scheme} with a known "
                             f"scheme ({', '.join(MATCHING_RULES)})")
    R = prompts * rounds
    N = 2 * b_max + L + 1  # superset(): DDTree's b_max, <= L chain and <= b_max dynamic nodes
    C = R * (prompt_tokens + rounds * (L + 1))
    out: dict[str, tuple[str, tuple]] = {
        "ctx_offsets": ("i", (R + 1,)), "ctx_tokens": ("i", (C,)), "prompt": ("i", (R,)),
        "round": ("i", (R,)), "tree_size": ("i", (R,)), "tree_parent": ("i", (R, N)),
        "tree_token": ("i", (R, N)), "outcome_path": ("i", (R, L)),
        "outcome_bonus": ("i", (R,)), "draft_s": ("f", (R,)), "verify_s": ("f", (R,))}
    if k:
        out.update(q_top_tokens=("i", (R, L, k)), q_top_logp=("f", (R, L, k)),
                   q_rest_logp=("f", (R, L)))
    else:
        out["log_q"] = ("f", (R, L, V))
    if kt:
        out["target_argmax"] = ("i", (R, N))
        for j, t in enumerate(temps):
            if t > 0:
                out.update({f"edge_t{j}": ("f", (R, N)), f"p_top_tokens_t{j}": ("i", (R, N, kt)),
                            f"p_top_probs_t{j}": ("f", (R, N, kt)), f"p_rest_t{j}": ("f", (R, N))})
    else:
        out["target_logits"] = ("f", (R, N, V))
    if sampled is not None:
        S = _header_int(header, "settings.sampled.budget", path, low=1) + 1
        out.update(s_size=("i", (R,)), s_parent=("i", (R, S)), s_token=("i", (R, S)),
                   s_row_of=("i", (R, S)), s_law_offsets=("i", (R + 1,)),
                   # a law per node with children, or per depth (a drafter's marginal)
                   s_laws=("f", (R * (S + L), V)), s_target_logits=("f", (R, S, V)),
                   s_verify_s=("f", (R,)))
    return out


def _check_member(m: NpyMember, bounds: Mapping[str, tuple[str, tuple]], path: Path) -> None:
    if m.name not in bounds:
        raise ValueError(f"{path}: array {m.name!r} is not one a trace with this header holds")
    kind, most = bounds[m.name]
    if m.dtype.kind not in ("iu" if kind == "i" else "f") or m.dtype.itemsize > 8:
        raise ValueError(f"{path}: array {m.name!r} has dtype {m.dtype}, not the "
                         f"{'integer' if kind == 'i' else 'float'} type of docs/traces.md")
    if len(m.shape) != len(most) or any(a > b for a, b in zip(m.shape, most, strict=True)):
        raise ValueError(f"{path}: array {m.name!r} has shape {m.shape}; the header justifies "
                         f"at most {most}")


def check_arrays(header: Mapping, arrays: Mapping[str, np.ndarray], path: Path | str = "trace"
                 ) -> None:
    """The arrays of a trace checked against each other: one row per round, offsets that
    index inside what they offset, tree sizes inside their arrays, token ids inside the
    vocabulary (so no replay indexes outside an array)."""
    path = Path(path)
    V, L = int(header["V"]), int(header["L"])
    missing = [k for k in ("ctx_offsets", "ctx_tokens", "prompt", "tree_size", "tree_parent",
                           "tree_token") if k not in arrays]
    if missing:
        raise ValueError(f"{path}: incomplete trace: no {missing[0]!r}")
    R = arrays["prompt"].shape[0]

    def fail(name: str, what: str) -> ValueError:
        return ValueError(f"{path}: array {name!r} {what}")

    for name, a in arrays.items():
        if name not in ("ctx_offsets", "ctx_tokens", "s_law_offsets", "s_laws") and (
                a.shape[0] != R):
            raise fail(name, f"has {a.shape[0]} rows for {R} rounds")
        if a.dtype.kind == "f" and name not in ("log_q", "q_top_logp", "q_rest_logp",
                                                "target_logits", "s_target_logits") and (
                not np.isfinite(a).all()):
            raise fail(name, "holds a NaN or infinite value")

    def offsets(name: str, total: int) -> np.ndarray:
        off = arrays[name]
        if off.shape != (R + 1,) or (R + 1 and (off[0] != 0 or off[-1] != total)) or np.any(
                np.diff(off) < 0):
            raise fail(name, f"is not {R + 1} non-decreasing offsets from 0 to {total}")
        return off

    def within(name: str, low: int, high: int) -> None:
        a = arrays.get(name)
        if a is not None and a.size and (a.min() < low or a.max() >= high):
            raise fail(name, f"holds values outside [{low}, {high})")

    offsets("ctx_offsets", arrays["ctx_tokens"].size)
    if R and np.any(np.diff(arrays["ctx_offsets"]) < 1):
        raise fail("ctx_offsets", "gives a round an empty context")
    within("ctx_tokens", 0, V)
    within("tree_size", 0, arrays["tree_parent"].shape[1])
    for name in ("tree_token", "target_argmax", "outcome_bonus", "s_token", "q_top_tokens",
                 *(k for k in arrays if k.startswith("p_top_tokens_t"))):
        within(name, -1, V)
    within("tree_parent", -2, arrays["tree_parent"].shape[1])
    within("outcome_path", -1, arrays["tree_parent"].shape[1])
    if "outcome_path" in arrays and arrays["outcome_path"].shape[1] != L:
        raise fail("outcome_path", f"has {arrays['outcome_path'].shape[1]} columns, not L = {L}")
    for name in ("log_q", "q_top_tokens", "q_top_logp", "q_rest_logp"):
        if name in arrays and arrays[name].shape[1] != L:
            raise fail(name, f"has {arrays[name].shape[1]} depths, not L = {L}")
    for name in ("log_q", "target_logits", "s_laws", "s_target_logits"):
        if name in arrays and arrays[name].shape[-1] != V:
            raise fail(name, f"has {arrays[name].shape[-1]} columns, not V = {V}")
    if "s_size" in arrays:
        S = arrays["s_parent"].shape[1]
        within("s_size", 0, S)
        within("s_parent", -2, S)
        laws = offsets("s_law_offsets", arrays["s_laws"].shape[0])
        row_of = arrays["s_row_of"]
        lo, hi = laws[:-1, None], laws[1:, None]
        if np.any((row_of != -1) & ((row_of < lo) | (row_of >= hi))):
            raise fail("s_row_of", "points outside its round's proposal laws")


def load(path: Path | str) -> Trace:
    """A trace file as a :class:`Trace` backend (``docs/traces.md``).

    Raises
    ------
    ValueError
        A missing file, a file that is not a trace, another format version, or a trace that
        lacks a header key or an array (named).
    """
    header, arrays = read(path)
    try:
        return Trace(header, arrays)
    except KeyError as exc:
        raise ValueError(f"{path}: incomplete trace: no {exc.args[0]!r}") from None

