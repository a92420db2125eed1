r"""The simulation engine: one round, many rounds, and whole decoded sequences.

A round is: the drafter reads the context and returns ``log_q`` (L, V); a policy builds a
:class:`~treespec_sim.DraftTree`; the target oracle gives the rows; the verifier samples an
:class:`~treespec_sim.verify.Outcome`. Alongside the sample, every round records the exact
quantities of its fixed tree (exact :math:`E[\tau]`, coverage, the surrogate, the lost-mass
decomposition), so Monte Carlo is spent only on what must be sampled: the contexts.

Rounds come from decoding: a sequence starts at a fresh context and every round commits its
accepted tokens plus the bonus, so contexts follow the target's own law, as in real decoding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .exits import EXIT_CAUSES, exit_decomposition
from .policies import get_policy
from .surrogate import surrogate_length
from .verify import RULES, expected_length, verify
from .verify.outcome import Outcome

__all__ = [
    "DecodeResult",
    "RoundRecord",
    "RoundsSummary",
    "WorldLike",
    "decode",
    "run_round",
    "run_rounds",
    "summarize",
]


class WorldLike(Protocol):
    """What the engine needs from a backend (a synthetic world, or later a real model)."""

    depth: int
    vocab_size: int

    def sample_context(self, rng: np.random.Generator): ...

    def advance(self, ctx, tokens: Sequence[int]): ...

    def draft(self, ctx) -> np.ndarray: ...

    def target_oracle(self, ctx, tree, temperature: float): ...


@dataclass(frozen=True)
class RoundRecord:
    """Exact and sampled facts about one round.

    Attributes
    ----------
    tree_size : int
        Non-root nodes drafted (the budget actually used).
    expected_tau : float
        Exact :math:`E[\\tau]` of this round's fixed tree under the verifier.
    sampled_tau : int
        Tokens committed in the sampled outcome.
    coverage : float
        :math:`C_p(T)`.
    surrogate : float
        The drafter's own estimate :math:`1 + \\sum_u q(u)`.
    exit_by_depth : tuple of float
        Exit mass per depth ``0..L``.
    exit_by_cause : tuple of float
        Exit mass per cause, in :data:`treespec_sim.exits.EXIT_CAUSES` order.
    """

    tree_size: int
    expected_tau: float
    sampled_tau: int
    coverage: float
    surrogate: float
    exit_by_depth: tuple[float, ...]
    exit_by_cause: tuple[float, ...]


def _check_temperature(temperature: float) -> float:
    t = float(temperature)
    if not (t >= 0.0 and math.isfinite(t)):
        raise ValueError(f"temperature must be a finite number >= 0; got {temperature!r}")
    return t


def _check_rule(rule: str) -> None:
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; known rules: {', '.join(sorted(RULES))}")


def run_round(world: WorldLike, ctx, *, policy: str, budget: int, rule: str,
              temperature: float, rng: np.random.Generator) -> tuple[RoundRecord, Outcome]:
    """Draft, build, verify once; return the round's record and sampled outcome."""
    build = get_policy(policy)
    log_q = world.draft(ctx)
    tree = build(log_q, budget, root_token=int(ctx.last_token))
    oracle = world.target_oracle(ctx, tree, temperature)
    outcome = verify(tree, oracle, rule=rule, rng=rng)
    decomp = exit_decomposition(tree, oracle, depth_limit=world.depth)
    record = RoundRecord(
        tree_size=tree.size,
        expected_tau=expected_length(tree, oracle, rule=rule),
        sampled_tau=outcome.tau,
        coverage=decomp.coverage,
        surrogate=surrogate_length(tree, log_q),
        exit_by_depth=tuple(float(x) for x in decomp.by_depth),
        exit_by_cause=tuple(float(x) for x in decomp.by_depth_cause.sum(axis=0)),
    )
    return record, outcome


@dataclass(frozen=True)
class DecodeResult:
    """A decoded sequence: emitted tokens (truncated to the request) and per-round records."""

    tokens: np.ndarray
    records: tuple[RoundRecord, ...]


def decode(world: WorldLike, ctx, *, policy: str, budget: int, rule: str, temperature: float,
           n_tokens: int, rng: np.random.Generator) -> DecodeResult:
    """Speculatively decode ``n_tokens`` tokens from ``ctx`` (the last round is truncated).

    Every round commits its accepted path and bonus token; the next round drafts from the new
    context. The emitted tokens follow the target's law exactly when the verifier is lossless.
    """
    temperature = _check_temperature(temperature)
    _check_rule(rule)
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be >= 0; got {n_tokens}")
    out: list[int] = []
    records: list[RoundRecord] = []
    while len(out) < n_tokens:
        record, outcome = run_round(world, ctx, policy=policy, budget=budget, rule=rule,
                                    temperature=temperature, rng=rng)
        records.append(record)
        out.extend(outcome.tokens)
        ctx = world.advance(ctx, outcome.tokens)
    return DecodeResult(np.asarray(out[:n_tokens], dtype=np.int64), tuple(records))


def run_rounds(world: WorldLike, *, policy: str, budget: int, rule: str, temperature: float,
               rounds: int, rng: np.random.Generator, rounds_per_sequence: int = 16
               ) -> list[list[RoundRecord]]:
    """Run ``rounds`` rounds, grouped into decoded sequences of ``rounds_per_sequence``.

    Returns one list of records per sequence (the unit of independence for confidence
    intervals: rounds within a sequence share context).
    """
    temperature = _check_temperature(temperature)
    _check_rule(rule)
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1; got {rounds}")
    if rounds_per_sequence < 1:
        raise ValueError(f"rounds_per_sequence must be >= 1; got {rounds_per_sequence}")
    sequences: list[list[RoundRecord]] = []
    done = 0
    while done < rounds:
        ctx = world.sample_context(rng)
        seq: list[RoundRecord] = []
        for _ in range(min(rounds_per_sequence, rounds - done)):
            record, outcome = run_round(world, ctx, policy=policy, budget=budget, rule=rule,
                                        temperature=temperature, rng=rng)
            seq.append(record)
            ctx = world.advance(ctx, outcome.tokens)
        sequences.append(seq)
        done += len(seq)
    return sequences


@dataclass(frozen=True)
class MeanCI:
    """A mean with a two-sided confidence interval."""

    mean: float
    low: float
    high: float


@dataclass(frozen=True)
class RoundsSummary:
    """Means over rounds, with confidence intervals over sequences (batch means)."""

    rounds: int
    sequences: int
    expected_tau: MeanCI
    sampled_tau: MeanCI
    tree_size: float
    coverage: float
    surrogate: float
    exit_by_cause: dict[str, float]
    exit_by_depth: tuple[float, ...]


def _mean_ci(batches: list[np.ndarray], level: float) -> MeanCI:
    """Mean of all values; CI from the t distribution over per-sequence means."""
    from scipy import stats

    values = np.concatenate(batches)
    mean = float(values.mean())
    if len(batches) < 2:
        return MeanCI(mean, math.nan, math.nan)
    # Weight sequences equally only when equally long; otherwise use the ratio estimator's
    # batch variance around the pooled mean.
    sizes = np.array([b.size for b in batches], dtype=np.float64)
    sums = np.array([b.sum() for b in batches])
    k = len(batches)
    resid = sums - mean * sizes
    se = math.sqrt(float((resid ** 2).sum()) / (k - 1) / k) / sizes.mean()
    half = float(stats.t.ppf(0.5 + level / 2, k - 1)) * se
    return MeanCI(mean, mean - half, mean + half)


def summarize(sequences: list[list[RoundRecord]], *, level: float = 0.95) -> RoundsSummary:
    """Aggregate :func:`run_rounds` output; intervals treat sequences as independent."""
    if not sequences or not all(sequences):
        raise ValueError("sequences must be a non-empty list of non-empty record lists")
    flat = [r for seq in sequences for r in seq]

    def batches(field: str) -> list[np.ndarray]:
        return [np.array([getattr(r, field) for r in seq], dtype=np.float64)
                for seq in sequences]

    by_cause = np.mean([r.exit_by_cause for r in flat], axis=0)
    by_depth = np.mean([r.exit_by_depth for r in flat], axis=0)
    return RoundsSummary(
        rounds=len(flat),
        sequences=len(sequences),
        expected_tau=_mean_ci(batches("expected_tau"), level),
        sampled_tau=_mean_ci(batches("sampled_tau"), level),
        tree_size=float(np.mean([r.tree_size for r in flat])),
        coverage=float(np.mean([r.coverage for r in flat])),
        surrogate=float(np.mean([r.surrogate for r in flat])),
        exit_by_cause={c: float(x) for c, x in zip(EXIT_CAUSES, by_cause, strict=True)},
        exit_by_depth=tuple(float(x) for x in by_depth),
    )
