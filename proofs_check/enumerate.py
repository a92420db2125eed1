"""Exact laws by enumeration: of one verification round, and of whole decoded sequences.

Everything here is computed analytically (branch probabilities, no sampling), for tiny
vocabularies. The follow verifier's law is enumerated over *all* joint target pre-draws, which
shares no formula with the exit law it is supposed to realise.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from treespec_sim import DraftTree
from treespec_sim.engine import run_round
from treespec_sim.exits import exit_law
from treespec_sim.rows import ArrayOracle, dense_rows
from treespec_sim.verify import RULES
from treespec_sim.verify.rrs import acceptance_steps, run_node

__all__ = [
    "ROUND_LAWS",
    "RoundLaw",
    "decode_law",
    "exit_round_law",
    "follow_round_law_bruteforce",
    "max_law_gap",
    "sample_match_round_law",
    "target_law",
]

#: A round law maps (tree, target rows) to {emitted token tuple: probability}.
RoundLaw = Callable[[DraftTree, np.ndarray], dict[tuple[int, ...], float]]


def follow_round_law_bruteforce(tree: DraftTree, rows: np.ndarray
                                ) -> dict[tuple[int, ...], float]:
    """Law of the tokens predraw-and-follow emits, over all ``V^(n+1)`` joint pre-draws."""
    rows = np.asarray(rows, dtype=np.float64)
    n1, V = rows.shape
    if V ** n1 > 2_000_000:
        raise ValueError(f"too many joint draws to enumerate: V^(n+1) = {V}^{n1}")
    child = {(int(tree.parent[v]), int(tree.token[v])): v for v in range(n1 - 1, 0, -1)}
    law: dict[tuple[int, ...], float] = defaultdict(float)
    for draws in itertools.product(range(V), repeat=n1):
        prob = 1.0
        for v, y in enumerate(draws):
            prob *= rows[v, y]
            if prob == 0.0:
                break
        if prob == 0.0:
            continue
        v, emitted = 0, []
        while (v, draws[v]) in child:
            emitted.append(draws[v])
            v = child[(v, draws[v])]
        emitted.append(draws[v])
        law[tuple(emitted)] += prob
    return dict(law)


def exit_round_law(tree: DraftTree, rows: np.ndarray, *, residual: bool = True
                   ) -> dict[tuple[int, ...], float]:
    """Law of TEV's emitted tokens: exit node ``v ~ w``, bonus from ``v``'s residual.

    ``residual=False`` is a known-buggy variant (bonus drawn from the full row, so a token
    the tree covers can be emitted as a bonus): the losslessness checks must reject it.
    """
    rows = np.asarray(rows, dtype=np.float64)
    w = exit_law(tree, rows)
    paths = [(), *tree.paths()]
    law: dict[tuple[int, ...], float] = defaultdict(float)
    for v in range(tree.n_nodes):
        if w[v] <= 0:
            continue
        r = rows[v].copy()
        if residual:
            r[tree.token[tree.children(v)]] = 0.0
        if r.sum() <= 0.0:  # exit mass that is rounding only (row sums to 1 - 1e-16)
            if w[v] > 1e-9:
                raise ValueError(f"node {v} has exit mass {w[v]!r} but no residual mass")
            continue
        r = r / r.sum()
        for y in np.flatnonzero(r > 0):
            law[(*paths[v], int(y))] += w[v] * r[y]
    return dict(law)


def sample_match_round_law(tree: DraftTree, rows: np.ndarray) -> dict[tuple[int, ...], float]:
    """The package's exact law of ``"sample-match"`` (SGLang's target-only sampling)."""
    return RULES["sample-match"].round_law(tree, ArrayOracle(rows, tree), None)


#: Each lossless rule for deterministic trees -> its exact round law (``follow`` and ``tev``
#: written here independently of the package; ``sample-match`` the package's own, checked
#: against the target by the same enumeration).
ROUND_LAWS: dict[str, RoundLaw] = {
    "follow": follow_round_law_bruteforce,
    "tev": exit_round_law,
    "sample-match": sample_match_round_law,
}


def decode_law(world, ctx, *, method, budget: int | None, round_law: RoundLaw,
               temperature: float, n_tokens: int, **round_args
               ) -> dict[tuple[int, ...], float]:
    """Exact law of the first ``n_tokens`` tokens of speculative decoding from ``ctx``.

    Branches over every round outcome, committing the emitted tokens and continuing until
    ``n_tokens``. Each round's tree and target rows come from
    :func:`treespec_sim.engine.run_round` (``sample=False``: the same loop the sweep runs), so
    ``method`` is any deterministic registered method (a name); ``round_law`` gives
    the round's emission law on them. ``round_args`` go to ``run_round`` (``cost``,
    ``options``).
    """
    law: dict[tuple[int, ...], float] = defaultdict(float)
    no_draws = np.random.default_rng(0)  # deterministic methods draw nothing

    def recurse(c, prefix: tuple[int, ...], prob: float) -> None:
        if len(prefix) >= n_tokens:
            law[prefix[:n_tokens]] += prob
            return
        rnd = run_round(world, c, method=method, budget=budget, temperature=temperature,
                        rng=no_draws, sample=False, **round_args)
        if rnd.draft.sampled:
            raise ValueError(f"decode_law enumerates deterministic trees; {method!r} samples "
                             "its tokens (use proofs_check.sampled)")
        tree, rows = rnd.tree, dense_rows(rnd.rows)
        for emitted, p in round_law(tree, rows).items():
            if p > 0:
                recurse(world.advance(c, emitted), prefix + emitted, prob * p)

    recurse(ctx, (), 1.0)
    return dict(law)


def target_law(world, ctx, *, temperature: float, n_tokens: int
               ) -> dict[tuple[int, ...], float]:
    """The target's own law of the next ``n_tokens`` tokens (all ``V^n`` strings)."""
    law = {}
    for seq in itertools.product(range(world.vocab_size), repeat=n_tokens):
        p = world.sequence_prob(ctx, seq, temperature)
        if p > 0:
            law[seq] = p
    return law


def max_law_gap(a: dict, b: dict) -> float:
    """Largest absolute difference between two laws over the union of their supports."""
    keys = set(a) | set(b)
    return max((abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in keys), default=0.0)


# ---------------------------------------------------------------------- sampled trees
def draw_tuples(q: np.ndarray, k: int, *, replacement: bool):
    """Every ordered k-tuple of draws from ``q`` with its probability.

    ``replacement=True``: i.i.d. draws; ``False``: sequential draws without replacement
    (draw ``i`` from ``q`` renormalised over the tokens not yet drawn).
    """
    support = [int(x) for x in np.flatnonzero(q > 0)]
    if replacement:
        for tup in itertools.product(support, repeat=k):
            yield tup, float(np.prod([q[x] for x in tup]))
        return
    for tup in itertools.permutations(support, k):
        prob, left = 1.0, q.copy()
        for x in tup:
            # renormalise by the mass actually left, not 1 - sum(drawn): the subtraction
            # rounds to 0 when q is nearly a point mass and the rest is tiny but positive
            prob *= q[x] / left.sum()
            left[x] = 0.0
        yield tup, prob


def sampled_round_law(shape: DraftTree, row_fn, proposal_fn, *, replacement: bool,
                      verify_without_replacement: bool) -> dict[tuple[int, ...], float]:
    """Law of the tokens emitted by one round on a *sampled* tree, enumerated exactly.

    ``shape`` fixes how many children each node gets (its tokens are ignored); node tokens are
    drawn from ``proposal_fn(path)`` (i.i.d. or without replacement, per ``replacement``), and
    the tree is verified with the package's RRS step rule (``verify_without_replacement``
    selects RRSw). ``row_fn(path)`` is the target's next-token law after ``path``. Mismatched
    settings (e.g. i.i.d. draws verified as without replacement) are known-buggy variants.
    """

    def node_law(path: tuple[int, ...], node: int) -> dict[tuple[int, ...], float]:
        kids = shape.children(node)
        p = np.asarray(row_fn(path), dtype=np.float64)
        law: dict[tuple[int, ...], float] = defaultdict(float)
        if kids.size == 0:
            for y in np.flatnonzero(p > 0):
                law[(int(y),)] += float(p[y])
            return law
        q = np.asarray(proposal_fn(path), dtype=np.float64)
        for tokens, prob in draw_tuples(q, kids.size, replacement=replacement):
            accepts, residual = run_node(acceptance_steps(p, q, np.array(tokens),
                                                 verify_without_replacement))
            reach = 1.0
            for i, a in enumerate(accepts):
                if a > 0:
                    for s, ps in node_law((*path, tokens[i]), int(kids[i])).items():
                        law[(tokens[i], *s)] += prob * reach * a * ps
                reach *= 1.0 - a
            if reach > 0:
                for y in np.flatnonzero(residual > 0):
                    law[(int(y),)] += prob * reach * float(residual[y])
        return law

    return dict(node_law((), 0))


def extend_law(law: dict[tuple[int, ...], float], row_fn, n_tokens: int
               ) -> dict[tuple[int, ...], float]:
    """Continue every emitted string with target draws up to ``n_tokens`` (or truncate)."""
    out: dict[tuple[int, ...], float] = defaultdict(float)

    def grow(s: tuple[int, ...], prob: float) -> None:
        if len(s) >= n_tokens:
            out[s[:n_tokens]] += prob
            return
        p = np.asarray(row_fn(s), dtype=np.float64)
        for y in np.flatnonzero(p > 0):
            grow((*s, int(y)), prob * float(p[y]))

    for s, prob in law.items():
        grow(s, prob)
    return dict(out)
