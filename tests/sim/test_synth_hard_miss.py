"""The ``hard_miss`` knob of word-class worlds (``treespec_sim/synth/world.py``, "Hard misses").

It renames slots of the drafter's class table from a random stream of its own: zero must leave a
world as it was, the renamed slots must grow monotonically with the knob, a renamed slot must
name a class outside the target's row, and the right token must then leave the drafter's
candidates (a miss no tree recovers).
"""

import dataclasses
import itertools

import numpy as np
import pytest

from treespec_sim.synth import make_world
from treespec_sim.synth.regimes import RegimeSpec, drafter_variant, get_regime


@pytest.fixture(scope="module")
def spec():
    """A small word-class world (V = 4096, 1024 classes of 4 variants, s = 8)."""
    return dataclasses.replace(get_regime("mid-entropy"), name="hm", vocab_size=4096,
                               mismatch=0.0, boost_noise=0.0)


def _tables(world):
    members, d_cls, d_boost = world.drafter._classes
    return members, np.asarray(d_cls), np.asarray(d_boost)


def _target_classes(world):
    """The target's class table, recovered from its token table (first variant per slot)."""
    members, _, _ = world.drafter._classes
    cls_of = world.drafter._cls_of
    m = members.shape[1]
    return cls_of[world.succ[members[:, 0]][:, ::m]]


def test_zero_and_other_knobs_leave_every_array_unchanged(spec):
    base = make_world(spec, seed=4)
    same = make_world(dataclasses.replace(spec, hard_miss=0.0), seed=4)
    hm = make_world(dataclasses.replace(spec, hard_miss=0.2), seed=4)
    for w in (same, hm):
        # the target and the drafter's noise draws are not touched by the knob
        for name in ("background", "topic_vectors", "succ", "boost"):
            assert np.array_equal(getattr(w, name), getattr(base, name)), name
        assert np.array_equal(w.drafter.background, base.drafter.background)
    assert np.array_equal(_tables(same)[1], _tables(base)[1])
    assert np.array_equal(_tables(same)[2], _tables(base)[2])
    # without mismatch the drafter's class table is the target's; with hard misses it is not
    assert np.array_equal(_tables(base)[1], _target_classes(base))
    assert not np.array_equal(_tables(hm)[1], _target_classes(hm))


def test_renamed_slots_grow_monotonically_and_leave_the_target_row(spec):
    worlds = [make_world(dataclasses.replace(spec, hard_miss=p), seed=7) for p in
              (0.05, 0.15, 0.4)]
    target = _target_classes(worlds[0])
    s = target.shape[1]
    renamed = []
    for w, p in zip(worlds, (0.05, 0.15, 0.4), strict=True):
        d_cls = _tables(w)[1]
        flags = d_cls != target
        renamed.append((flags, d_cls))
        # about p of all slots, never a class of the target's row, never a repeat in a row
        assert abs(flags.mean() - p) < 4 * np.sqrt(p * (1 - p) / flags.size)
        rows = np.flatnonzero(flags.any(axis=1))
        for c in rows[:200]:
            assert not set(d_cls[c, flags[c]].tolist()) & set(target[c].tolist())
            assert len(set(d_cls[c].tolist())) == s
    for (f_lo, c_lo), (f_hi, c_hi) in itertools.pairwise(renamed):
        assert not (f_lo & ~f_hi).any()                 # nested sets of renamed slots
        # a slot renamed at both levels names the same class, up to rare collisions
        both = f_lo & f_hi
        assert (c_lo[both] == c_hi[both]).mean() > 0.99


def test_renamed_slots_keep_their_effective_logit(spec):
    w0 = make_world(spec, seed=2)
    w1 = make_world(dataclasses.replace(spec, hard_miss=0.3), seed=2)
    members, d_cls, d_boost = _tables(w1)
    _, d_cls0, d_boost0 = _tables(w0)
    class_bg = np.logaddexp.reduce(np.asarray(w1.drafter.background)[members], axis=1)
    flags = d_cls != d_cls0
    eff1 = class_bg[d_cls] + d_boost
    eff0 = class_bg[d_cls0] + d_boost0
    # boost_noise = 0: the renamed slot's class_bg + boost is the old one unless clipped at 0
    keep = flags & (d_boost > 0)
    assert keep.sum() > 100
    np.testing.assert_allclose(eff1[keep], eff0[keep], rtol=0, atol=1e-9)


def test_a_hard_miss_puts_the_right_token_out_of_reach(spec):
    """At depth 1 the target's greedy token is among the drafter's first s m candidates at
    hard_miss = 0 (every miss is a near miss); with hard misses it falls out in about the share
    of renamed first slots."""
    k = spec.successors * spec.variants
    shares = []
    for p in (0.0, 0.3):
        w = make_world(dataclasses.replace(spec, hard_miss=p), seed=5)
        rng = np.random.default_rng(9)
        out = 0
        n = 300
        for _ in range(n):
            ctx = w.sample_context(rng)
            y = w.target_kernel(ctx.topic, 0.0).argmax(ctx.last_token)
            toks, _ = w.draft_lazy(ctx).top(0, k)
            out += int(y not in set(toks.tolist()))
        shares.append(out / n)
    assert shares[0] == 0.0
    assert 0.15 < shares[1] < 0.45


def test_hard_miss_validation_and_overrides():
    with pytest.raises(ValueError, match="hard_miss"):
        RegimeSpec(name="x", description="", vocab_size=64, hard_miss=1.5)
    with pytest.raises(ValueError, match="word-class"):
        RegimeSpec(name="x", description="", vocab_size=64, hard_miss=0.1)
    spec = dataclasses.replace(get_regime("mid-entropy"), hard_miss=0.1)
    # a vocabulary that cannot hold the variants drops them, and the word-class knob with them
    w = make_world(spec, seed=0, vocab_size=30)
    assert w.spec.variants == 1 and w.spec.hard_miss == 0.0
    assert drafter_variant("mid-entropy", "strong").hard_miss == 0.0
