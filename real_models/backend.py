r"""The real-model backend: a loaded :class:`~real_models.bundle.Bundle` as a round-loop backend.

:class:`ModelBackend` implements the :class:`treespec_sim.engine.Backend` protocol, so real
models decode through the same :func:`treespec_sim.engine.run_round` as every synthetic world
(``docs/real_models.md``, "What one round does")::

    draft(ctx)                   drafter forward over [b, m × L] ──► log_q (L, V), float32
                                 log-softmax of the logits (untempered, as DDTree builds its tree)
    draft_conditional(ctx, d, x) the first-order correction: a second drafter forward over
                                 [b, m, .., x, .., m] (x written at depth d - 1) ──► the depth-d
                                 law given the sampled parent x, float64 (V,); cached per round,
                                 counted and timed (DecodeState.corrections)
    target_oracle(ctx, tree, T)  4-D tree mask + one target forward over the root and the nodes
                                 ──► LogitsOracle (float64 rows at T, computed where read)
    commit(ctx, outcome)         target KV cache compacted to the accepted path; the drafter's
                                 context cache grows by the accepted nodes' hidden states
    context_length(ctx)          the target cache length (where cost-aware methods read costs)
    clock()                      perf_counter, after a CUDA synchronize on a GPU

A sequence starts from a prompt, not from a sampled context: :func:`prefill` caches
``prompt[:-1]`` (the prompt's last token is the first round's root, so every emitted token, the
first included, comes out of a verifier) and :meth:`ModelBackend.start` turns the prefilled state
into a :class:`DecodeState`, the ``ctx`` of the engine. The KV cache lives in the bundle's target,
so a state is single-use and mutable: ``commit`` updates it in place and returns it.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import numpy as np

from treespec_sim import DraftTree
from treespec_sim.verify.outcome import Outcome

from ._deps import require
from .bundle import Bundle
from .drafter import DraftCache
from .target import LogitsOracle, TreeForward

torch = require("torch")

__all__ = ["DecodeState", "Drafting", "ModelBackend", "Prefilled", "clock",
           "prefill"]


def clock(bundle: Bundle) -> float:
    """Seconds (:func:`time.perf_counter`) after the bundle's device has finished its work."""
    if bundle.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


@dataclass
class Prefilled:
    """The state right after a prefill; reusable (every :meth:`ModelBackend.start` restores it).

    Attributes
    ----------
    prompt : ndarray int64 (P,)
    root : int
        ``prompt[-1]``: the first round's root (not cached).
    target_snapshot : list
        The target KV cache of ``prompt[:-1]`` (:meth:`TargetBackend.snapshot`).
    draft_cache : DraftCache or None
        The drafter's context cache of ``prompt[:-1]`` (None: prefilled without a drafter).
    seconds : float
        Wall time of the prefill.
    """

    prompt: np.ndarray
    root: int
    target_snapshot: list
    draft_cache: DraftCache | None
    seconds: float


@torch.inference_mode()
def prefill(bundle: Bundle, prompt, *, with_drafter: bool = True) -> Prefilled:
    """Cache ``prompt[:-1]`` in the target (and the drafter's context cache).

    Parameters
    ----------
    bundle : Bundle
    prompt : sequence of int
        At least 2 token ids (validated by :func:`real_models.check_request`).
    with_drafter : bool
        Also fill the drafter's context cache (needed by every method but ``ar``).
    """
    prompt = np.asarray(prompt, dtype=np.int64)
    if prompt.ndim != 1 or prompt.size < 2:
        raise ValueError(f"prompt must be a 1-D sequence of at least 2 token ids; got shape "
                         f"{prompt.shape}")
    if with_drafter and bundle.drafter is None:
        raise ValueError("with_drafter=True needs a drafter; the bundle was loaded without one")
    t0 = clock(bundle)
    feats = bundle.target.prefill(prompt[:-1], want_features=with_drafter)
    dcache = None
    if with_drafter:
        dcache = DraftCache(len(bundle.drafter.layers))
        pos = torch.arange(prompt.size - 1, device=bundle.device)[None]
        bundle.drafter.extend_cache(dcache, feats, pos)
    snap = bundle.target.snapshot()
    return Prefilled(prompt, int(prompt[-1]), snap, dcache, clock(bundle) - t0)


class Drafting:
    """The drafter side of a round: block embedding, one block forward, log-probabilities.

    Holds the block tensor ``[b, m, ..., m]`` and the target's embedding and LM head, so a
    round only writes the root into position 0.
    """

    def __init__(self, bundle: Bundle) -> None:
        if bundle.drafter is None:
            raise ValueError("drafting needs a drafter; the bundle was loaded without one")
        self.bundle = bundle
        self.embed = bundle.target.model.get_input_embeddings()
        self.head = bundle.target.model.get_output_embeddings()
        self.block = torch.full((1, bundle.block_size), bundle.spec.mask_token_id,
                                dtype=torch.long, device=bundle.device)

    @torch.inference_mode()
    def log_q(self, cache: DraftCache, root: int, start: int):
        """``(log_q, logits)``: float32 numpy log-softmax (L, V) and the logits tensor (L, V).

        ``root`` is the last committed token, ``start`` its position (the cached length).
        """
        self.block[0, 0] = root
        emb = self.embed(self.block)
        if self.bundle.spec.input_embedding_scale != 1.0:
            emb = emb * self.bundle.spec.input_embedding_scale
        hidden = self.bundle.drafter.draft(cache, emb, start)
        logits = self.bundle.drafter.logits(hidden, self.head)[0].float()
        return torch.log_softmax(logits, dim=-1).cpu().numpy(), logits

    @torch.inference_mode()
    def log_q_batch(self, cache: DraftCache, roots, start: int) -> np.ndarray:
        """:meth:`log_q` for ``b`` requests in one drafter forward: float32 numpy (b, L, V).

        ``cache`` holds the ``b`` requests' contexts (batch ``b``, one length ``start``);
        ``roots`` their last committed tokens. What ``real_models.profile --batch-sizes``
        times as a batch's draft stage.
        """
        block = self.block.expand(len(roots), -1).clone()
        block[:, 0] = torch.as_tensor(np.asarray(roots, dtype=np.int64), device=block.device)
        emb = self.embed(block)
        if self.bundle.spec.input_embedding_scale != 1.0:
            emb = emb * self.bundle.spec.input_embedding_scale
        hidden = self.bundle.drafter.draft(cache, emb, start)
        logits = self.bundle.drafter.logits(hidden, self.head).float()
        return torch.log_softmax(logits, dim=-1).cpu().numpy()

    @torch.inference_mode()
    def conditional_probs(self, cache: DraftCache, root: int, start: int, depth: int,
                          written) -> np.ndarray:
        """The depth-``depth`` law given each block's written tokens: float64 numpy (k, V).

        One batched drafter forward over ``k`` blocks: block ``i`` holds the root ``b`` at
        position 0, ``written[i][j]`` in place of the mask at position ``j + 1`` (depth
        ``j + 1``; ``-1`` leaves the mask), masks elsewhere -- a node's whole sampled path, or
        its parent alone at position ``depth - 1``; row ``i`` is ``softmax(logits at position
        depth)`` computed in float64 from the model's logits (``docs/real_models.md``, "The
        conditional correction"). ``depth >= 2`` (at depth 1 the parent is the root, already in
        the block: the law is the marginal); each ``written[i]`` has ``depth - 1`` entries.
        """
        if not 2 <= depth <= self.bundle.depth:
            raise ValueError(f"a correction pass needs depth in [2, {self.bundle.depth}]; "
                             f"got {depth}")
        w = torch.as_tensor(np.asarray(written, dtype=np.int64).reshape(-1, depth - 1),
                            device=self.bundle.device)
        block = self.block.expand(w.shape[0], -1).clone()
        block[:, 0] = int(root)
        inner = block[:, 1:depth]
        keep = w >= 0
        inner[keep] = w[keep]
        emb = self.embed(block)
        if self.bundle.spec.input_embedding_scale != 1.0:
            emb = emb * self.bundle.spec.input_embedding_scale
        hidden = self.bundle.drafter.draft(cache, emb, start)[:, depth - 1]
        logits = self.bundle.drafter.logits(hidden, self.head)
        return torch.softmax(logits.to("cpu", torch.float64), dim=-1).numpy()


@dataclass(eq=False)
class DecodeState:
    """The engine's ``ctx`` for one decoded sequence (mutable; see the module docstring).

    Attributes
    ----------
    tokens : list of int
        The prompt and every committed token; the last one is the next round's root.
    draft_cache : DraftCache
        The drafter's context cache (positions ``0 .. length - 1``).
    cache : transformers cache
        The bundle's target KV cache this sequence lives in (a later ``start`` or prefill
        replaces it, which makes this state stale: its rounds then raise ``ValueError``).
    forward : TreeForward or None
        This round's verification forward (set by ``target_oracle``, cleared by ``commit``):
        its logits and the context features the commit feeds the drafter.
    marginal_logits : torch.Tensor (L, V) or None
        This round's drafter logits (set by ``draft``): the depth-1 law given the root.
    conditionals : dict
        This round's correction laws, ``(depth, written tokens) -> float64 (V,)`` (read-only;
        the tokens at depths ``1..depth - 1`` written into the block, ``-1`` where masked),
        computed once each (``draft_conditional``); emptied by ``draft``.
    corrections : list of (int, int, float)
        This round's correction passes, ``(depth, blocks, seconds)`` each, in order: what
        the round's cost must charge on top of ``C_d + C_v(n + 1)``
        (``docs/real_models.md``, "The conditional correction"); emptied by ``draft``.
    split : dict
        Seconds of this round's sub-steps that :class:`real_models.RoundStats` moves
        between stages: ``"mask"`` (built inside ``target_oracle``, counted as build),
        ``"rows"`` (the oracle's set-up after the forward, counted as decide) and ``"extend"``
        (the drafter cache update inside ``commit``, counted as draft).
    """

    tokens: list[int]
    draft_cache: DraftCache
    cache: object = None
    forward: TreeForward | None = None
    split: dict[str, float] = field(default_factory=dict)
    marginal_logits: object = None
    conditionals: dict = field(default_factory=dict)
    corrections: list = field(default_factory=list)

    @property
    def last_token(self) -> int:
        """The root of the next round (the last committed token, not yet cached)."""
        return self.tokens[-1]

    @property
    def length(self) -> int:
        """Cached positions of the target and the drafter: every token but the root."""
        return len(self.tokens) - 1


class ModelBackend:
    """A loaded bundle as a :class:`treespec_sim.engine.Backend` (see the module docstring).

    Parameters
    ----------
    bundle : Bundle
        With a drafter (the ``ar`` baseline of :func:`real_models.decode` needs none and
        does not use a backend).

    Examples
    --------
    >>> be = ModelBackend(bundle)                                    # doctest: +SKIP
    >>> ctx = be.start(prompt_ids)
    >>> rnd = engine.run_round(be, ctx, method="ddtree", budget=64, rng=rng)
    >>> ctx = engine.commit(be, ctx, rnd)
    """

    #: A correction pass is a second drafter forward over the block (the level's parents
    #: batched): ``run_round`` charges one ``C_d`` per corrected level in ``Round.cost_s``.
    correction_pass_cost = 1.0
    #: The correction reads each node's whole sampled path (written into the block), so
    #: ``run_round`` asks with it (``treespec_sim.policies.sampled.ProposalFn``).
    conditions_on_path = True

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self.target = bundle.target
        self.drafting = Drafting(bundle)
        self.depth = int(bundle.depth)
        self.vocab_size = int(bundle.vocab_size)

    # ------------------------------------------------------------------ contexts
    def start(self, prompt) -> DecodeState:
        """A fresh sequence from a :class:`Prefilled` state (restored, not consumed) or from
        prompt ids (prefilled here)."""
        pf = prompt if isinstance(prompt, Prefilled) else prefill(self.bundle, prompt)
        if pf.draft_cache is None:
            raise ValueError("this Prefilled state has no drafter cache (prefill(..., "
                             "with_drafter=False) serves only the 'ar' baseline)")
        self.target.restore(pf.target_snapshot)
        # the prefilled drafter cache is shared between runs: copy its per-layer lists, so
        # extending this sequence's cache never changes the prefilled one
        dcache = copy.copy(pf.draft_cache)
        dcache.keys, dcache.values = list(dcache.keys), list(dcache.values)
        return DecodeState(pf.prompt.tolist(), dcache, self.target.cache)

    def sample_context(self, rng: np.random.Generator) -> DecodeState:
        """Not available: a real model starts from a prompt (:meth:`start`)."""
        raise TypeError("a real-model backend has no context distribution to sample from; "
                        "start a sequence from a prompt with ModelBackend.start(prompt_ids)")

    def advance(self, ctx: DecodeState, tokens) -> DecodeState:
        """Not available: a real model commits verified rounds (:meth:`commit`)."""
        raise TypeError("a real-model backend advances by committing a verified round "
                        "(treespec_sim.engine.commit(backend, ctx, round)), not by tokens")

    def context_length(self, ctx: DecodeState) -> int:
        """The target cache length: where cost-aware methods read a latency model."""
        return ctx.length

    def clock(self) -> float:
        return clock(self.bundle)

    def _check(self, ctx: DecodeState, *, verified: bool) -> None:
        """``ctx`` is this bundle's live sequence, and has (``verified``) or has not yet had
        this round's verification forward."""
        if not isinstance(ctx, DecodeState):
            raise ValueError(f"ctx must be a DecodeState from ModelBackend.start; got "
                             f"{type(ctx).__name__}")
        if verified and ctx.forward is None:
            raise ValueError("commit needs this round's verification forward "
                             "(target_oracle) first")
        if not verified and ctx.forward is not None:
            raise ValueError("ctx has an uncommitted verification forward: commit the round "
                             "(treespec_sim.engine.commit) before drafting or verifying again")
        # the KV cache is the bundle's: another sequence started since would decode from the
        # wrong prefix, silently (a restore or prefill replaces the cache object)
        if ctx.cache is not self.target.cache:
            raise ValueError("ctx is stale: the bundle's KV cache has been reset or moved since "
                             "this sequence's last commit (one sequence at a time per bundle)")

    # ------------------------------------------------------------------ one round
    def draft(self, ctx: DecodeState) -> np.ndarray:
        """The drafter's log-marginals, float32 numpy (L, V), after ``ctx``."""
        self._check(ctx, verified=False)
        if self.target.length != ctx.length:
            raise ValueError(f"ctx is stale: the bundle's KV cache holds {self.target.length} "
                             f"positions, this sequence {ctx.length}")
        ctx.split = {}
        ctx.conditionals = {}
        ctx.corrections = []
        log_q, ctx.marginal_logits = self.drafting.log_q(ctx.draft_cache, ctx.last_token,
                                                         ctx.length)
        return log_q

    def draft_conditional(self, ctx: DecodeState, depth: int, parent_token: int,
                          path=None) -> np.ndarray:
        """The drafter's depth-``depth`` law given the sampled path to ``parent_token``.

        The correction of ``docs/real_models.md`` ("The conditional correction"): a second
        drafter forward over the block with the node's sampled tokens written in place of the
        masks (:meth:`Drafting.conditional_probs`). ``path`` (the tokens at depths
        ``1..depth - 1``, ending with ``parent_token``) is what ``run_round`` passes; without
        it only the parent is written, at depth ``depth - 1`` (a first-order correction). At
        depth 1 the parent must be the root, and the law is the marginal's (no pass). Each
        law is computed once per round; every pass is recorded in ``ctx.corrections``.

        Parameters
        ----------
        ctx : DecodeState
            After this round's :meth:`draft`, before its verification.
        depth : int
            ``1..L``.
        parent_token : int
        path : sequence of int, optional
            ``depth - 1`` token ids, the last one ``parent_token``.

        Returns
        -------
        ndarray float64 (V,)
            Read-only probabilities (sum 1 up to rounding).
        """
        return self.draft_conditional_batch(ctx, depth, [parent_token],
                                            paths=None if path is None else [path])[0]

    def draft_conditional_batch(self, ctx: DecodeState, depth: int, parent_tokens,
                                paths=None) -> list[np.ndarray]:
        """:meth:`draft_conditional` for many nodes at one depth in one batched pass.

        The laws not yet computed this round go through one drafter forward over as many
        blocks (one correction pass, recorded in ``ctx.corrections``); the rest come from the
        round's cache. ``paths`` (optional): each node's sampled path, as in
        :meth:`draft_conditional`. Returns the laws, one read-only float64 (V,) array per
        node (the round's cached arrays, not copies: a level's prefetch copies nothing).
        """
        self._check(ctx, verified=False)
        depth, parents = self._check_conditional(ctx, depth, parent_tokens)
        if depth == 1:
            if ctx.marginal_logits is None:
                raise ValueError("draft_conditional needs this round's draft(ctx) first")
            law = ctx.conditionals.get((1, ()))
            if law is None:
                law = torch.softmax(ctx.marginal_logits[0].to("cpu", torch.float64),
                                    dim=-1).numpy()
                law.flags.writeable = False
                ctx.conditionals[(1, ())] = law
            return [law] * len(parents)
        written = self._written(depth, parents, paths)
        todo = list(dict.fromkeys(w for w in written if (depth, w) not in ctx.conditionals))
        if todo:
            t0 = self.clock()
            laws = self.drafting.conditional_probs(ctx.draft_cache, ctx.last_token,
                                                   ctx.length, depth, todo)
            ctx.corrections.append((depth, len(todo), self.clock() - t0))
            for w, law in zip(todo, laws, strict=True):
                law = np.ascontiguousarray(law)
                law.flags.writeable = False
                ctx.conditionals[(depth, w)] = law
        return [ctx.conditionals[(depth, w)] for w in written]

    def _written(self, depth: int, parents: list[int], paths) -> list[tuple[int, ...]]:
        """Each node's tokens at depths ``1..depth - 1`` (``-1``: left masked)."""
        if paths is None:
            return [(-1,) * (depth - 2) + (x,) for x in parents]
        if len(paths) != len(parents):
            raise ValueError(f"paths must give one path per parent token; got {len(paths)} "
                             f"for {len(parents)}")
        out = []
        for x, p in zip(parents, paths, strict=True):
            p = tuple(int(t) for t in p)
            if len(p) != depth - 1 or p[-1] != x:
                raise ValueError(f"a depth-{depth} node's path must hold {depth - 1} tokens "
                                 f"ending with its parent token {x}; got {p}")
            bad = [t for t in p if not 0 <= t < self.vocab_size]
            if bad:
                raise ValueError(f"path token {bad[0]} is outside the vocabulary "
                                 f"(V = {self.vocab_size})")
            out.append(p)
        return out

    def _check_conditional(self, ctx: DecodeState, depth, parents) -> tuple[int, list[int]]:
        if isinstance(depth, bool) or not isinstance(depth, int | np.integer) or not (
                1 <= depth <= self.depth):
            raise ValueError(f"depth must be an integer in [1, {self.depth}]; got {depth!r}")
        arr = np.asarray(parents)
        if arr.ndim != 1 or arr.size < 1 or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"parent tokens must be a non-empty 1-D sequence of token ids; "
                             f"got {parents!r}")
        bad = np.flatnonzero((arr < 0) | (arr >= self.vocab_size))
        if bad.size:
            raise ValueError(f"parent token {arr[bad[0]]} is outside the vocabulary "
                             f"(V = {self.vocab_size})")
        out = [int(x) for x in arr]
        if int(depth) == 1 and any(x != ctx.last_token for x in out):
            raise ValueError(f"at depth 1 the parent is the root: parent_token must be "
                             f"ctx.last_token = {ctx.last_token}; got {out}")
        return int(depth), out

    def target_oracle(self, ctx: DecodeState, tree: DraftTree, temperature: float
                      ) -> LogitsOracle:
        """One tree-attention forward over the root and the nodes; lazy rows at ``T``.

        The target cache grows by ``n + 1`` entries until :meth:`commit` compacts it.
        """
        self._check(ctx, verified=False)
        if tree.root_token != ctx.last_token:
            raise ValueError(f"tree.token[0] = {tree.root_token} must be the last committed "
                             f"token {ctx.last_token}")
        t0 = self.clock()
        mask = self.target.tree_mask(tree, ctx.length) if tree.size else None
        t1 = self.clock()
        ctx.forward = self.target.verify_forward(tree, want_features=True, mask=mask)
        t2 = self.clock()
        rows = LogitsOracle(ctx.forward.logits, temperature)
        ctx.split["mask"] = t1 - t0
        ctx.split["rows"] = self.clock() - t2
        return rows

    @torch.inference_mode()
    def commit(self, ctx: DecodeState, outcome: Outcome) -> DecodeState:
        """Keep the accepted path in the target cache; feed its features to the drafter."""
        self._check(ctx, verified=True)
        fwd = ctx.forward
        start = ctx.length
        nodes = [0, *outcome.path]
        self.target.commit(start, nodes)
        t0 = self.clock()
        pos = torch.arange(start, start + len(nodes), device=self.bundle.device)[None]
        self.bundle.drafter.extend_cache(ctx.draft_cache, fwd.features[:, nodes], pos)
        ctx.split["extend"] = self.clock() - t0
        ctx.tokens.extend(outcome.tokens)
        ctx.forward = None
        return ctx
