r"""The round loop: every number treespec reports comes from :func:`run_round`.

A round is one idea::

    backend.draft(ctx) ──► log_q (L, V)            drafter marginals (+ conditional proposals)
          │
    METHODS[method].build ──► Draft (tree + proposal rows if its tokens were drawn)
          │
    backend.target_oracle(ctx, tree, T) ──► lazy target rows
          │
    verify(...) ──► Outcome (sampled)        expected_length / exits / coverage (exact, lazy)
          │
    cost model ──► seconds ──► tokens per second;     backend.commit(ctx, outcome) ──► next ctx

:func:`run_round` does it once and returns a :class:`Round`, whose exact quantities (exact
:math:`E[\tau]` under any lossless rule, coverage, the exit decomposition, the surrogate) are
computed on first use, so a caller pays only for what it reads. :func:`run_rounds` and
:func:`decode` are the sequences of rounds on top of it: fresh contexts, decoded sequences, or
contexts the caller chose. Every sweep family, the calibration, the real-model decoder and the
losslessness tests run their rounds here.

A *backend* is anything with the :class:`Backend` methods: the synthetic
:class:`~treespec_sim.synth.World`, the real-model backend of ``real_models``, or a user's own
drafter and target (``docs/usage.md``, "Bring your own drafter and target").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import PurePath
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from .cost import DEFAULT_CONTEXT_LENGTH, LatencyModel, get_cost_model, round_time
from .exits import (
    EXIT_CAUSES,
    ExitDecomposition,
    decompose_from_edges,
    edge_probabilities,
    exit_from_edges,
)
from .marginals import LazyLogMarginals
from .methods import (
    DraftRequest,
    Method,
    check_temperature,
    get_method,
    no_conditional_message,
    no_recorded_message,
    resolve_rule,
)
from .paths import LogQ, path_probabilities
from .policies.draft import Draft
from .policies.sampled import marginal_proposal
from .proposal import ConditionalProposal, ProposalRows
from .rows import TargetOracle
from .stats import MeanCI, mean_ci
from .tree import DraftTree, prefix_tree
from .validation import (
    as_float_array,
    check_budget,
    check_flag,
    check_log_q,
    check_nonnegative_int,
    check_positive_int,
    check_rng,
)
from .verify import RULES, expected_length, first_token_law, get_rule, verify
from .verify.outcome import Outcome

__all__ = [
    "STAGES",
    "Backend",
    "BatchedConditionalDrafter",
    "Capabilities",
    "Clocked",
    "Committer",
    "ConditionalDrafter",
    "ContextLengths",
    "DecodeResult",
    "LazyDrafter",
    "LossyFacts",
    "MeanCI",
    "RecordedDrafts",
    "Round",
    "RoundLimits",
    "RoundRecord",
    "RoundSpec",
    "RoundsSummary",
    "capabilities",
    "check_backend",
    "commit",
    "decode",
    "run_round",
    "run_rounds",
    "run_spec",
    "summarize",
]


@runtime_checkable
class Backend(Protocol):
    """What :func:`run_round` needs from a drafter and a target.

    Required
    --------
    depth : int
        The drafter's block depth ``L`` (deepest drafted level).
    vocab_size : int
    sample_context(rng) -> ctx
        A fresh context (the start of a decoded sequence).
    advance(ctx, tokens) -> ctx
        The context after committing ``tokens``.
    draft(ctx) -> log_q
        The drafter's log-marginals, float (L, V) (or a
        :class:`~treespec_sim.marginals.LazyLogMarginals`).
    target_oracle(ctx, tree, temperature) -> rows
        Target rows for ``tree``: row ``v`` is the target's law (at ``temperature``) after the
        path to node ``v``; an ``(n+1, V)`` array or an object with ``row(v)`` and
        ``edge_probs(tree)`` (:class:`~treespec_sim.rows.TargetOracle`).

    Optional (used when present; each is a typed protocol of this module, resolved once per
    round into :class:`Capabilities` by :func:`capabilities`)
    ----------------------------
    draft_lazy(ctx)
        Ranked marginals that tree builders read without materialising ``(L, V)``.
    draft_conditional(ctx, depth, parent_token) -> (V,)
        A corrected proposal given a sampled parent (``*-corrected`` and Tsubame fills).
    commit(ctx, outcome) -> ctx
        Replaces ``advance(ctx, outcome.tokens)`` when committing needs the accepted node ids
        (a real model compacts its KV cache to the accepted path).
    context_length(ctx) -> int
        Where a latency model is read (default: the model's own default).
    draft_conditional_batch(ctx, depth, parent_tokens) -> sequence of (V,)
        A level's correction laws in one pass (``fill_tree`` asks once per level).
    conditions_on_path : bool
        The correction reads each node's whole sampled path: ``draft_conditional`` and
        ``draft_conditional_batch`` then take ``path=`` / ``paths=`` (the tokens at depths
        ``1..depth - 1``, the parent last; ``policies.sampled.ProposalFn``).
    correction_pass_cost : float
        Drafter forwards one correction pass costs, charged in ``Round.cost_s`` per corrected
        level (default 0: the synthetic world's correction is a head whose cost is not
        modelled; a real drafter's is a second forward, 1).
    check_round(ctx, *, method, budget, temperature) -> None
        Refuses (``ValueError``), before anything is built, a round the backend cannot serve
        exactly (a trace: a temperature it did not record, a cost-aware budget above its
        recorded drafter entries; ``docs/traces.md``).
    recorded_draft(ctx) -> Draft
        The draft recorded for ``ctx`` (a trace's sampled tree with its proposal laws): what
        the ``recorded`` method replays.
    clock() -> float
        Seconds, synchronised with the device (default :func:`time.perf_counter`).
    """

    depth: int
    vocab_size: int

    def sample_context(self, rng: np.random.Generator) -> Any: ...

    def advance(self, ctx: Any, tokens: Sequence[int]) -> Any: ...

    def draft(self, ctx: Any) -> LogQ: ...

    def target_oracle(self, ctx: Any, tree: DraftTree, temperature: float
                      ) -> TargetOracle | np.ndarray: ...


@dataclass(frozen=True)
class LossyFacts:
    """A lossy rule on one round's tree (:meth:`Round.lossy_facts`).

    Attributes
    ----------
    rule : str
    tau : float
        The rule's exact :math:`E[\tau]` on the tree: *apparent*, since the tokens it counts
        do not follow the target's law.
    first_token_tv : float
        Total-variation distance between the law of the round's first emitted token under the
        rule and the target's root row: the rule's bias on this tree.
    """

    rule: str
    tau: float
    first_token_tv: float


def _row(rows, v: int) -> np.ndarray:
    return rows[v] if isinstance(rows, np.ndarray) else rows.row(v)


#: Stages of a round's measured time, in order.
STAGES = ("draft", "build", "verify", "decide", "commit")


@dataclass(frozen=True, eq=False)
class Round:
    r"""One round: the draft, the target rows, the sampled outcome and (lazily) exact facts.

    Attributes
    ----------
    method : str
        The registered name it ran (``"sampled-tree[2x4]"``).
    rule : str
        The verification rule.
    temperature : float
    draft : Draft
        The tree and, for sampled methods, the proposal rows it was drawn from.
    log_q : ndarray (L, V), LazyLogMarginals or None
        The drafter's marginals this round (None for a round built from recorded edges without
        them: it has no surrogate).
    rows : TargetOracle, ndarray (n+1, V) or None
        The target rows of :attr:`tree` (None for a prefix round or one built from recorded
        edges, :meth:`from_edges`, which reads :attr:`edges`).
    depth_limit : int
        The drafter's depth ``L`` (leaves there exit by ``depth_cap``).
    outcome : Outcome or None
        The sampled verification (None when the caller asked for exact facts only).
    cost_s : float or None
        Modelled seconds of the round, :math:`C_d + C_v(n + 1)`, plus
        ``backend.correction_pass_cost`` drafter forwards (:math:`C_d` each) per
        :attr:`correction_passes`, when a latency model was given.
    timings : mapping
        Measured seconds per stage of :data:`STAGES` (what ran).
    edges_given : ndarray float64 (n+1,) or None
        The target edge probabilities, when they are known without rows (:meth:`from_edges`,
        :meth:`at_budget`); :attr:`edges` reads them instead of the rows.
    reach_given : ndarray float64 (n+1,) or None
        The reach probabilities, when already computed (a prefix of a larger nested tree's).
    correction_passes : int
        The drafter passes the round's conditional corrections took: one per tree level
        (depth ``>= 2``) whose tokens were drawn from ``draft_conditional``, the level's
        parents batched into one pass (0 for marginal and deterministic methods).
    """

    method: str
    rule: str
    temperature: float
    draft: Draft
    log_q: LogQ | None
    rows: TargetOracle | np.ndarray | None
    depth_limit: int
    outcome: Outcome | None = None
    cost_s: float | None = None
    timings: Mapping[str, float] = field(default_factory=dict)
    edges_given: np.ndarray | None = None
    reach_given: np.ndarray | None = None
    correction_passes: int = 0

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_edges(cls, tree: DraftTree, edges: ArrayLike, *, depth_limit: int,
                   method: str = "recorded", temperature: float = 0.0,
                   log_q: LogQ | None = None, cost_s: float | None = None) -> Round:
        r"""A round rebuilt from a deterministic tree and its recorded target edge
        probabilities: everything the exact analysis of rule ``follow`` needs.

        The edge probability of node ``v`` is :math:`p_{\mathrm{parent}(v)}(x_v)`, the
        target's probability of ``v``'s token after its parent's path (what
        :attr:`edges` holds and a trace records). From them alone come the reach
        probabilities, the exit decomposition, the coverage, exact ``follow``
        :math:`E[\tau] = 1 + C_p(T)` (``docs/theory/exit_law.md``) and, the tree being taken
        in node order, every smaller budget (:meth:`at_budget`, :attr:`tau_curve`: exact for
        a best-first tree such as DDTree's). Other rules read target rows and are refused;
        so is a sampled outcome (there is none).

        Parameters
        ----------
        tree : DraftTree
            A deterministic tree (no duplicate siblings).
        edges : array_like of float, shape (n+1,)
            ``edges[0] == 1`` (the root); ``edges[v]`` in ``[0, 1]``. Copied as float64.
        depth_limit : int
            The drafter's depth ``L`` (leaves there exit by ``depth_cap``), ``>=
            tree.max_depth``.
        method : str
            A label for the round (default ``"recorded"``).
        temperature : float
            The target temperature the edges were computed at (``>= 0``; a label: the edges
            already carry it).
        log_q : ndarray (L, V) or LazyLogMarginals, optional
            The drafter's marginals, for :attr:`surrogate` and :attr:`path_probabilities`
            (checked by :func:`treespec_sim.validation.check_log_q` unless lazy).
        cost_s : float, optional
            Modelled seconds of the round.

        Returns
        -------
        Round
            ``rule == "follow"``, ``rows is None``, ``outcome is None``.

        Raises
        ------
        ValueError
            Naming the argument: not a DraftTree, a tree with duplicate siblings, ``edges`` of
            the wrong shape, non-finite, outside ``[0, 1]`` or with ``edges[0] != 1``, a
            ``depth_limit`` below the tree's depth, a bad ``temperature``, or a ``log_q`` too
            shallow or too narrow for the tree.
        """
        if not isinstance(tree, DraftTree):
            raise ValueError(f"tree must be a DraftTree; got {type(tree).__name__}")
        if tree.has_duplicate_siblings:
            raise ValueError("tree has duplicate siblings (an i.i.d.-sampled tree); from_edges "
                             "needs a deterministic tree")
        arr, _ = as_float_array(edges, "edges")
        e = np.array(arr, dtype=np.float64)  # a private copy
        if e.shape != (tree.n_nodes,):
            raise ValueError(f"edges must have shape ({tree.n_nodes},) (one per node, root "
                             f"included); got {e.shape}")
        bad = np.flatnonzero(~np.isfinite(e) | (e < 0) | (e > 1))
        if bad.size:
            v = int(bad[0])
            raise ValueError(f"edges[{v}] = {e[v]!r} is not a probability in [0, 1]")
        if e[0] != 1.0:
            raise ValueError(f"edges[0] = {e[0]!r}: the root's edge probability must be 1")
        depth_limit = check_positive_int(depth_limit, "depth_limit")
        if depth_limit < tree.max_depth:
            raise ValueError(f"depth_limit = {depth_limit} is below the tree's depth "
                             f"{tree.max_depth}")
        t = check_temperature(temperature)
        if log_q is not None:
            shape = log_q.shape
            if not isinstance(log_q, LazyLogMarginals):
                log_q, _ = check_log_q(log_q)
                shape = log_q.shape
            if shape[0] < tree.max_depth:
                raise ValueError(f"log_q has {shape[0]} depths but the tree is "
                                 f"{tree.max_depth} deep")
            if tree.size and int(tree.token[1:].max()) >= shape[1]:
                v = int(np.argmax(tree.token[1:] >= shape[1])) + 1
                raise ValueError(f"tree.token[{v}] = {tree.token[v]} is outside log_q's "
                                 f"vocabulary (V = {shape[1]})")
        e.flags.writeable = False
        return cls(str(method), "follow", t, Draft(tree), log_q, None, depth_limit, None,
                   None if cost_s is None else float(cost_s), {}, e)

    def __repr__(self) -> str:
        """A line a person reads: the method, rule, temperature, tree, the marginals' shape
        (never their values), the exact and sampled tokens and the modelled cost."""
        shape = getattr(self.log_q, "shape", None)
        lq = "None" if self.log_q is None else f"{type(self.log_q).__name__}{tuple(shape or ())}"
        try:
            tau = f"{self.expected_tau:.4g}"
        except ValueError:  # no rows and no edges to compute it from
            tau = "?"
        sampled = "" if self.outcome is None else f", sampled_tau={self.outcome.tau}"
        cost = "" if self.cost_s is None else f", cost_s={self.cost_s:.4g}"
        return (f"Round(method={self.method!r}, rule={self.rule!r}, "
                f"temperature={self.temperature:g}, tree={self.tree!r}, log_q={lq}, "
                f"expected_tau={tau}{sampled}{cost})")

    # ------------------------------------------------------------------ the draft
    @property
    def tree(self) -> DraftTree:
        return self.draft.tree

    @property
    def proposal(self) -> np.ndarray | None:
        return self.draft.proposal

    @property
    def tree_size(self) -> int:
        return self.draft.tree.size

    @property
    def sampled_tau(self) -> int:
        """Tokens committed by the sampled outcome."""
        if self.outcome is None:
            raise ValueError("this round was run with sample=False: no sampled outcome")
        return self.outcome.tau

    # ------------------------------------------------------------------ exact facts
    @cached_property
    def edges(self) -> np.ndarray:
        """Target probability of each node's token given its parent's path (n+1,)."""
        if self.edges_given is not None:
            return self.edges_given
        return edge_probabilities(self.tree, self.rows)

    @cached_property
    def _reach_and_exit_law(self) -> tuple[np.ndarray, np.ndarray]:
        """``(reach, exit law)`` from :attr:`edges` (:func:`treespec_sim.exits.exit_from_edges`):
        :attr:`exits` and a deterministic rule's :attr:`expected_tau` both read them."""
        return exit_from_edges(self.tree, self.edges, self.reach_given)

    @cached_property
    def exits(self) -> ExitDecomposition:
        """Lost target mass by depth and cause (:func:`treespec_sim.exits.exit_decomposition`)."""
        reach, law = self._reach_and_exit_law
        return decompose_from_edges(self.tree, self.edges, depth_limit=self.depth_limit,
                                    reach=reach, law=law)

    @property
    def coverage(self) -> float:
        r""":math:`C_p(T) = \sum_{u \ne root} P(u)`."""
        return self.exits.coverage

    @cached_property
    def path_probabilities(self) -> np.ndarray:
        """The drafter's probability of each non-root node's path, in node order (n,)."""
        if self.log_q is None:
            raise ValueError("this round was built from recorded edges without log_q: it has "
                             "no surrogate (pass log_q= to Round.from_edges)")
        return path_probabilities(self.tree, self.log_q)

    @property
    def surrogate(self) -> float:
        r"""The drafter's own estimate :math:`1 + \sum_u q(u)`."""
        return float(1.0 + self.path_probabilities.sum())

    @cached_property
    def expected_tau(self) -> float:
        r"""Exact :math:`E[\tau]` of this tree under :attr:`rule` (over the verifier's coins)."""
        return self.expected_tau_under(self.rule)

    def expected_tau_under(self, rule: str) -> float:
        """Exact :math:`E[\\tau]` under another rule that is lossless for these draws."""
        cache = self.__dict__.setdefault("_tau_by_rule", {})
        if rule not in cache:
            self.draft.check_rule(rule, target_temperature=self.temperature)
            if self.rows is None:  # a prefix or recorded round: follow from its edges
                if rule != "follow":
                    raise ValueError(f"a round without target rows (a nested budget or "
                                     f"recorded edges) knows only rule 'follow'; got {rule!r}")
                cache[rule] = 1.0 + self.coverage
            elif self.proposal is None and getattr(RULES.get(rule), "length_from_exit_law",
                                                   None) is not None:
                # the rule's length is read off the exit law (verify.expected_length computes
                # the same floats from the same edges): shared with exits, computed once
                cache[rule] = RULES[rule].length_from_exit_law(self.tree,
                                                               self._reach_and_exit_law[1])
            else:
                cache[rule] = expected_length(self.tree, self.rows, rule=rule,
                                              proposal=self.proposal)
        return cache[rule]

    def lossy_facts(self, rule: str) -> LossyFacts:
        """What a *lossy* rule (``VerifierRule.lossless`` False) would do on this round's tree:
        its apparent exact :math:`E[\tau]` and its bias, never reported as lossless.

        The bias is the total-variation distance between the exact law of the round's first
        emitted token under ``rule`` and the target's root row (0 for a lossless rule). A
        lossy rule meant for deterministic trees that reads the drafter's rows
        (``"sibling-ratio"``) is told, at each node, the drafter's marginal at the next depth
        tempered to the round's temperature: the law a top-k tree's children are chosen from.
        """
        spec = get_rule(rule)
        if spec.lossless:
            raise ValueError(f"rule {rule!r} is lossless: use expected_tau_under(rule)")
        cache = self.__dict__.setdefault("_lossy_by_rule", {})
        if rule not in cache:
            if self.rows is None:
                raise ValueError("a round without target rows (a nested budget or recorded "
                                 "edges) cannot measure a lossy rule")
            if self.draft.scheme not in spec.schemes:
                raise ValueError(f"rule {rule!r} is meant for {', '.join(spec.schemes)} draws; "
                                 f"this round's are {self.draft.scheme!r}")
            proposal = self.proposal
            if spec.needs_proposal and proposal is None:
                proposal = self._marginal_rows()
            elif not spec.needs_proposal:
                proposal = None
            tau = expected_length(self.tree, self.rows, rule=rule, proposal=proposal)
            first = first_token_law(self.tree, self.rows, rule=rule, proposal=proposal)
            root = np.asarray(_row(self.rows, 0), dtype=np.float64)
            cache[rule] = LossyFacts(rule, float(tau), 0.5 * float(np.abs(first - root).sum()))
        return cache[rule]

    def _marginal_rows(self) -> ProposalRows:
        """The drafter's marginal at depth ``d + 1`` (tempered to the round's temperature) as
        the row of every node at depth ``d`` with children."""
        if self.log_q is None or self.temperature <= 0:
            raise ValueError("the drafter's rows need log_q and a temperature > 0")
        mp = marginal_proposal(self.log_q)
        tree = self.tree
        inner = np.zeros(tree.n_nodes, dtype=bool)
        inner[tree.parent[1:]] = True
        depth = int(np.shape(self.log_q)[0])
        used = sorted({int(d) for d in tree.depth[inner] if int(d) < depth})
        index = {d: i for i, d in enumerate(used)}
        row_of = np.array([index.get(int(d), -1) if inner[v] else -1
                           for v, d in enumerate(tree.depth)], dtype=np.intp)
        return ProposalRows(tuple(mp.law(d + 1, self.temperature) for d in used), row_of,
                            int(np.shape(self.log_q)[1]))

    # ------------------------------------------------------------------ nested budgets
    def at_budget(self, budget: int) -> Round:
        """The round of the same method at a smaller ``budget``, exactly, without rebuilding.

        Valid for nested methods (DDTree: the tree of budget ``B`` is the first ``B`` pops of
        the tree at any larger budget) and rule ``follow``; the target edge probabilities are
        a prefix of this round's, so exact :math:`E[\\tau]`, coverage and the exit law come out
        as if the tree had been built at ``budget``.
        """
        if self.draft.sampled:
            raise ValueError("at_budget needs a deterministic nested tree")
        tree = prefix_tree(self.tree, check_budget(budget))
        n = tree.n_nodes
        # a prefix's reach is this tree's, node for node (the same products down each path)
        return Round(self.method, self.rule, self.temperature, Draft(tree), self.log_q, None,
                     self.depth_limit, None, None, {}, self.edges[:n], self.exits_reach[:n])

    @property
    def tau_curve(self) -> np.ndarray:
        r"""Exact ``follow`` :math:`E[\tau]` at every budget ``0..n`` of a nested tree:
        :math:`1 + \sum_{i \le B} P(v_i)`."""
        reach = self.exits_reach
        return 1.0 + np.concatenate([[0.0], np.cumsum(reach[1:])])

    @property
    def surrogate_curve(self) -> np.ndarray:
        r"""The surrogate :math:`N(B) = 1 + \sum_{i \le B} q(v_i)` at every budget ``0..n``."""
        return 1.0 + np.concatenate([[0.0], np.cumsum(self.path_probabilities)])

    @cached_property
    def exits_reach(self) -> np.ndarray:
        """Reach probabilities :math:`P(v)`, float64 (n+1,)."""
        from_edges = np.ones(self.tree.n_nodes)
        for nodes in self.tree.levels[1:]:
            from_edges[nodes] = from_edges[self.tree.parent[nodes]] * self.edges[nodes]
        return from_edges


# ---------------------------------------------------------------------------- the round's spec
@dataclass(frozen=True)
class RoundSpec:
    """A round's settings, checked once (:meth:`of`); what :func:`run_round` runs.

    Attributes
    ----------
    method : Method
        The registry's entry (:func:`treespec_sim.methods.get_method` of ``name``).
    name : str
        The method's name as given (``"sampled-tree[2x4]"``).
    param : str
        The bracketed parameter of a parametrised name (``"2x4"``), else ``""``.
    budget : int or None
    rule : str
        The verification rule: the given one, checked lossless for the method, or the
        method's default at ``temperature``.
    temperature : float
    sample : bool
    nested : bool
    cost : LatencyModel or None
    options : dict
    """

    method: Method
    name: str
    param: str
    budget: int | None
    rule: str
    temperature: float
    sample: bool
    nested: bool
    cost: LatencyModel | None
    options: dict[str, Any]

    @classmethod
    def of(cls, *, method: str, budget: int | None = None, rule: str | None = None,
           temperature: float = 0.0, sample: bool = True,
           cost: LatencyModel | str | PurePath | None = None, nested: bool = False,
           options: Mapping[str, Any] | None = None) -> RoundSpec:
        """The checked spec of :func:`run_round`'s arguments (``ValueError`` naming the first
        bad one)."""
        t = check_temperature(temperature)
        if budget is not None:
            budget = check_budget(budget)
        sample, nested = check_flag(sample, "sample"), check_flag(nested, "nested")
        if options is not None and not isinstance(options, Mapping):
            raise ValueError(f"options must be a mapping (a dict); got {type(options).__name__}")
        if isinstance(cost, str | PurePath):
            cost = get_cost_model(cost)  # a preset name or a latency file; models pass as they are
        spec, param = get_method(method)
        rule = resolve_rule(spec, rule, t)
        if nested and not spec.nested:
            raise ValueError(f"nested=True needs a nested method (DDTree); {method!r} is not")
        if nested and rule != "follow":
            raise ValueError(f"nested=True computes rule 'follow' only; got {rule!r}")
        return cls(spec, method, param, budget, rule, t, sample, nested, cost, dict(options or {}))


# ---------------------------------------------------------------------------- capabilities
@runtime_checkable
class LazyDrafter(Protocol):
    """Ranked marginals that tree builders read without materialising ``(L, V)``."""

    def draft_lazy(self, ctx: Any) -> LazyLogMarginals: ...


@runtime_checkable
class ConditionalDrafter(Protocol):
    """A corrected proposal given a sampled parent (``*-corrected`` and Tsubame fills);
    ``conditions_on_path`` (optional, default ``False``): it reads the whole sampled path;
    ``correction_pass_cost`` (optional, default 0): drafter forwards per corrected level."""

    def draft_conditional(self, ctx: Any, depth: int, parent_token: int, **path
                          ) -> np.ndarray: ...


@runtime_checkable
class BatchedConditionalDrafter(Protocol):
    """A level's correction laws in one pass."""

    def draft_conditional_batch(self, ctx: Any, depth: int, parent_tokens: Sequence[int],
                                **paths) -> Any: ...


@runtime_checkable
class Committer(Protocol):
    """Commits an outcome with its accepted node ids (replaces ``advance``)."""

    def commit(self, ctx: Any, outcome: Outcome) -> Any: ...


@runtime_checkable
class ContextLengths(Protocol):
    """Where a latency model is read."""

    def context_length(self, ctx: Any) -> int: ...


@runtime_checkable
class RoundLimits(Protocol):
    """Refuses a round the backend cannot serve exactly."""

    def check_round(self, ctx: Any, *, method: str, budget: int | None,
                    temperature: float) -> None: ...


@runtime_checkable
class RecordedDrafts(Protocol):
    """A draft recorded for each context (a trace's sampled tree and its proposal laws): what
    the ``recorded`` method replays."""

    def recorded_draft(self, ctx: Any) -> Draft: ...


@runtime_checkable
class Clocked(Protocol):
    """Seconds, synchronised with the device."""

    def clock(self) -> float: ...


#: What each use of a backend needs from it (the :class:`Backend` protocol, by purpose).
_BACKEND_NEEDS = {
    "round": ("depth", "vocab_size", "draft", "target_oracle"),
    "fresh contexts": ("sample_context",),
}


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond :class:`Backend`, resolved once (:func:`capabilities`).

    Each callable attribute is the backend's bound method of the optional protocol of that
    name, or ``None`` where the backend has none; ``clock`` defaults to
    :func:`time.perf_counter`; ``present`` holds the :class:`Backend` members it has.
    """

    present: frozenset[str]
    draft_lazy: Callable[[Any], LazyLogMarginals] | None
    draft_conditional: Callable[..., np.ndarray] | None
    draft_conditional_batch: Callable[..., Any] | None
    conditions_on_path: bool
    correction_pass_cost: float
    commit: Callable[[Any, Outcome], Any] | None
    context_length: Callable[[Any], int] | None
    check_round: Callable[..., None] | None
    recorded_draft: Callable[[Any], Draft] | None
    clock: Callable[[], float]


def capabilities(backend: Backend) -> Capabilities:
    """The one place the round loop asks a backend what it has (the optional protocols
    :class:`LazyDrafter`, :class:`ConditionalDrafter`, :class:`BatchedConditionalDrafter`,
    :class:`Committer`, :class:`ContextLengths`, :class:`RoundLimits`, :class:`RecordedDrafts`,
    :class:`Clocked`)."""
    names = {n for needs in _BACKEND_NEEDS.values() for n in needs} | {"advance"}
    return Capabilities(
        present=frozenset(n for n in names if hasattr(backend, n)),
        draft_lazy=getattr(backend, "draft_lazy", None),
        draft_conditional=getattr(backend, "draft_conditional", None),
        draft_conditional_batch=getattr(backend, "draft_conditional_batch", None),
        conditions_on_path=bool(getattr(backend, "conditions_on_path", False)),
        correction_pass_cost=getattr(backend, "correction_pass_cost", 0.0),
        commit=getattr(backend, "commit", None),
        context_length=getattr(backend, "context_length", None),
        check_round=getattr(backend, "check_round", None),
        recorded_draft=getattr(backend, "recorded_draft", None),
        clock=getattr(backend, "clock", time.perf_counter),
    )


def check_backend(backend, *purposes: str, caps: Capabilities | None = None) -> Capabilities:
    """Raise ``ValueError`` naming what ``backend`` lacks for ``purposes`` (keys of the
    protocol table, or ``"commit"``: ``commit(ctx, outcome)`` or ``advance(ctx, tokens)``);
    returns its :class:`Capabilities` (``caps``, where given, already resolved)."""
    caps = capabilities(backend) if caps is None else caps
    missing = [name for p in purposes if p != "commit" for name in _BACKEND_NEEDS[p]
               if name not in caps.present]
    if "commit" in purposes and caps.commit is None and "advance" not in caps.present:
        missing.append("advance(ctx, tokens) (or commit(ctx, outcome))")
    if missing:
        raise ValueError(f"backend {type(backend).__name__} lacks {', '.join(missing)}, which "
                         f"{' and '.join(purposes)} need; see treespec_sim.engine.Backend and "
                         "docs/usage.md, 'Bring your own drafter and target'")
    return caps


def _check_width(what: str, shape, backend) -> None:
    """The vocabulary width of an array the backend returned against its ``vocab_size``."""
    if shape is not None and len(shape) >= 1 and int(shape[-1]) != int(backend.vocab_size):
        raise ValueError(f"backend {type(backend).__name__} declares vocab_size = "
                         f"{backend.vocab_size} but its {what} has V = {int(shape[-1])} "
                         f"(shape {tuple(shape)})")


# ---------------------------------------------------------------------------- the round
def run_round(backend: Backend, ctx: Any, *, method: str,
              budget: int | None = None, rule: str | None = None, temperature: float = 0.0,
              rng: np.random.Generator, sample: bool = True,
              cost: LatencyModel | str | PurePath | None = None, nested: bool = False,
              options: Mapping[str, Any] | None = None) -> Round:
    """Draft, build, (optionally) verify once: THE round of treespec.

    Parameters
    ----------
    backend : Backend
        A synthetic :class:`~treespec_sim.synth.World`, a real-model backend, or your own.
    ctx
        The backend's context (from ``sample_context``, ``advance`` or ``commit``).
    method : str
        A registered name (:data:`treespec_sim.methods.METHODS`, e.g. ``"ddtree"``,
        ``"tsubame"``, ``"sampled-tree[2x4]"``); a builder of your own is registered first
        (:func:`treespec_sim.methods.register`).
    budget : int, optional
        Tree nodes, root excluded (the maximum for cost-aware methods; ignored by chains).
    rule : str, optional
        Verification rule; default the method's first lossless rule at ``temperature``
        (:func:`treespec_sim.methods.resolve_rule`). A rule that is not lossless for the
        method's draws is refused.
    temperature : float
        The target's sampling temperature (``0`` is greedy).
    rng : numpy.random.Generator
        Draws of sampled methods, then the verifier's coins.
    sample : bool
        Sample the outcome (needed to commit and continue); ``False`` computes exact facts only
        and leaves ``rng`` untouched by the verifier.
    cost : latency model, preset name or latency file, optional
        Read by cost-aware methods and for :attr:`Round.cost_s`
        (:func:`treespec_sim.cost.get_cost_model`).
    nested : bool
        Build a nested method's tree once at ``budget`` so :meth:`Round.at_budget`,
        :attr:`Round.tau_curve` and :attr:`Round.surrogate_curve` give every smaller budget
        exactly (rule ``follow``; the method must be nested).
    options : mapping, optional
        Method-specific extras (``{"lam": ...}`` for ``longrun``).

    Returns
    -------
    Round
    """
    check_rng(rng)
    caps = check_backend(backend, "round")
    spec = RoundSpec.of(method=method, budget=budget, rule=rule, temperature=temperature,
                        sample=sample, cost=cost, nested=nested, options=options)
    return run_spec(backend, ctx, spec, rng=rng, caps=caps)


def run_spec(backend: Backend, ctx: Any, spec: RoundSpec, *, rng: np.random.Generator,
             caps: Capabilities | None = None) -> Round:
    """:func:`run_round` of a checked :class:`RoundSpec`: resolve, draft, build, verify,
    price."""
    caps = check_backend(backend, "round", caps=caps)
    if spec.method.needs_conditional and caps.draft_conditional is None:
        raise ValueError(no_conditional_message(spec.name))
    if spec.method.needs_recorded and caps.recorded_draft is None:
        raise ValueError(no_recorded_message(spec.name))
    if caps.check_round is not None:  # a backend's own limits (a trace's data)
        caps.check_round(ctx, method=spec.name, budget=spec.budget, temperature=spec.temperature)
    clock, timings = caps.clock, {}
    t0 = clock()
    log_q = caps.draft_lazy(ctx) if caps.draft_lazy is not None else backend.draft(ctx)
    t1 = clock()
    _check_width("draft (log_q)", getattr(log_q, "shape", None), backend)
    timings["draft"] = t1 - t0
    ell = caps.context_length(ctx) if caps.context_length is not None else None
    corrected: set[int] = set()  # the depths >= 2 whose laws came from a correction
    draft = _build(spec, caps, ctx, log_q, ell, corrected, rng)
    t2 = clock()
    timings["build"] = t2 - t1
    rows = backend.target_oracle(ctx, draft.tree, spec.temperature)
    t3 = clock()
    _check_width("target_oracle rows", getattr(rows, "shape", None), backend)
    timings["verify"] = t3 - t2
    outcome = None
    if spec.sample:
        outcome = verify(draft.tree, rows, rule=spec.rule, rng=rng, proposal=draft.proposal)
        timings["decide"] = clock() - t3
    cost_s = _price(spec, caps, draft, ell, len(corrected))
    return Round(spec.name, spec.rule, spec.temperature, draft, log_q, rows, int(backend.depth),
                 outcome, cost_s, timings, correction_passes=len(corrected))


def _build(spec: RoundSpec, caps: Capabilities, ctx: Any, log_q, ell: int | None,
           corrected: set[int], rng: np.random.Generator) -> Draft:
    """The method's draft of ``log_q`` (its rule checked); ``corrected`` gains the depths whose
    laws a correction pass gave."""
    root_token = int(getattr(ctx, "last_token", -1))
    recorded = caps.recorded_draft
    req = DraftRequest(log_q=log_q, budget=spec.budget, temperature=spec.temperature,
                       rule=spec.rule, root_token=root_token, rng=rng,
                       conditional=_conditional_proposal(caps, ctx, corrected),
                       cost=spec.cost, context_length=ell, param=spec.param,
                       options=dict(spec.options),
                       recorded=None if recorded is None else (lambda: recorded(ctx)))
    draft = spec.method.build(req)
    draft.check_rule(spec.rule, target_temperature=spec.temperature)
    return draft


def _conditional_proposal(caps: Capabilities, ctx: Any, corrected: set[int]
                          ) -> ConditionalProposal | None:
    """The backend's correction at ``ctx`` as a sampled builder's proposal (``None`` without
    one); each depth >= 2 it is asked at is added to ``corrected``."""
    draft_conditional, batch = caps.draft_conditional, caps.draft_conditional_batch
    if draft_conditional is None:
        return None

    def law(depth: int, parent_token: int, **path) -> np.ndarray:
        if depth >= 2:
            corrected.add(int(depth))
        return draft_conditional(ctx, depth, parent_token, **path)

    prefetch = None
    if batch is not None:
        # fill_tree asks for a level's laws at once (one batched drafter pass)
        def prefetch(depth: int, parent_tokens, **paths) -> None:
            if depth >= 2:
                corrected.add(int(depth))
            batch(ctx, depth, parent_tokens, **paths)

    # a backend whose correction reads the whole sampled path (a real drafter's second pass
    # with the path in the block) is asked with it (ProposalFn)
    return ConditionalProposal(law, conditions_on_path=caps.conditions_on_path,
                               prefetch=prefetch)


def _price(spec: RoundSpec, caps: Capabilities, draft: Draft, ell: int | None,
           correction_passes: int) -> float | None:
    """The round's modelled seconds under ``spec.cost`` (``None`` without a model)."""
    if spec.cost is None:
        return None
    length = DEFAULT_CONTEXT_LENGTH if ell is None else ell
    # a corrected level costs what the backend says a correction pass costs, in drafter
    # forwards (a real drafter: one more pass over the block, the level's parents batched;
    # the synthetic world's head: nothing modelled) -- docs/theory/tsubame.md, section 6
    per_pass = float(caps.correction_pass_cost)
    return float(round_time(spec.cost, draft.tree.size, length)
                 + per_pass * correction_passes * spec.cost.draft_cost(length))


def commit(backend: Backend, ctx: Any, rnd: Round) -> Any:
    """The context after ``rnd``'s sampled outcome (``backend.commit`` or ``advance``)."""
    if rnd.outcome is None:
        raise ValueError("commit needs a round run with sample=True")
    caps = check_backend(backend, "commit")
    t0 = caps.clock()
    if caps.commit is not None:
        nxt = caps.commit(ctx, rnd.outcome)
    else:
        nxt = backend.advance(ctx, rnd.outcome.tokens)
    rnd.timings["commit"] = caps.clock() - t0  # type: ignore[index]
    return nxt


# ---------------------------------------------------------------------------- records
@dataclass(frozen=True)
class RoundRecord:
    """The small summary of a round kept over many rounds (a :class:`Round` holds arrays).

    Attributes
    ----------
    tree_size, expected_tau, sampled_tau, coverage, surrogate : number
    exit_by_depth, exit_by_cause : tuple of float
        Exit mass per depth ``0..L`` and per cause (:data:`~treespec_sim.exits.EXIT_CAUSES`).
    cost_s : float or None
    """

    tree_size: int
    expected_tau: float
    sampled_tau: int | None
    coverage: float
    surrogate: float
    exit_by_depth: tuple[float, ...]
    exit_by_cause: tuple[float, ...]
    cost_s: float | None = None

    @classmethod
    def of(cls, rnd: Round) -> RoundRecord:
        decomp = rnd.exits
        return cls(
            tree_size=rnd.tree_size,
            expected_tau=rnd.expected_tau,
            sampled_tau=None if rnd.outcome is None else rnd.outcome.tau,
            coverage=decomp.coverage,
            surrogate=rnd.surrogate,
            exit_by_depth=tuple(float(x) for x in decomp.by_depth),
            exit_by_cause=tuple(float(x) for x in decomp.by_depth_cause.sum(axis=0)),
            cost_s=rnd.cost_s,
        )


def run_rounds(backend: Backend, *, rng: np.random.Generator, rounds: int | None = None,
               contexts: Sequence | None = None, rounds_per_sequence: int = 1,
               context_rng: np.random.Generator | None = None,
               record: Callable[[Round], Any] = RoundRecord.of, **round_args
               ) -> list[list[Any]]:
    """Rounds grouped into sequences; ``record(round)`` is kept for each.

    Either ``rounds`` rounds from fresh contexts (``backend.sample_context(context_rng or
    rng)``), in decoded sequences of ``rounds_per_sequence`` (each round commits its sampled
    outcome; ``1`` means every round starts from a fresh context), or one round on each of the
    caller's ``contexts``. Sequences are the unit of independence for intervals.

    ``round_args`` go to :func:`run_round` (``method``, ``budget``, ``rule``, ``temperature``,
    ``sample``, ``cost``, ``nested``, ``options``).
    """
    if (rounds is None) == (contexts is None):
        raise ValueError("give exactly one of rounds= (fresh contexts) or contexts=")
    check_backend(backend, "round")
    if contexts is not None:
        return [[record(run_round(backend, c, rng=rng, **round_args))] for c in contexts]
    rounds = check_positive_int(rounds, "rounds")
    rounds_per_sequence = check_positive_int(rounds_per_sequence, "rounds_per_sequence")
    ctx_rng = rng if context_rng is None else context_rng
    decoded = rounds_per_sequence > 1
    if decoded and not round_args.get("sample", True):
        raise ValueError("decoded sequences (rounds_per_sequence > 1) need sample=True")
    check_backend(backend, "fresh contexts", *(("commit",) if decoded else ()))
    sequences: list[list[Any]] = []
    done = 0
    while done < rounds:
        ctx = backend.sample_context(ctx_rng)
        seq: list[Any] = []
        for i in range(min(rounds_per_sequence, rounds - done)):
            rnd = run_round(backend, ctx, rng=rng, **round_args)
            seq.append(record(rnd))
            if i + 1 < rounds_per_sequence and done + len(seq) < rounds:
                ctx = commit(backend, ctx, rnd)
        sequences.append(seq)
        done += len(seq)
    return sequences


@dataclass(frozen=True)
class DecodeResult:
    """A decoded sequence: emitted tokens (truncated to the request) and per-round records."""

    tokens: np.ndarray
    records: tuple[Any, ...]


def decode(backend: Backend, ctx: Any, *, n_tokens: int, rng: np.random.Generator,
           record: Callable[[Round], Any] = RoundRecord.of,
           on_round: Callable[[Round, Any], None] | None = None,
           **round_args) -> DecodeResult:
    """Speculatively decode ``n_tokens`` tokens from ``ctx`` (the last round is truncated).

    Every round commits its accepted path and bonus token; the next round drafts from the new
    context. The emitted tokens follow the target's law exactly when the rule is lossless for
    the method's draws. ``on_round(round, ctx)``, if given, sees each round before its commit.
    """
    n_tokens = check_nonnegative_int(n_tokens, "n_tokens")
    check_backend(backend, "round", "commit")
    out: list[int] = []
    records: list[Any] = []
    while len(out) < n_tokens:
        rnd = run_round(backend, ctx, rng=rng, sample=True, **round_args)
        if on_round is not None:
            on_round(rnd, ctx)
        out.extend(rnd.outcome.tokens)
        ctx = commit(backend, ctx, rnd)
        records.append(record(rnd))
    return DecodeResult(np.asarray(out[:n_tokens], dtype=np.int64), tuple(records))


# ---------------------------------------------------------------------------- summary
@dataclass(frozen=True)
class RoundsSummary:
    """Means over rounds, with confidence intervals over sequences (:mod:`treespec_sim.stats`)."""

    rounds: int
    sequences: int
    expected_tau: MeanCI
    sampled_tau: MeanCI | None
    tree_size: float
    coverage: float
    surrogate: float
    exit_by_cause: dict[str, float]
    exit_by_depth: tuple[float, ...]


def summarize(sequences: list[list[RoundRecord]], *, level: float = 0.95) -> RoundsSummary:
    """Aggregate :func:`run_rounds` records; intervals treat sequences as independent."""
    if not sequences or not all(sequences):
        raise ValueError("sequences must be a non-empty list of non-empty record lists")
    flat = [r for seq in sequences for r in seq]

    def batches(name: str) -> list[np.ndarray]:
        return [np.array([getattr(r, name) for r in seq], dtype=np.float64)
                for seq in sequences]

    sampled = None
    if all(r.sampled_tau is not None for r in flat):
        sampled = mean_ci(batches("sampled_tau"), level=level)
    by_cause = np.mean([r.exit_by_cause for r in flat], axis=0)
    by_depth = np.mean([r.exit_by_depth for r in flat], axis=0)
    return RoundsSummary(
        rounds=len(flat),
        sequences=len(sequences),
        expected_tau=mean_ci(batches("expected_tau"), level=level),
        sampled_tau=sampled,
        tree_size=float(np.mean([r.tree_size for r in flat])),
        coverage=float(np.mean([r.coverage for r in flat])),
        surrogate=float(np.mean([r.surrogate for r in flat])),
        exit_by_cause={c: float(x) for c, x in zip(EXIT_CAUSES, by_cause, strict=True)},
        exit_by_depth=tuple(float(x) for x in by_depth),
    )
