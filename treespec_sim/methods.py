r"""The one method registry: every drafting method, its builder, scheme and lossless rules.

A *method* turns what the drafter gives one round (its per-depth log-marginals ``log_q``, and,
for corrected proposals, a conditional law given a sampled parent) into a
:class:`~treespec_sim.policies.draft.Draft`. The registry says, for each method, which builder
makes the tree, how its tokens are drawn, which verification rules are lossless for it, whether
it reads the budget, and whether its trees are nested across budgets (so one tree at the largest
budget gives every smaller budget exactly). :func:`treespec_sim.engine.run_round`, the sweep and
the real-model decoder read only this table.

======================================  ==================  ===================================
method                                  tokens              lossless rules (T > 0)
======================================  ==================  ===================================
``chain``                               argmax per depth    follow, tev, sample-match
``chain-prefix``                        argmax, B tokens    follow, tev, sample-match
``ddtree``                              best-first top-B    follow, tev, sample-match
``dynamic``                             EAGLE-2-like beam   follow, tev, sample-match
``superset``                            DDTree+chain+dyn.   follow, tev, sample-match
``caddtree`` / ``exhaustive``           DDTree prefix       follow, tev, sample-match
``longrun``                             DDTree prefix       follow, tev, sample-match
``sampled-chain``                       i.i.d. marginal     rrs, block
``sampled-chain-corrected``             i.i.d. correction   rrs, block
``tsubame``                             DDTree shape, fill  rrsw, rrs, traversal, univer[-*]
``tsubame-rrs``                         i.i.d. fill         rrs
``tsubame-rrsw`` / ``-univer``          fill w/o replacem.  rrsw, traversal, univer[-*]
``tsubame-rrsw-tempered-plan``          tempered plan       rrsw, traversal, univer[-*]
``tsubame-rrsw-marginal``               marginal fill       rrsw, traversal, univer[-*]
``sampled-ddtree``                      DDTree shape, fill  rrsw, rrs, traversal, univer[-*]
``sampled-tree[WxD]``                   W-ary, depth D      rrsw, traversal, univer[-*]
``greedy-tree[WxD]``                    top W-1 + 1 draw    univer-fixed
``ar-chain``                            argmax conditional  follow, tev
``ar-ddtree``                           best-first, cond.   follow, tev
``ar-eagle[SxK]`` / ``eagle[SxK]``      SGLang's beam       follow, tev
``recorded``                            the backend's       the recorded draws' rules
======================================  ==================  ===================================

``ar-*``: an *autoregressive* drafter's trees, from the backend's conditional proposal given
the drafted parent (``draft_conditional``; :mod:`treespec_sim.policies.conditional`):
``ar-chain`` its greedy chain of ``budget`` tokens (default ``L``), ``ar-ddtree`` DDTree's
best-first rule on its path scores, ``ar-eagle[SxK]`` SGLang's EAGLE beam (``S`` steps, top
``K``, ``budget = num_draft_tokens - 1``); ``eagle[SxK]`` the same beam on a block-diffusion
drafter's marginals.

``chain-prefix``: the argmax chain's first ``budget`` tokens (``chain`` always drafts ``L``);
``superset``: the deterministic superset tree a trace records (DDTree at ``budget``, then the
argmax chain's and the dynamic tree's nodes DDTree left out: ``docs/traces.md``);
``tsubame-rrsw-marginal``: Tsubame's plan filled from the marginals instead of the correction;
``recorded``: the draft the backend recorded for the context (a trace's sampled tree,
:class:`treespec_sim.engine.RecordedDrafts`), verified by any rule lossless for how it was
drawn.

The sampled chains and Tsubame take ``options={"proposal_temperature": T_q}``: their draws
come from the proposal tempered to ``T_q`` instead of the target's ``T``
(``docs/theory/tsubame.md`` §5; the verifier is told the law they were drawn from).

``univer[-*]``: ``univer`` (safe per-node step choice), ``univer-guided``, ``univer-fixed``
(:mod:`treespec_sim.verify.univer`, ``docs/theory/univer.md``).

At ``T = 0`` every sampled method takes the top-``k`` tokens of its proposals (the ``T -> 0``
limit of its draws) and is verified with ``follow`` or ``tev``.

To add a method: write a builder ``build(request: DraftRequest) -> Draft`` and
:func:`register` a :class:`Method` (:func:`registered`: for a ``with`` block only); every round
runs a registered method by name.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .policies import (
    caddtree,
    chain,
    conditional_tree,
    ddtree,
    dynamic_tree,
    exhaustive_budget_tree,
    longrun_tree,
    superset,
    tsubame,
)
from .policies.draft import Draft
from .policies.sampled import (
    ProposalFn,
    fill_shape,
    fill_tree,
    k_ary_shape,
    marginal_proposal,
    sampled_chain,
)
from .tree import DraftTree
from .validation import check_budget, check_temperature
from .verify import MATCHING_RULES, RULES, SCHEME_FOR_RULE, VerifierRule, on_register

__all__ = ["METHODS", "SCHEME_FOR_RULE", "DraftRequest", "Method", "RuleSource",
           "get_method", "lossless_rules", "method_names", "no_conditional_message",
           "no_recorded_message", "register", "registered", "resolve_rule", "rules_for",
           "uses_budget"]



def rules_for(scheme: str, *, default: str | None = None, chains: bool = False
              ) -> tuple[str, ...]:
    """The lossless rules exact for ``scheme``'s draws, read off the one rule table
    (:data:`treespec_sim.verify.RULES`) in its order, with ``default`` moved first.

    ``scheme`` is a drawing scheme (:data:`~treespec_sim.verify.SCHEMES`) or ``"by-rule"``
    (every sampled-tree rule: the builder draws with :data:`SCHEME_FOR_RULE` of the rule).
    Rules exact for chains only (``"block"``) are included only with ``chains=True`` (a
    method that drafts chains).
    """
    rules = tuple(SCHEME_FOR_RULE) if scheme == "by-rule" else MATCHING_RULES.get(scheme, ())
    if not chains:
        rules = tuple(r for r in rules if not RULES[r].chains_only)
    if not rules or (default is not None and default not in rules):
        raise ValueError(f"no rule {default!r} for scheme {scheme!r}; rules for it: "
                         f"{', '.join(rules) or 'none'}")
    return rules if default is None else (default, *(r for r in rules if r != default))


@dataclass(frozen=True)
class RuleSource:
    """Where a method's lossless rules are read from: :func:`rules_for` of these arguments,
    re-read whenever a rule is registered (:func:`treespec_sim.verify.register_rule`)."""

    scheme: str
    default: str | None = None
    chains: bool = False

    def rules(self) -> tuple[str, ...]:
        return rules_for(self.scheme, default=self.default, chains=self.chains)


@dataclass(frozen=True)
class DraftRequest:
    """Everything a builder may read in one round (draft-side information only).

    Attributes
    ----------
    log_q : ndarray (L, V) or LazyLogMarginals
        The drafter's log-marginals at depths ``1..L``.
    budget : int or None
        Tree nodes (root excluded); the maximum for cost-aware methods.
    temperature : float
        The target's sampling temperature (sampled methods temper their proposals to it).
    rule : str
        The verification rule the tree will be verified with (sampled methods pick their
        drawing scheme from it).
    root_token : int
    rng : numpy.random.Generator
        The round's randomness for the draws.
    conditional : ProposalFn or None
        ``conditional(depth, parent_token) -> (V,)``: the backend's corrected proposal, or None
        where the backend has none (methods that need one are then refused, never run on the
        marginals under their name).
    cost : latency model or None
        ``draft_cost(ell)``/``verify_cost(n, ell)`` for cost-aware methods.
    context_length : float or None
        Where the cost model is read.
    param : str
        The bracketed parameter of a parametrised name (``"2x4"`` in ``sampled-tree[2x4]``).
    options : dict
        Method-specific extras (``lam`` for ``longrun``; ``proposal_temperature`` for the
        sampled chains and Tsubame).
    recorded : callable or None
        ``recorded() -> Draft``: the draft the backend recorded for this context
        (:class:`treespec_sim.engine.RecordedDrafts`), or None where it records none.
    """

    log_q: Any
    budget: int | None
    temperature: float
    rule: str
    root_token: int
    rng: np.random.Generator
    conditional: ProposalFn | None = None
    cost: Any = None
    context_length: float | None = None
    param: str = ""
    options: dict = field(default_factory=dict)
    recorded: Callable[[], Draft] | None = None

    def costs(self) -> tuple[float, Callable]:
        """``(draft seconds, n -> verify seconds)`` at :attr:`context_length`."""
        if self.cost is None:
            raise ValueError("this method needs a latency model: pass cost= (a preset name, a "
                             "latency file or a model with draft_cost/verify_cost)")
        ell = self.context_length
        if ell is None:
            return float(self.cost.draft_cost()), self.cost.verify_cost
        return float(self.cost.draft_cost(ell)), (lambda n: self.cost.verify_cost(n, ell))


@dataclass(frozen=True)
class Method:
    """One registered method.

    Attributes
    ----------
    name : str
    build : callable
        ``build(request: DraftRequest) -> Draft``.
    rules : tuple of str or RuleSource
        Rules that are lossless for the method's draws at ``T > 0``; the first is the default.
        A :class:`RuleSource` is read off the rule table (kept in :attr:`rules_from`, and read
        again when a rule is registered); ``rules`` is then the tuple it gives.
    scheme : str
        ``"deterministic"``, a sampling scheme, or ``"by-rule"`` (:data:`SCHEME_FOR_RULE`).
    uses_budget : bool
        Whether ``budget`` sets the tree's size (the chain always has ``L`` nodes).
    nested : bool
        Trees at smaller budgets are prefixes of the tree at a larger one (DDTree's pop order).
    needs_cost : bool
        The builder reads a latency model.
    parametrised : bool
        The name takes a bracketed parameter (``sampled-tree[2x4]``).
    needs_conditional : bool
        Tokens are drawn from the backend's conditional proposal given the sampled parent
        (``draft_conditional``); a backend without one is refused.
    needs_positive_temperature : bool
        The method only samples (no ``T = 0`` limit is defined for it).
    needs_recorded : bool
        The method replays the backend's recorded draft (``recorded_draft``); a backend
        without one is refused.
    description : str
    """

    name: str
    build: Callable[[DraftRequest], Draft]
    rules: tuple[str, ...] | RuleSource
    scheme: str = "deterministic"
    uses_budget: bool = True
    nested: bool = False
    needs_cost: bool = False
    parametrised: bool = False
    needs_conditional: bool = False
    needs_positive_temperature: bool = False
    needs_recorded: bool = False
    description: str = ""
    rules_from: RuleSource | None = None

    def __post_init__(self) -> None:
        if isinstance(self.rules, RuleSource):
            object.__setattr__(self, "rules_from", self.rules)
            object.__setattr__(self, "rules", self.rules.rules())

    @property
    def sampled(self) -> bool:
        return self.scheme != "deterministic"

    def lossless_rules(self, temperature: float) -> tuple[str, ...]:
        """Rules lossless for this method's draws at ``temperature`` (first = default); ``()``
        where the method cannot draft at that temperature. The one source of truth that
        :func:`resolve_rule`, the builders (via :meth:`Draft.check_rule`) and the sweep read."""
        if temperature == 0.0 and self.sampled:
            # T -> 0 limit of every sampled draw: the top-k tokens, a deterministic tree
            return () if self.needs_positive_temperature else rules_for("deterministic")
        return self.rules


# ----------------------------------------------------------------------------- builders
def _deterministic(tree: DraftTree) -> Draft:
    return Draft(tree)


def _need_budget(req: DraftRequest, name: str) -> int:
    if req.budget is None:
        raise ValueError(f"method {name!r} needs a budget (tree nodes, root excluded)")
    return check_budget(req.budget)


def _build_chain(req: DraftRequest) -> Draft:
    # The DFlash chain always spends L nodes.
    return _deterministic(chain(req.log_q, root_token=req.root_token))


def _build_chain_prefix(req: DraftRequest) -> Draft:
    return _deterministic(chain(req.log_q, req.budget, root_token=req.root_token))


def _build_superset(req: DraftRequest) -> Draft:
    return _deterministic(superset(req.log_q, _need_budget(req, "superset"),
                                   root_token=req.root_token))


def _build_recorded(req: DraftRequest) -> Draft:
    if req.recorded is None:
        raise ValueError(no_recorded_message("recorded"))
    return req.recorded()


def _build_ddtree(req: DraftRequest) -> Draft:
    return _deterministic(ddtree(req.log_q, _need_budget(req, "ddtree"),
                                 root_token=req.root_token))


def _conditional(req: DraftRequest, name: str) -> ProposalFn:
    if req.conditional is None:
        raise ValueError(no_conditional_message(name))
    return req.conditional


def _depth(req: DraftRequest) -> int:
    return int(np.shape(req.log_q)[0])


def _build_ar_chain(req: DraftRequest) -> Draft:
    n = _depth(req) if req.budget is None else min(int(req.budget), _depth(req))
    return _deterministic(conditional_tree(_conditional(req, "ar-chain"), n, n,
                                           root_token=req.root_token, top_k=1))


def _build_ar_ddtree(req: DraftRequest) -> Draft:
    return _deterministic(conditional_tree(_conditional(req, "ar-ddtree"), _depth(req),
                                           _need_budget(req, "ar-ddtree"),
                                           root_token=req.root_token))


def _build_eagle(conditional: bool) -> Callable[[DraftRequest], Draft]:
    name = "ar-eagle" if conditional else "eagle"

    def build(req: DraftRequest) -> Draft:
        steps, k = _shape_param(req.param, name)
        if steps > _depth(req):
            raise ValueError(f"method {name}[{req.param}]: {steps} steps, more than the "
                             f"drafter's L = {_depth(req)}")
        proposal = _conditional(req, name) if conditional else marginal_proposal(req.log_q)
        return _deterministic(conditional_tree(proposal, steps, _need_budget(req, name),
                                               root_token=req.root_token, top_k=k))
    return build


def _build_dynamic(req: DraftRequest) -> Draft:
    return _deterministic(dynamic_tree(req.log_q, _need_budget(req, "dynamic"),
                                       root_token=req.root_token))


def _cost_aware(builder: Callable, name: str) -> Callable[[DraftRequest], Draft]:
    def build(req: DraftRequest) -> Draft:
        cd, cv = req.costs()
        extra = {"lam": req.options["lam"]} if name == "longrun" else {}
        if name == "longrun" and extra["lam"] is None:
            raise ValueError("method 'longrun' needs options={'lam': throughput} (tokens/s)")
        return _deterministic(builder(req.log_q, draft_cost=cd, verify_cost=cv,
                                      max_budget=_need_budget(req, name),
                                      root_token=req.root_token, **extra))
    return build


def _proposal_fn(req: DraftRequest, corrected: bool, name: str) -> ProposalFn:
    if not corrected:
        return marginal_proposal(req.log_q)
    if req.conditional is None:
        # Never fall back to the marginals under a name that says "corrected"
        raise ValueError(no_conditional_message(name))
    return req.conditional


def no_conditional_message(name: str) -> str:
    """Why ``name`` is refused on a backend without ``draft_conditional``."""
    return (f"method {name!r} draws its tokens from the drafter's conditional proposal given "
            "the sampled parent, and this backend has no draft_conditional(ctx, depth, "
            "parent_token); use a marginal method instead ('sampled-chain', 'sampled-ddtree': "
            "DDTree's shape filled from the marginals), or give the backend a "
            "draft_conditional")


def no_recorded_message(name: str) -> str:
    """Why ``name`` is refused on a backend without ``recorded_draft``."""
    return (f"method {name!r} replays the draft the backend recorded for the context, and this "
            "backend records none (no recorded_draft(ctx)); a trace recorded with "
            "--sampled-tree SPEC has one")


def _build_sampled_chain(corrected: bool) -> Callable[[DraftRequest], Draft]:
    def build(req: DraftRequest) -> Draft:
        name = "sampled-chain-corrected" if corrected else "sampled-chain"
        return sampled_chain(_proposal_fn(req, corrected, name), int(np.shape(req.log_q)[0]),
                             rng=req.rng, temperature=req.temperature, root_token=req.root_token,
                             proposal_temperature=req.options.get("proposal_temperature"))
    return build


def _build_tsubame(planner: str, fixed_scheme: str | None, name: str, *, corrected: bool = True
                   ) -> Callable[[DraftRequest], Draft]:
    def build(req: DraftRequest) -> Draft:
        scheme = fixed_scheme or (SCHEME_FOR_RULE[req.rule] if req.temperature > 0
                                  else "without_replacement")
        return tsubame(req.log_q, _need_budget(req, "tsubame"), rng=req.rng, scheme=scheme,
                       temperature=req.temperature, proposal=_proposal_fn(req, corrected, name),
                       root_token=req.root_token, planner=planner,
                       proposal_temperature=req.options.get("proposal_temperature"))
    return build


def _tempered_rows(log_q, temperature: float) -> np.ndarray:
    """Per-depth marginals tempered to ``temperature`` (float64 (L, V))."""
    lp = np.asarray(log_q, dtype=np.float64) / temperature
    q = np.exp(lp - lp.max(axis=1, keepdims=True))
    return q / q.sum(axis=1, keepdims=True)


def _fill_from_marginals(shape: DraftTree, req: DraftRequest, scheme: str) -> Draft:
    """Fill ``shape`` per depth from the tempered marginals (top-k at ``T = 0``)."""
    if req.temperature == 0.0:
        return fill_tree(shape, marginal_proposal(req.log_q), scheme="without_replacement",
                         rng=req.rng, temperature=0.0)  # the top-k fill of the marginals
    tree, proposal = fill_shape(shape, _tempered_rows(req.log_q, req.temperature),
                                scheme=scheme, rng=req.rng)
    return Draft(tree, proposal, scheme, float(req.temperature))


def _build_sampled_ddtree(req: DraftRequest) -> Draft:
    shape = ddtree(req.log_q, _need_budget(req, "sampled-ddtree"), root_token=req.root_token)
    return _fill_from_marginals(shape, req, SCHEME_FOR_RULE.get(req.rule, "without_replacement"))


def _shape_param(param: str, name: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)x(\d+)", param)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise ValueError(f"method {name}[...] needs WIDTHxDEPTH, e.g. {name}[2x4]; "
                         f"got {param!r}")
    return int(m.group(1)), int(m.group(2))


def _build_k_ary(scheme: str, name: str) -> Callable[[DraftRequest], Draft]:
    def build(req: DraftRequest) -> Draft:
        width, depth = _shape_param(req.param, name)
        if req.temperature == 0.0:
            raise ValueError(f"method {name!r} samples its tokens; it needs T > 0 (its T -> 0 "
                             "limit is not defined: use 'ddtree' at T = 0)")
        shape = k_ary_shape(width, depth, req.root_token)
        return _fill_from_marginals(shape, req, scheme)
    return build


# ----------------------------------------------------------------------------- the table
_DET = RuleSource("deterministic")
_SAMPLED = RuleSource("by-rule", default="rrsw")
_IID = RuleSource("iid")
_WO = RuleSource("without_replacement")
_CHAIN = RuleSource("iid", chains=True)

#: The registry: method name -> :class:`Method`.
METHODS: dict[str, Method] = {}


def register(method: Method, *, replace: bool = False) -> Method:
    """Add a method to the registry (``replace=True`` to override an existing name)."""
    if not isinstance(method, Method):
        raise ValueError(f"method must be a Method; got {type(method).__name__}")
    if method.name in METHODS and not replace:
        raise ValueError(f"method {method.name!r} is already registered (replace=True to "
                         "override)")
    if method.scheme == "by-rule":
        bad = [r for r in method.rules if r not in SCHEME_FOR_RULE]
    else:
        bad = [r for r in method.rules if r not in MATCHING_RULES.get(method.scheme, ())]
    if bad or not method.rules:
        raise ValueError(f"method {method.name!r}: rules must be non-empty verifier rules that "
                         f"match its scheme {method.scheme!r}; got {method.rules!r}")
    METHODS[method.name] = method
    return method


for _m in (
    Method("chain", _build_chain, _DET, uses_budget=False,
           description="DFlash's argmax chain (L nodes)"),
    Method("ddtree", _build_ddtree, _DET, nested=True,
           description="DDTree: the B best sum-of-log-q prefixes, best first"),
    Method("dynamic", _build_dynamic, _DET, description="EAGLE-2-like dynamic tree"),
    Method("chain-prefix", _build_chain_prefix, _DET,
           description="the argmax chain's first budget tokens (default L)"),
    Method("superset", _build_superset, _DET,
           description="a trace's superset tree: DDTree, then the chain's and the dynamic "
                       "tree's other nodes"),
    Method("caddtree", _cost_aware(caddtree, "caddtree"), _DET, needs_cost=True,
           description="CaDDTree: greedy stop on theta(B) = N(B)/D(B), budget = maximum"),
    Method("exhaustive", _cost_aware(exhaustive_budget_tree, "exhaustive"), _DET,
           needs_cost=True, description="argmax of theta over 0..budget"),
    Method("longrun", _cost_aware(longrun_tree, "longrun"), _DET, needs_cost=True,
           description="Dinkelbach's long-run rule (options: lam)"),
    Method("sampled-chain", _build_sampled_chain(False), _CHAIN, scheme="iid",
           uses_budget=False, description="chain of marginal draws"),
    Method("sampled-chain-corrected", _build_sampled_chain(True), _CHAIN, scheme="iid",
           uses_budget=False, needs_conditional=True,
           description="chain of draws given the sampled parent"),
    Method("tsubame", _build_tsubame("ddtree", None, "tsubame"), _SAMPLED, scheme="by-rule",
           needs_conditional=True,
           description="Tsubame: DDTree shape, filled by the corrected proposal"),
    Method("tsubame-rrs", _build_tsubame("ddtree", "iid", "tsubame-rrs"), _IID,
           scheme="iid", needs_conditional=True, description="Tsubame, i.i.d. fill"),
    Method("tsubame-rrsw", _build_tsubame("ddtree", "without_replacement", "tsubame-rrsw"),
           _WO, scheme="without_replacement", needs_conditional=True,
           description="Tsubame, fill without replacement"),
    Method("tsubame-univer", _build_tsubame("ddtree", "without_replacement", "tsubame-univer"),
           RuleSource("without_replacement", default="univer"),
           scheme="without_replacement", needs_conditional=True,
           description="Tsubame, fill without replacement, UniVer"),
    Method("tsubame-rrsw-tempered-plan",
           _build_tsubame("tempered", "without_replacement", "tsubame-rrsw-tempered-plan"),
           _WO, scheme="without_replacement", needs_conditional=True,
           description="Tsubame planned on the tempered marginals"),
    Method("tsubame-rrsw-marginal",
           _build_tsubame("ddtree", "without_replacement", "tsubame-rrsw-marginal",
                          corrected=False),
           _WO, scheme="without_replacement",
           description="Tsubame's plan filled without replacement from the marginals"),
    Method("sampled-ddtree", _build_sampled_ddtree, _SAMPLED, scheme="by-rule",
           description="DDTree's shape filled per depth from the tempered marginals"),
    Method("sampled-tree", _build_k_ary("without_replacement", "sampled-tree"),
           _WO, scheme="without_replacement", parametrised=True, needs_positive_temperature=True,
           description="full WxD tree filled without replacement from the tempered marginals"),
    Method("greedy-tree", _build_k_ary("greedy", "greedy-tree"), RuleSource("greedy"),
           scheme="greedy", parametrised=True, needs_positive_temperature=True,
           description="full WxD tree: top W-1 tokens and one draw"),
    Method("ar-chain", _build_ar_chain, _DET, needs_conditional=True,
           description="an autoregressive drafter's greedy chain (budget tokens, default L)"),
    Method("ar-ddtree", _build_ar_ddtree, _DET, nested=True, needs_conditional=True,
           description="DDTree's best-first rule on an autoregressive drafter's path scores"),
    Method("ar-eagle", _build_eagle(True), _DET, parametrised=True, needs_conditional=True,
           description="SGLang's EAGLE beam (S steps, top K) on an autoregressive drafter"),
    Method("eagle", _build_eagle(False), _DET, parametrised=True,
           description="SGLang's EAGLE beam (S steps, top K) on the marginals"),
    Method("recorded", _build_recorded, _SAMPLED, scheme="by-rule", uses_budget=False,
           needs_recorded=True,
           description="the draft the backend recorded for the context (a trace's sampled "
                       "tree)"),
):
    register(_m)


def _rules_registered(_rule: VerifierRule) -> None:
    """A rule was registered: re-read the rules of every method whose rules come from the
    table (:attr:`Method.rules_from`)."""
    for name, m in list(METHODS.items()):
        if m.rules_from is not None:
            METHODS[name] = replace(m, rules=m.rules_from)


on_register(_rules_registered)


@contextlib.contextmanager
def registered(method: Method) -> Iterator[Method]:
    """``method`` registered for a ``with`` block only (a planted bug, a test's own builder);
    the registry is as it was afterwards (a method it replaced is put back)."""
    held = METHODS.get(method.name)
    register(method, replace=True)
    try:
        yield METHODS[method.name]
    finally:
        if held is None:
            METHODS.pop(method.name, None)
        else:
            METHODS[method.name] = held


def method_names() -> tuple[str, ...]:
    """Registered names (parametrised ones as ``name[...]``)."""
    return tuple(f"{m.name}[...]" if m.parametrised else m.name for m in METHODS.values())


def get_method(name: str) -> tuple[Method, str]:
    """``(Method, parameter)`` for a name such as ``"ddtree"`` or ``"sampled-tree[2x4]"``."""
    if not isinstance(name, str):
        raise ValueError(f"method must be a registered name (a string); got {name!r}")
    m = re.fullmatch(r"([^\[\]]+)(?:\[([^\[\]]*)\])?", name)
    base, param = (m.group(1), m.group(2) or "") if m else (name, "")
    method = METHODS.get(base)
    if method is None or method.parametrised != bool(m and m.group(2) is not None):
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(method_names())}")
    return method, param


def uses_budget(method: str) -> bool:
    """Whether ``method``'s tree size is set by the budget (a chain always drafts ``L`` nodes:
    its rows report ``budget = L``, the nodes it drafts, in every family)."""
    return get_method(method)[0].uses_budget


def lossless_rules(method: str | Method, temperature: float) -> tuple[str, ...]:
    """Rules that are lossless for ``method``'s draws at ``temperature`` (first = default;
    ``()`` where the method cannot draft at that temperature): :meth:`Method.lossless_rules`."""
    m = get_method(method)[0] if isinstance(method, str) else method
    return m.lossless_rules(check_temperature(temperature))


def resolve_rule(method: str | Method, rule: str | None, temperature: float) -> str:
    """The rule to verify with: ``rule`` checked against :func:`lossless_rules`, or the
    default. An unknown rule is called unknown; a known rule that is not lossless for the
    method's draws at ``temperature`` is refused (at ``T = 0`` a sampled method drafts the
    top-k tokens of its proposals, a deterministic tree: ``follow`` or ``tev``)."""
    m = get_method(method)[0] if isinstance(method, str) else method
    t = check_temperature(temperature)
    if rule is not None and (not isinstance(rule, str) or rule not in RULES):
        raise ValueError(f"unknown rule {rule!r}; known rules: {', '.join(RULES)}")
    ok = m.lossless_rules(t)
    if not ok:
        raise ValueError(f"method {m.name!r} samples its tokens and needs T > 0; got "
                         f"T = {t:g}")
    if rule is None:
        return ok[0]
    if rule not in ok:
        at = "at T = 0" if t == 0.0 else f"at T = {t:g}"
        why = (" (at T = 0 its draws are the top-k tokens of its proposals: a deterministic "
               "tree)" if t == 0.0 and m.sampled else "")
        raise ValueError(f"rule {rule!r} is not lossless for method {m.name!r} {at}{why}; use "
                         f"one of {', '.join(ok)}")
    return rule
