"""TEV's cost claim on the real-model backend: its verifier decision + commit against follow's,
on the same trees (docs/real_models.md, ExitTrain).

Each round of a DDTree + follow decode is verified a second time, off the clock of the decode,
by both rules on the same tree and the same verification logits: *decide* is the target
rows' set-up (:class:`real_models.target.LogitsOracle`, lazy: follow reads ``depth + 1`` rows,
TEV gathers every node's edge probability) plus :func:`treespec_sim.verify.verify`; *commit*
is :meth:`real_models.target.TargetBackend.commit` of that rule's accepted path on a copy of the
round's KV cache (the drafter's context-cache update, the same work for both rules, is not
counted). The two rules alternate which goes first, ``repeats`` times per round; a round's time
per rule is the median over repeats.
"""

from __future__ import annotations

import numpy as np

from treespec_sim.stats import paired_bootstrap, ratio_ci
from treespec_sim.verify import expected_length, verify

from ._decode import run_from
from ._deps import require
from .backend import clock, prefill
from .target import LogitsOracle, TargetBackend

torch = require("torch")

__all__ = ["COMPARED", "tev_cost"]

#: The reference rule of the ratio and the rule compared with it.
REFERENCE = "follow"
CANDIDATE = "tev"
#: Both, in column order.
COMPARED = (REFERENCE, CANDIDATE)


def tev_cost(bundle, prompts, *, budget: int = 64, temperature: float = 1.0,
             new_tokens: int = 48, repeats: int = 5, rng: np.random.Generator) -> dict:
    """Per-round decide and commit seconds of follow and TEV on the same trees.

    Parameters
    ----------
    bundle : Bundle
    prompts : sequence of ndarray int64
    budget : int
        DDTree budget.
    temperature : float
        ``> 0`` (at ``T = 0`` both rules are one argmax walk).
    new_tokens, repeats : int
    rng : numpy.random.Generator
        The decode's draws and the timed verifications' draws.

    Returns
    -------
    dict
        ``decide``, ``commit`` (arrays ``(rounds, 2)``, seconds, columns :data:`COMPARED`),
        ``prompt`` (round -> prompt index), ``expected_tau`` (``(rounds, 2)``: each rule's
        exact E[τ] on the round's tree), ``tree_size``, and ``ratio``: TEV / follow of
        decide + commit summed over rounds, with a 95% paired bootstrap interval over prompts.
    """
    scratch = TargetBackend(bundle.target.model)
    decide, commit, etau, sizes, unit = [], [], [], [], []
    seeds = rng.integers(0, 2**63 - 1, size=len(prompts))
    for i, p in enumerate(prompts):
        pf = prefill(bundle, p, with_drafter=True)
        coins = np.random.default_rng(int(seeds[i]))

        def on_round(rnd, state, i=i, coins=coins):
            tree, logits, start = rnd.tree, state.forward.logits, state.length
            snap = bundle.target.snapshot()
            times = {r: ([], []) for r in COMPARED}
            for rep in range(repeats):
                for rule in (COMPARED if rep % 2 == 0 else COMPARED[::-1]):
                    t0 = clock(bundle)
                    out = verify(tree, LogitsOracle(logits, temperature), rule=rule, rng=coins)
                    t1 = clock(bundle)
                    scratch.restore(snap)
                    t2 = clock(bundle)
                    scratch.commit(start, [0, *out.path])
                    t3 = clock(bundle)
                    times[rule][0].append(t1 - t0)
                    times[rule][1].append(t3 - t2)
            decide.append([float(np.median(times[r][0])) for r in COMPARED])
            commit.append([float(np.median(times[r][1])) for r in COMPARED])
            rows = LogitsOracle(logits, temperature)
            etau.append([expected_length(tree, rows, rule=r) for r in COMPARED])
            sizes.append(tree.size)
            unit.append(i)

        run_from(bundle, pf, new_tokens, method="ddtree", rule="follow", budget=budget,
                 temperature=temperature, rng=np.random.default_rng(int(seeds[i]) + 1),
                 on_round=on_round)
    decide_a, commit_a = np.asarray(decide), np.asarray(commit)
    total = decide_a + commit_a
    boot = paired_bootstrap(total, units=np.asarray(unit), rng=rng)
    point, lo, hi = ratio_ci(boot, 1, 0, total.sum(axis=0))
    parts = {}
    for name, arr in (("decide", decide_a), ("commit", commit_a)):
        b = paired_bootstrap(arr, units=np.asarray(unit), rng=rng)
        parts[name] = ratio_ci(b, 1, 0, arr.sum(axis=0))
    return {"rules": list(COMPARED), "decide": decide_a, "commit": commit_a,
            "expected_tau": np.asarray(etau), "tree_size": np.asarray(sizes),
            "prompt": np.asarray(unit), "ratio": (point, lo, hi), "ratio_parts": parts}
