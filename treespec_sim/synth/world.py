"""Synthetic worlds: a topic-conditioned sparse-boost Markov target plus a block-diffusion drafter.

The target language model
-------------------------
A first-order Markov chain over ``V`` tokens, conditioned on a per-sequence topic ``z``:

.. math::

    \\ell(b \\mid a, z) &= \\mathrm{base}_z[b] + \\mathrm{boost}[a, j]
        \\ \\text{if } b = \\mathrm{succ}[a, j], \\text{ else } \\mathrm{base}_z[b], \\\\
    \\mathrm{base}_z &= \\mathrm{bg} + \\mathrm{topic\\_strength} \\cdot \\mathrm{topic}[z], \\\\
    p_T(b \\mid a, z) &= \\mathrm{softmax}_b\\big(\\alpha\\, \\ell(b \\mid a, z) / T\\big),
        \\qquad p_0 = e_{\\arg\\max_b \\ell(b \\mid a, z)} \\ (\\text{ties: smallest index}).

* ``alpha = logit_scale`` sets how peaked the law is at ``T = 1`` without moving any argmax
  (see *Entropy at T = 1* below).
* ``bg[perm[r]] = -zipf_exponent * log(r + 1)``: Zipf log-weights over a random permutation.
* ``topic[z]``: standard Gaussian entries on a random support of density ``topic_density``.
* ``succ[a]``: ``s`` distinct uniformly random tokens. Boosts are set through *target log-odds*
  against the whole background mass, ``g_a0 = sharpness + sharpness_spread * N(0, 1)``,
  ``g_a,j+1 = g_aj - Exp(successor_decay)``:
  ``boost[a, j] = max(0, g_aj + logsumexp(bg) - bg[succ[a, j]])``, so that (without topic, at
  ``T = 1``) ``p(succ[a, j] | a) / p(background) ≈ exp(g_aj)`` independently of ``V`` and of the
  successor's Zipf rank. Each row's slots are then sorted by boost, decreasing in ``j``.

Word classes with surface variants (``variants = m > 1``): the chain above runs over ``V / m``
classes, and a token's logit is its class's logit plus a within-class variant log-weight, so the
next token depends on the last token's *class* only (:func:`_make_variant_world`). A draft that
picks the wrong variant can then still match what follows -- the structure that lets real draft
trees profit from siblings. The three large named regimes use ``m = 4``.

All rows are exact and cheap at ``V = 32768``: see :class:`~treespec_sim.synth.kernel.
SparseBoostKernel`. Target kernels are cached per ``(topic, temperature)``.

Entropy at T = 1
----------------
A language model is near-deterministic at most positions even at ``T = 1`` (more than half of
Qwen3-8B's reasoning tokens have entropy near zero; the 80th percentile is 0.67 nats), and its
acceptance length loses only 8-16% from ``T = 0`` to ``T = 1``. Four knobs shape the synthetic
target's row entropies at ``T = 1``; each acts on one kind of mass the argmax hides at ``T = 0``:

* ``sharpness`` -- the *floor*: first-successor log-odds against the whole background, so the
  mass of the Zipf/topic background (junk continuations) is about ``exp(-alpha sharpness)``.
* ``successor_decay`` -- the *forks*: the log-odds gaps between a row's alternative successor
  classes are ``Exp`` with this mean, so a share of rows (small gaps) have two or three near-tied
  continuations that lead to *different* futures, and most rows have one clear winner.
* ``variant_spread`` -- the *surface variants*: within a word class, tokens are near-synonyms
  whose futures rejoin; their log-weights have this spread.
* ``logit_scale`` (``alpha``) -- one factor on all of these: at ``alpha = 1`` the rows are flat
  at ``T = 1`` (the old worlds: median entropy 1.6 nats, DDTree@64 tau about a quarter of the
  published ``T = 1`` value); the calibration fits ``alpha`` (about 4-6) to the published
  ``T = 1`` DDTree@64 tau, which leaves a majority of near-deterministic rows and a minority of
  forks (``docs/results/calibration.md`` lists the entropy quantiles next to the published
  ones).

Tempering is exact for every ``T``: ``p_T ∝ p_1^{1/T}`` (``T > 0``), and ``T = 0`` is the
argmax law, the ``T -> 0`` limit (ties to the smallest token index).

Hard misses
-----------
Where a real drafter's top token is wrong, the right one is sometimes its second or third
candidate (a *near miss*, which a draft tree recovers with a sibling) and sometimes far down its
ranking (a *hard miss*, which no tree of any size recovers). How the misses split between the two
decides how much a large tree gains over a small one: published DDTree runs gain about 10-20% in
tau from B = 64 to the best budget (DDTree Table 1 against TEV's B = 64), while a word-class world
whose drafter knows the target's successor classes (``mismatch = 0``, the calibrated families)
gains 18-26%: every miss of its argmax is a wrong *variant* inside the right class, always among
the drafter's first ``m`` candidates, so every extra node still buys acceptance
(``docs/results/calibration.md``, "Budget curve"). ``hard_miss`` renames each successor slot of
the drafter's class table, with this probability, to a random class outside the target's row
(keeping the slot's effective logit ``class_bg + boost``): when the target follows such a slot
the drafter ranks the right token with the background. Its uniforms and replacement classes come
from a sixth child stream of the world seed (``SeedSequence(seed).spawn(6)[5]``; the first five
streams are those of every other draw), so the renamed slots at a larger ``hard_miss`` include
those at a smaller one and every other array is unchanged -- common random numbers across a fit,
and ``hard_miss = 0`` gives the same world bit for bit. (The older ``mismatch`` knob renames slots
too, but its draws share the drafter's stream, so changing it redraws the drafter's noise.)

The drafter
-----------
See :mod:`treespec_sim.synth.drafter`. Its kernel is a mismatched copy of the target's: each
successor slot is, with probability ``mismatch``, renamed to a random token outside the target's
row (keeping the slot's *effective* logit ``bg + boost``), every boost gets ``N(0,
boost_noise^2)`` noise (clipped at 0), it knows ``topic_awareness`` of the topic term, and its
logits are divided by ``calibration``.

Randomness
----------
``make_world(spec, seed)`` draws every array from independent child streams of
``numpy.random.SeedSequence(seed)`` (background, topics, successors, boosts, drafter), so the
same seed gives the same world, and changing only drafter knobs leaves the target unchanged
(the drafter's random draws are also made regardless of ``mismatch`` -- common random numbers
across knob sweeps).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..marginals import LazyLogMarginals
from ..rows import TargetOracle
from ..tree import DraftTree
from ..validation import Interval, check_nonnegative_int, check_param, check_rng, is_int
from .drafter import BlockDiffusionDrafter
from .kernel import SparseBoostKernel, as_token_array, check_temperature
from .oracle import MarkovTargetOracle
from .regimes import RegimeSpec, get_regime

__all__ = ["Context", "World", "make_world"]

_TARGET_KERNEL_CACHE = 64       # (topic, temperature) kernels, O(V s) floats each


@dataclass(frozen=True)
class Context:
    """A decoding context of a synthetic world (immutable).

    Attributes
    ----------
    topic : int
        The per-sequence topic ``z``.
    last_token : int
        The last committed token ``x_0`` (the root of the next draft tree).
    position : int
        Number of tokens committed so far (sampled contexts start at ``context_burn_in + 1``).
    """

    topic: int
    last_token: int
    position: int = 0

    def __post_init__(self) -> None:
        for name in ("topic", "last_token", "position"):
            object.__setattr__(self, name, check_nonnegative_int(getattr(self, name), name))


class World:
    """A concrete synthetic world: target chain, drafter and their caches.

    Build with :func:`make_world`. Every method is deterministic given its arguments except
    those that take ``rng`` (a ``numpy.random.Generator``); nothing touches global seeds.

    Attributes
    ----------
    spec : RegimeSpec
    seed : int
    background : ndarray of float64, shape (V,)
        ``bg``, the background logits.
    topic_vectors : ndarray of float64, shape (n_topics, V)
        ``topic[z]`` (unscaled).
    succ, boost : ndarray, shape (V, s)
        The target's successor table and boosts.
    drafter : BlockDiffusionDrafter
    """

    def __init__(self, spec: RegimeSpec, seed: int, *, background: np.ndarray,
                 topic_vectors: np.ndarray, succ: np.ndarray, boost: np.ndarray,
                 drafter: BlockDiffusionDrafter) -> None:
        self.spec = spec
        self.seed = seed
        self.background = background
        self.topic_vectors = topic_vectors
        self.succ = succ
        self.boost = boost
        self.drafter = drafter
        self._kernels: OrderedDict[tuple[int, float], SparseBoostKernel] = OrderedDict()
        self._prompt_cdfs: dict[int, np.ndarray] = {}
        # what a topic and a draft depth are checked against, built once (per-round calls)
        self._topics = Interval("int", 0, spec.n_topics, closed="left")
        self._depths = Interval("int", 1, spec.depth)

    # ------------------------------------------------------------------ basic facts
    @property
    def vocab_size(self) -> int:
        """``V``."""
        return self.spec.vocab_size

    @property
    def depth(self) -> int:
        """``L``, the number of draft positions."""
        return self.spec.depth

    @property
    def n_topics(self) -> int:
        return self.spec.n_topics

    def __repr__(self) -> str:
        return (f"World(regime={self.spec.name!r}, seed={self.seed}, V={self.vocab_size}, "
                f"L={self.depth})")

    # ------------------------------------------------------------------ kernels
    def target_kernel(self, topic: int, temperature: float = 1.0) -> SparseBoostKernel:
        """The target's transition kernel for ``topic`` at ``temperature`` (cached, LRU).

        Its logits are ``logit_scale * l`` (``spec.logit_scale``), so the kernel is built at the
        effective temperature ``temperature / logit_scale``: ``p_T = softmax(alpha l / T)``,
        ``p_T ∝ p_1^{1/T}`` for every ``T > 0`` and the argmax law at ``T = 0``.
        """
        t = check_temperature(temperature) / self.spec.logit_scale
        topic = self._check_topic(topic)
        key = (topic, t)
        k = self._kernels.get(key)
        if k is not None:
            self._kernels.move_to_end(key)
            return k
        # Reuse the T = 1 kernel's arrays (and its argmax) when it is already cached.
        other = next((kk for (z, _), kk in self._kernels.items() if z == topic), None)
        if other is not None:
            k = other.with_temperature(t)
        else:
            base = self.background + self.spec.topic_strength * self.topic_vectors[topic]
            # In a word-class world a row depends on its token's class only: the kernel
            # computes its per-row tables once per class (the same floats, 4x less work).
            k = SparseBoostKernel(base, self.succ, self.boost, t, validate=False,
                                  row_class=getattr(self.drafter, "_cls_of", None))
        self._kernels[key] = k
        if len(self._kernels) > _TARGET_KERNEL_CACHE:
            self._kernels.popitem(last=False)
        return k

    def warm(self, temperatures: Sequence[float] = (0.0, 1.0)) -> None:
        """Build every per-topic table a round needs, for every topic (benchmarks, workers).

        The target kernels at ``temperatures`` (with the sampling CDF at ``T = 1`` that
        :meth:`sample_context` uses, and the argmax at ``T = 0``) and the drafter's per-topic
        tables. A sweep builds each of them once per process on first use; warming up front
        lets a benchmark time the steady state. Cost ``O(n_topics V s)``.
        """
        for topic in range(self.n_topics):
            self.target_kernel(topic, 1.0)._cdf()
            for t in temperatures:
                k = self.target_kernel(topic, t)
                if t == 0.0:
                    k.argmax(0)
            self.drafter.warm(topic)

    def share_target_kernels(self, other: World) -> None:
        """Use ``other``'s target-kernel cache (same target, e.g. only drafter knobs differ).

        Saves rebuilding the per-topic target kernels when many drafters are evaluated against
        one target (calibration). The two worlds must have the same seed and identical target
        arrays; otherwise ``ValueError``.
        """
        if not isinstance(other, World):
            raise ValueError(f"other must be a World; got {type(other).__name__}")
        # ``logit_scale`` may differ: kernels are cached by their effective temperature.
        same = (self.seed == other.seed and self.spec.topic_strength == other.spec.topic_strength
                and np.array_equal(self.background, other.background)
                and np.array_equal(self.topic_vectors, other.topic_vectors)
                and np.array_equal(self.succ, other.succ)
                and np.array_equal(self.boost, other.boost))
        if not same:
            raise ValueError("other has a different target (seed or target knobs differ)")
        self._kernels = other._kernels

    def draft_kernel(self, topic: int) -> SparseBoostKernel:
        """``Q_draft`` for ``topic`` (the drafter's kernel at temperature ``calibration``)."""
        return self.drafter.kernel(self._check_topic(topic))

    # ------------------------------------------------------------------ contexts
    def sample_context(self, rng: np.random.Generator) -> Context:
        """Draw a context: topic uniform; last token from the ``T = 1`` target chain.

        The last token is a draw from the topic's background law ``softmax(base_z)`` (unscaled:
        ``logit_scale`` does not apply to it) followed by ``spec.context_burn_in`` steps of the
        ``T = 1`` target chain.
        """
        check_rng(rng)
        topic = int(rng.integers(self.n_topics))
        k = self.target_kernel(topic, 1.0)
        # The first token stands for a benchmark's diverse prompts: it is drawn from the
        # *unscaled* background softmax(base_z) (the kernel at T = logit_scale), so that a
        # sharp target (large logit_scale) does not collapse every context onto the few
        # most frequent tokens; the burn-in then follows the target at T = 1.
        cdf = self._prompt_cdf(topic)
        x = int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"),
                    self.vocab_size - 1))
        for _ in range(self.spec.context_burn_in):
            x = k.sample(x, rng)
        return Context(topic=topic, last_token=x, position=self.spec.context_burn_in + 1)

    def _prompt_cdf(self, topic: int) -> np.ndarray:
        """CDF of ``softmax(base_z)`` (cached per topic; the T = 1 kernel's own at alpha = 1)."""
        cdf = self._prompt_cdfs.get(topic)
        if cdf is None:
            if self.spec.logit_scale == 1.0:
                cdf = self.target_kernel(topic, 1.0)._cdf()
            else:
                base = self.background + self.spec.topic_strength * self.topic_vectors[topic]
                cdf = np.cumsum(np.exp(base - base.max()))
            self._prompt_cdfs[topic] = cdf
        return cdf

    def advance(self, ctx: Context, tokens: Sequence[int] | np.ndarray) -> Context:
        """Commit ``tokens`` after ``ctx``: ``last_token = tokens[-1]``, ``position += len``."""
        self._check_ctx(ctx)
        toks = self._tokens(tokens, "tokens")
        if toks.shape[0] == 0:
            return ctx
        return Context(topic=ctx.topic, last_token=int(toks[-1]),
                       position=ctx.position + int(toks.shape[0]))

    # ------------------------------------------------------------------ target
    def target_row(self, ctx: Context, path: Sequence[int] | np.ndarray = (),
                   temperature: float = 1.0) -> np.ndarray:
        """Law of the next token after ``ctx + path``: float64 (V,). ``O(V)``."""
        self._check_ctx(ctx)
        toks = self._tokens(path, "path")
        k = self.target_kernel(ctx.topic, temperature)
        return k.row(int(toks[-1]) if toks.shape[0] else ctx.last_token)

    def target_rows(self, ctx: Context, tree: DraftTree, temperature: float = 1.0
                    ) -> np.ndarray:
        """Row ``v`` = law after ``ctx`` + the path to node ``v``: float64 (n+1, V). ``O(n V)``."""
        node_tokens = self._node_tokens(ctx, tree)
        return self.target_kernel(ctx.topic, temperature).rows(node_tokens)

    def target_oracle(self, ctx: Context, tree: DraftTree, temperature: float = 1.0
                      ) -> TargetOracle:
        """Lazy :class:`~treespec_sim.rows.TargetOracle` for ``tree`` (rows on demand)."""
        node_tokens = self._node_tokens(ctx, tree)
        return MarkovTargetOracle(self.target_kernel(ctx.topic, temperature), node_tokens, tree,
                                  checked=True)

    def target_sample(self, ctx: Context, n_tokens: int, rng: np.random.Generator,
                      temperature: float = 1.0) -> np.ndarray:
        """Plain autoregressive sampling of ``n_tokens`` tokens: int64 (n_tokens,).

        ``O(n_tokens (s + log V))``; ``temperature == 0`` is greedy and consumes no randomness.
        """
        self._check_ctx(ctx)
        n_tokens = check_nonnegative_int(n_tokens, "n_tokens")
        check_rng(rng)
        k = self.target_kernel(ctx.topic, temperature)
        out = np.empty(int(n_tokens), dtype=np.int64)
        x = ctx.last_token
        for i in range(int(n_tokens)):
            x = k.sample(x, rng)
            out[i] = x
        return out

    def sequence_logprob(self, ctx: Context, tokens: Sequence[int] | np.ndarray,
                         temperature: float = 1.0) -> float:
        """``log P(tokens | ctx)`` under the target at ``temperature`` (``-inf`` if impossible)."""
        self._check_ctx(ctx)
        toks = self._tokens(tokens, "tokens")
        if toks.shape[0] == 0:
            return 0.0
        prev = np.concatenate([[ctx.last_token], toks[:-1]])
        p = self.target_kernel(ctx.topic, temperature).edge_prob(prev, toks)
        with np.errstate(divide="ignore"):
            return float(np.log(p).sum())

    def sequence_prob(self, ctx: Context, tokens: Sequence[int] | np.ndarray,
                      temperature: float = 1.0) -> float:
        """Exact probability of the continuation ``tokens`` after ``ctx``. ``O(n s)``."""
        return float(np.exp(self.sequence_logprob(ctx, tokens, temperature)))

    # ------------------------------------------------------------------ drafter
    def draft(self, ctx: Context) -> np.ndarray:
        """``log q_d`` for ``d = 1..L``: float64 (L, V), each row a normalised log-law.

        Exact log-marginals of the drafter's belief process (module :mod:`.drafter`); depends
        on ``ctx.topic`` and ``ctx.last_token`` only, never on the target temperature.
        """
        self._check_ctx(ctx)
        return self.drafter.log_marginals(ctx.topic, ctx.last_token)

    def draft_lazy(self, ctx: Context) -> LazyLogMarginals:
        """:meth:`draft` as a :class:`~treespec_sim.marginals.LazyLogMarginals` (same values).

        ``ddtree`` and ``chain`` read it through per-depth top-``k`` lists without
        materialising ``(L, V)``: in a word-class world (``variants > 1``, e.g. every calibrated
        regime) a round then costs ``O(L (V / m) s)`` for the drafter instead of ``O(L V)``
        logarithms. ``np.asarray(draft_lazy(ctx))`` equals ``draft(ctx)`` bit for bit.
        """
        self._check_ctx(ctx)
        return self.drafter.lazy_log_marginals(ctx.topic, ctx.last_token)

    def draft_conditional(self, ctx: Context, depth: int, parent_token: int) -> np.ndarray:
        """Correction proposal ``q̂_depth(. | parent_token)``: float64 (V,) probabilities.

        ``depth`` is in ``1..L``; at depth 1 ``parent_token`` must be ``ctx.last_token`` and the
        result equals ``exp(draft(ctx)[0])``.
        """
        self._check_ctx(ctx)
        check_param(depth, "depth", self._depths)
        if not is_int(parent_token):
            raise ValueError(f"parent_token must be an integer token id; got {parent_token!r}")
        parent = int(parent_token)
        if not 0 <= parent < self.vocab_size:   # the check of _tokens, without an array
            parent = int(self._tokens([parent_token], "parent_token")[0])  # raises, worded
        if depth == 1 and parent != ctx.last_token:
            raise ValueError(f"parent_token at depth 1 must be ctx.last_token = "
                             f"{ctx.last_token}; got {parent_token}")
        return self.drafter.conditional(ctx.topic, ctx.last_token, int(depth), parent)

    # ------------------------------------------------------------------ validation helpers
    def _check_topic(self, topic: int) -> int:
        return int(check_param(topic, "topic", self._topics))

    def _check_ctx(self, ctx: Context) -> None:
        if not isinstance(ctx, Context):
            raise ValueError(f"ctx must be a Context; got {type(ctx).__name__}")
        if ctx.topic >= self.n_topics:
            raise ValueError(f"ctx.topic = {ctx.topic} is not a topic of this world "
                             f"(n_topics = {self.n_topics})")
        if ctx.last_token >= self.vocab_size:
            raise ValueError(f"ctx.last_token = {ctx.last_token} is outside the vocabulary "
                             f"(V = {self.vocab_size})")

    def _tokens(self, tokens: Sequence[int] | np.ndarray, name: str) -> np.ndarray:
        arr = np.asarray(tokens)
        if arr.size == 0:
            return np.zeros(0, dtype=np.int64)
        if arr.ndim != 1:
            raise ValueError(f"{name} must be one-dimensional; got shape {arr.shape}")
        return as_token_array(arr, self.vocab_size, name)

    def _node_tokens(self, ctx: Context, tree: DraftTree) -> np.ndarray:
        self._check_ctx(ctx)
        if not isinstance(tree, DraftTree):
            raise ValueError(f"tree must be a DraftTree; got {type(tree).__name__}")
        root = int(tree.token[0])
        if root >= 0 and root != ctx.last_token:
            raise ValueError(f"tree.token[0] = {root} (root) differs from ctx.last_token = "
                             f"{ctx.last_token}")
        if tree.size and int(tree.token[1:].max()) >= self.vocab_size:
            v = int(np.argmax(tree.token[1:] >= self.vocab_size)) + 1
            raise ValueError(f"tree.token[{v}] = {tree.token[v]} is outside the vocabulary "
                             f"(V = {self.vocab_size})")
        node_tokens = tree.token.copy()
        node_tokens[0] = ctx.last_token
        return node_tokens


# ---------------------------------------------------------------------- construction
def make_world(spec: RegimeSpec | str, seed: int = 0, vocab_size: int | None = None,
               depth: int | None = None) -> World:
    """Build a world from a regime (name or :class:`RegimeSpec`) and a seed.

    Parameters
    ----------
    spec : RegimeSpec or str
        The regime; names are looked up with :func:`get_regime`.
    seed : int
        Non-negative; the same ``(spec, seed)`` gives an identical world.
    vocab_size, depth : int, optional
        Override ``V`` and ``L``. When ``vocab_size`` is overridden, ``successors`` is clipped
        to ``vocab_size - 1`` (and ``variants`` set to 1 where the new ``V`` cannot hold them)
        so that every named regime can be shrunk.

    Returns
    -------
    World

    Notes
    -----
    Cost ``O(n_topics V + V s)``; about 0.1 s at ``V = 32768``.
    """
    if isinstance(spec, str):
        try:
            spec = get_regime(spec)
        except ValueError as exc:
            raise ValueError(f"spec: {exc}") from None
    elif not isinstance(spec, RegimeSpec):
        raise ValueError(f"spec must be a RegimeSpec or a regime name; got {spec!r}")
    seed = check_nonnegative_int(seed, "seed")
    changes: dict[str, object] = {}
    if vocab_size is not None:
        check_param(vocab_size, "vocab_size", Interval("int"))
        changes["vocab_size"] = int(vocab_size)
        if vocab_size >= 2:
            changes["successors"] = min(spec.successors, int(vocab_size) - 1)
            # Keep the variant structure only where the new V still admits it.
            if (vocab_size % spec.variants
                    or changes["successors"] * spec.variants > vocab_size - 1):
                changes["variants"] = 1
                changes["hard_miss"] = 0.0          # a word-class knob (module docstring)
    if depth is not None:
        changes["depth"] = depth
    if changes:
        spec = dataclasses.replace(spec, **changes)

    # Six child streams; the first five are those of spawn(5) (SeedSequence children are keyed
    # by their index), the sixth is drawn from only when hard_miss > 0 (module docstring).
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(int(seed)).spawn(6)]
    rng_bg, rng_topic, rng_succ, rng_boost, rng_draft, rng_hard = streams
    v = spec.vocab_size

    background = np.empty(v)
    background[rng_bg.permutation(v)] = -spec.zipf_exponent * np.log(np.arange(1, v + 1))

    topic_vectors = rng_topic.standard_normal((spec.n_topics, v))
    if spec.topic_density < 1.0:
        topic_vectors *= rng_topic.random((spec.n_topics, v)) < spec.topic_density

    if spec.variants > 1:
        return _make_variant_world(spec, int(seed), background, topic_vectors, rng_succ,
                                   rng_boost, rng_draft, rng_hard)

    succ, boost = _successor_table(rng_succ, rng_boost, spec, background, background)

    d_succ, d_boost = _mismatched_copy(rng_draft, background, succ, boost, spec)
    return _assemble(spec, int(seed), background, topic_vectors, succ, boost,
                     background, d_succ, d_boost)


def _make_variant_world(spec: RegimeSpec, seed: int, background: np.ndarray,
                        topic_vectors: np.ndarray, rng_succ: np.random.Generator,
                        rng_boost: np.random.Generator, rng_draft: np.random.Generator,
                        rng_hard: np.random.Generator) -> World:
    """A world whose chain runs over word classes of ``m = spec.variants`` surface tokens.

    Token ``b`` belongs to class ``c(b)``; its logit after ``a`` is
    ``bg[b] + B[c(a), j]`` if ``c(b)`` is the ``j``-th successor class of ``c(a)``, else
    ``bg[b]``, with ``bg[b] = class_bg[c(b)] + w[b]`` (``w``: variant log-weights). So the
    within-class proportions are ``softmax(w)`` and the next token's law depends on ``a`` only
    through ``c(a)``. This is still a sparse-boost kernel (``s * m`` boosted tokens per row).
    The drafter gets mismatched successor *classes*, hard misses (``hard_miss``, from
    ``rng_hard``), boost noise, and variant weights ``w + variant_noise * N(0, 1)``.
    """
    v, s, m = spec.vocab_size, spec.successors, spec.variants
    n_cls = v // m
    members = rng_succ.permutation(v).reshape(n_cls, m)         # class -> its m tokens
    cls_of = np.empty(v, dtype=np.int64)
    cls_of[members] = np.arange(n_cls)[:, None]
    # Class backgrounds: the Zipf weights already drawn, pooled per class (keeps the unigram
    # shape); variants add their own log-weights.
    class_bg = np.logaddexp.reduce(background[members], axis=1)
    w = spec.variant_spread * rng_boost.standard_normal(v)
    w -= np.logaddexp.reduce(w[members], axis=1)[cls_of]         # log-softmax within class
    bg_tok = class_bg[cls_of] + w

    succ_cls, boost_cls = _successor_table(rng_succ, rng_boost, spec, class_bg, bg_tok)

    # Drafter: its own class table (renamed slots keep their effective logit), noisy boosts,
    # noisy variant weights.
    flags = rng_draft.random((n_cls, s)) < spec.mismatch
    d_succ_cls = succ_cls.copy()
    for c in np.flatnonzero(flags.any(axis=1)):
        allowed = np.setdiff1d(np.arange(n_cls), succ_cls[c], assume_unique=True)
        slots = np.flatnonzero(flags[c])
        d_succ_cls[c, slots] = rng_draft.choice(allowed, slots.size, replace=False)
    if spec.hard_miss > 0.0:
        _hard_misses(rng_hard, succ_cls, d_succ_cls, spec.hard_miss)
    d_boost_cls = np.maximum(
        0.0, boost_cls + class_bg[succ_cls] - class_bg[d_succ_cls]
        + spec.boost_noise * rng_draft.standard_normal((n_cls, s)))
    d_w = w + spec.variant_noise * rng_draft.standard_normal(v)
    d_w -= np.logaddexp.reduce(d_w[members], axis=1)[cls_of]
    d_bg_tok = class_bg[cls_of] + d_w

    def token_tables(sc: np.ndarray, bc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        succ_tok = members[sc[cls_of]].reshape(v, s * m)        # all variants of each class
        boost_tok = np.repeat(bc[cls_of], m, axis=1)
        return succ_tok.astype(np.int64), boost_tok

    succ, boost = token_tables(succ_cls, boost_cls)
    d_succ, d_boost = token_tables(d_succ_cls, d_boost_cls)
    for arr in (members, d_succ_cls, d_boost_cls):
        arr.flags.writeable = False
    return _assemble(spec, seed, bg_tok, topic_vectors, succ, boost, d_bg_tok, d_succ, d_boost,
                     classes=(members, d_succ_cls, d_boost_cls))


def _hard_misses(rng: np.random.Generator, succ_cls: np.ndarray, d_succ_cls: np.ndarray,
                 p: float) -> None:
    """Rename the drafter's class slots with probability ``p`` each, in place (hard misses).

    ``succ_cls`` int64 ``(n, s)`` is the target's class table, ``d_succ_cls`` the drafter's.
    One uniform and one candidate class per slot are drawn whatever ``p`` is, so the renamed
    slots (``uniform < p``) at a larger ``p`` include those at a smaller one, and a slot's new
    class is its candidate whatever ``p`` is, except for a candidate in the target's row or
    already in the drafter's row (before or after renaming; about ``2 s / n`` of them), which
    moves to the next class id (cyclically) until it is neither.
    """
    n, s = succ_cls.shape
    u = rng.random((n, s))
    cand = rng.integers(0, n, (n, s))
    for c in np.flatnonzero((u < p).any(axis=1)):
        banned = set(succ_cls[c].tolist()) | set(d_succ_cls[c].tolist())
        for j in np.flatnonzero(u[c] < p):
            x = int(cand[c, j])
            while x in banned:
                x = (x + 1) % n
            banned.add(x)
            d_succ_cls[c, j] = x


def _assemble(spec: RegimeSpec, seed: int, background: np.ndarray, topic_vectors: np.ndarray,
              succ: np.ndarray, boost: np.ndarray, d_background: np.ndarray,
              d_succ: np.ndarray, d_boost: np.ndarray,
              classes: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> World:
    """The drafter and the world from finished arrays (made read-only here).

    ``classes`` (word-class worlds) is ``(members, drafter class_succ, drafter class_boost)``,
    which the drafter uses for its class-level fast path.
    """
    drafter = BlockDiffusionDrafter(
        d_background, spec.topic_awareness * spec.topic_strength * topic_vectors, d_succ,
        d_boost, calibration=spec.calibration, depth=spec.depth,
        degradation=spec.degradation, junk=spec.junk,
        correction_quality=spec.correction_quality, depth_sharpening=spec.depth_sharpening,
        classes=classes)
    for arr in (background, topic_vectors, succ, boost, d_background, d_succ, d_boost):
        arr.flags.writeable = False
    return World(spec, seed, background=background, topic_vectors=topic_vectors, succ=succ,
                 boost=boost, drafter=drafter)


def _successor_table(rng_succ: np.random.Generator, rng_boost: np.random.Generator,
                     spec: RegimeSpec, unit_bg: np.ndarray, token_bg: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Successor table and boosts over ``len(unit_bg)`` units (tokens, or word classes).

    Unit ``j``-th successor log-odds against the whole token background mass:
    ``g_a0 = sharpness + sharpness_spread N(0,1)``, ``g_a,j+1 = g_aj - Exp(successor_decay)``;
    ``boost = max(0, g + logsumexp(token_bg) - unit_bg[succ])``; slots sorted by boost.
    """
    n, s = unit_bg.shape[0], spec.successors
    succ = _distinct_rows(rng_succ, n, s)
    g = spec.sharpness + spec.sharpness_spread * rng_boost.standard_normal(n)
    gaps = rng_boost.exponential(1.0, (n, s - 1)) * spec.successor_decay
    g = g[:, None] - np.concatenate([np.zeros((n, 1)), np.cumsum(gaps, axis=1)], axis=1)
    boost = np.maximum(0.0, g + _logsumexp(token_bg) - unit_bg[succ])
    order = np.argsort(-boost, axis=1, kind="stable")
    return np.take_along_axis(succ, order, axis=1), np.take_along_axis(boost, order, axis=1)


def _logsumexp(x: np.ndarray) -> float:
    m = float(x.max())
    return m + float(np.log(np.exp(x - m).sum()))


def _distinct_rows(rng: np.random.Generator, v: int, s: int) -> np.ndarray:
    """``(v, s)`` uniformly random tokens, distinct within each row.

    Draw with replacement (cheap, vectorised) and redraw the rare rows with a repeat without
    replacement; the result is uniform over ordered distinct ``s``-tuples either way.
    """
    out = rng.integers(0, v, (v, s))
    if s > 1:
        srt = np.sort(out, axis=1)
        for a in np.flatnonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1)):
            out[a] = rng.choice(v, s, replace=False)
    return out.astype(np.int64)


def _mismatched_copy(rng: np.random.Generator, background: np.ndarray, succ: np.ndarray,
                     boost: np.ndarray, spec: RegimeSpec) -> tuple[np.ndarray, np.ndarray]:
    """The drafter's successor table and boosts (see module docstring).

    A renamed slot gets a token outside the target's row, distinct within the drafter's row,
    and the boost that keeps its effective logit ``bg + boost`` (clipped at 0). All random draws
    are made whatever ``mismatch`` is, so knob sweeps share their random numbers.
    """
    v, s = succ.shape
    flags = rng.random((v, s)) < spec.mismatch
    cand = rng.integers(0, v, (v, s))
    noise = rng.standard_normal((v, s))
    fix_rng = np.random.default_rng(rng.integers(2**63))
    new = np.where(flags, cand, succ)
    # A candidate is invalid if it names one of the target's successors of the row (that is a
    # reorder, not a mismatch) or repeats another slot of the new row.
    bad_rows = (flags & (cand[:, :, None] == succ[:, None, :]).any(axis=2)).any(axis=1)
    if s > 1:
        srt = np.sort(new, axis=1)
        bad_rows |= (srt[:, 1:] == srt[:, :-1]).any(axis=1)
    for a in np.flatnonzero(bad_rows):
        slots = np.flatnonzero(flags[a])
        allowed = np.setdiff1d(np.arange(v), succ[a], assume_unique=True)
        take = min(slots.shape[0], allowed.shape[0])
        new[a] = succ[a]
        new[a, slots[:take]] = fix_rng.choice(allowed, take, replace=False)
    d_boost = np.maximum(0.0, boost + background[succ] - background[new])
    d_boost = np.maximum(0.0, d_boost + spec.boost_noise * noise)
    return new.astype(np.int64), d_boost



