r"""ExitTrain on the tiny models: the public recipe, its ablation, and the earlier exit-law loss.

**The public recipe** (hsj576/TEV's ExitTrain, scaled to the tiny models; docs/real_models.md,
ExitTrain): ``regen`` continues training-split windows greedily with the target (the training
data); ``finetune`` trains a copy of the drafter on them with

.. math::
    \mathcal L = \mathrm{CE} + c \cdot \frac1N \sum_v w(v)\,(-\log q_{\mathrm{depth}(v)}(x_v)),

CE the drafter's own objective (:func:`plain_term`) at random anchors whose whole block is
regenerated text, the tree term (:mod:`real_models._tree_term`) on one DDTree per anchor built
from the drafter's detached marginals and scored by the frozen target in one tree-attention
pass over the last ``W`` context tokens (temperature 1), weights ``P`` (released),
``P-rho`` or ``P-rho-depth``; ``c = 0`` is the plain fine-tune on the same batches. ``summarize``
merges ``evaluate`` files of ``ARM@SEED`` drafters into the ablation table (paired over prompts
and over seeds); ``tev-cost`` times TEV's verifier decision + commit against follow's on the
same trees (:mod:`real_models._tev_cost`).

**The earlier loss** (``collect``, ``train``, ``marginals``; kept for its recorded results):
The exit law (``docs/theory/exit_law.md``) on the drafter's own decoding rounds. On a fixed
tree, adding the child ``(v, a)`` raises the target coverage by :math:`P(v)\,p_v(a)`, summed
over the tokens ``a`` the tree does not yet hold under ``v`` the exit mass
:math:`w(v) = P(v)\rho(v)`. The term is

.. math::
    \mathcal L_{\mathrm{exit}} = -\frac{1}{Z}\sum_{v:\ \mathrm{depth}(v) < L}\ \sum_{a \notin
    \mathrm{ch}(v)} P(v)\,p_v(a)\,\log q_{\mathrm{depth}(v)+1}(a),

``Z`` the batch's total weight (:func:`exit_targets`, :func:`exit_term`); ``--loss combined
--exit-weight λ`` adds it to :func:`plain_term`, ``--loss plain`` is the control.

Commands (docs/real_models.md, ExitTrain)::

    python -m real_models.exittrain regen --out runs/pub/data.npz --seqs 400
    python -m real_models.exittrain finetune --data runs/pub/data.npz --tree-weight 0.1 \
        --weighting P --seed 0 --out-dir runs/pub/P-c0.1_s0        # --tree-weight 0: plain
    python -m real_models.exittrain evaluate --drafters P-c0.1@0=runs/pub/P-c0.1_s0 \
        --budgets 16 64 256 --temperature 0 --out eval/P-c0.1@0_T0.json
    python -m real_models.exittrain summarize --evals eval/*.json --out summary.json
    python -m real_models.exittrain tev-cost --budget 64 --prompts 32 --out tev_cost.json
    python -m real_models.exittrain collect --out runs/et2/data.npz --budget 16 64 256
    python -m real_models.exittrain train --loss combined --exit-weight 0.1 --data ... --out-dir DIR
    python -m real_models.exittrain marginals --data val.npz --drafters base= plain=DIR2 ...
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from treespec_sim.cli import (
    OneLineParser,
    add_budgets,
    add_debug,
    add_new_tokens,
    add_out,
    add_prompts,
    add_repeats,
    add_seed,
    add_temperature,
    add_threads,
    nonnegative_int,
    positive_float,
    positive_int,
    run_subcommand,
    temperature,
)
from treespec_sim.engine import Round
from treespec_sim.exits import edge_probabilities, reach_from_edges
from treespec_sim.files import atomic_write_text, read_npz
from treespec_sim.stats import mean_ci as stats_mean_ci

from ._decode import run_from
from ._deps import require
from ._tev_cost import tev_cost
from ._tree_term import (
    FLOOR,
    WEIGHTINGS,
    build_trees,
    edge_probs_from_rows,
    node_weights,
    score_trees,
    tree_term,
)
from .backend import prefill
from .bundle import TINY_DRAFTER, TINY_TARGET, load
from .target import LogitsOracle
from .train import load_corpus, target_features
from .validate import load_prompts

torch = require("torch")

__all__ = ["anchor_range", "block_logp", "build_parser", "collect", "cosine_lr", "drafter_loss",
           "evaluate", "exit_targets", "exit_term", "expected_tau", "finetune", "main",
           "marginal_stats", "plain_term", "public_loss", "regenerate", "summarize",
           "summary_table", "train", "validation_prompts"]


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def exit_targets(tree, rows, depth_limit: int) -> list[tuple[int, int, float]]:
    r"""Sparse :math:`W`: ``(d, a, weight)`` with ``d`` the 0-based marginal index (depth - 1).

    ``rows`` is a target oracle (``row(v)``, ``edge_probs(tree)``).
    """
    reach = reach_from_edges(tree, edge_probabilities(tree, rows))
    children = tree.child_lists
    out: dict[tuple[int, int], float] = {}
    for v in np.flatnonzero(reach > 0):
        v = int(v)
        d = int(tree.depth[v])
        if d >= depth_limit:
            continue
        row = np.array(rows.row(v), dtype=np.float64)
        kids = children[v]
        row[tree.token[np.asarray(kids, dtype=np.int64)]] = 0.0
        mass = reach[v] * row
        for a in np.flatnonzero(mass > 1e-6):
            key = (d, int(a))
            out[key] = out.get(key, 0.0) + float(mass[a])
    return [(d, a, w) for (d, a), w in out.items()]


def training_prompts(bundle, n: int, length: int, seed: int) -> list[np.ndarray]:
    """``n`` windows of ``length`` tokens from training-split files (never the held-out ones)."""
    train = load_corpus()["train"]
    rng = np.random.default_rng(seed)
    out = []
    for i in rng.permutation(len(train)):
        ids = bundle.tokenizer(train[int(i)][1], add_special_tokens=False)["input_ids"]
        if len(ids) < length + 1:
            continue
        s = int(rng.integers(0, len(ids) - length))
        out.append(np.asarray(ids[s:s + length], dtype=np.int64))
        if len(out) == n:
            break
    return out


def collect(bundle, *, n_seqs: int, prompt_len: int, gen_len: int, budget,
            temperature: float, seed: int, weight_temperature: float | None = None,
            val_skip: int | None = None) -> dict:
    """Decode training prompts with DDTree; per round: anchor position and sparse ``W``.

    ``budget`` is one DDTree budget or a sequence of them (prompt ``i`` is decoded at
    ``budget[i % len(budget)]``: the trees of a mix of inference-time budgets). With
    ``val_skip``, the prompts are :func:`validation_prompts` (for :func:`marginal_stats`).

    Decoding runs at ``temperature``; the exit law that weights the loss uses the target's rows
    at ``weight_temperature`` (default: the same). At ``T = 0`` the rows are one-hot and ``W``
    is one token per round; at ``T = 1`` it spreads over every depth the target can exit at.
    """
    wt = temperature if weight_temperature is None else float(weight_temperature)
    budgets = [int(budget)] if np.isscalar(budget) else [int(b) for b in budget]
    if val_skip is None:
        prompts = training_prompts(bundle, n_seqs, prompt_len, seed)
    else:
        prompts = validation_prompts(bundle, n_seqs, prompt_len, seed, val_skip)
    L = bundle.depth
    seqs, anchors, entries = [], [], []
    t0 = time.perf_counter()
    for si, p in enumerate(prompts):
        recs = []

        def on_round(rnd, state, recs=recs):
            # the rows at the weight temperature, from this round's verification logits
            w = exit_targets(rnd.tree, LogitsOracle(state.forward.logits, wt), L)
            recs.append((state.length, w))

        pf = prefill(bundle, p, with_drafter=True)
        res = run_from(bundle, pf, gen_len, method="ddtree", rule="follow",
                       budget=budgets[si % len(budgets)],
                       temperature=temperature, rng=np.random.default_rng([seed, si]),
                       on_round=on_round)
        seq = np.concatenate([p, np.asarray(res.tokens[:gen_len], dtype=np.int64)])
        for a, w in recs:
            if a + L < seq.size:
                anchors.append((si, a))
                entries.append(w)
        seqs.append(seq)
        if si % 50 == 0:
            _log(f"collect {si + 1}/{len(prompts)} ({time.perf_counter() - t0:.0f}s)")
    flat = [(r, d, a, w) for r, ws in enumerate(entries) for d, a, w in ws]
    return {"seqs": np.stack(seqs), "anchors": np.asarray(anchors, dtype=np.int64),
            "w_round": np.asarray([f[0] for f in flat], dtype=np.int64),
            "w_depth": np.asarray([f[1] for f in flat], dtype=np.int64),
            "w_token": np.asarray([f[2] for f in flat], dtype=np.int64),
            "w_mass": np.asarray([f[3] for f in flat], dtype=np.float32),
            "meta": json.dumps({"budget": budgets if len(budgets) > 1 else budgets[0],
                                "temperature": temperature,
                                "weight_temperature": wt, "seed": seed,
                                "prompt_len": prompt_len, "gen_len": gen_len,
                                "seconds": time.perf_counter() - t0})}


LOSSES = ("exit", "plain", "combined")


def block_logp(model, spec, embed, head, x, h, a):
    """The drafter's log-marginals for blocks anchored at ``a`` ``(b, A)`` in sequences ``x``
    ``(b, N)`` with target features ``h``, all blocks in one pass (one attention mask), as in
    ``real_models.train``; returns ``(logp (b, A, L, V), labels (b, A, L))``."""
    b, A = a.shape
    K = spec.block_size
    L = K - 1
    ctx_pos = torch.arange(x.shape[1])[None]
    offs = torch.arange(K)
    pos = (a[:, :, None] + offs).reshape(b, A * K)
    tokens = torch.full((b, A, K), spec.mask_token_id, dtype=torch.long)
    tokens[:, :, 0] = torch.gather(x, 1, a)
    ctx_vis = (ctx_pos[:, None, :] < a.reshape(b, A, 1)).repeat_interleave(K, dim=1)
    blk = torch.arange(A).repeat_interleave(K)
    blk_vis = (blk[:, None] == blk[None, :]).expand(b, -1, -1)
    mask = torch.cat([ctx_vis, blk_vis], dim=2)[:, None]
    emb = embed(tokens.view(b, -1)) * spec.input_embedding_scale
    out = model.forward_train(emb, pos, h, ctx_pos.expand(b, -1), mask)
    out = out.view(b, A, K, -1)[:, :, 1:]
    logp = torch.log_softmax(model.logits(out, head).float(), dim=-1)
    labels = torch.gather(x, 1, (a[:, :, None] + offs[1:]).reshape(b, -1)).view(b, A, L)
    return logp, labels


def plain_term(logp, labels):
    r"""The drafter's ordinary loss (``real_models.train``): per-token mean cross-entropy to the
    committed continuation, depth ``k`` weighted ``0.85^(k-1)`` (weights normalised to 1).

    ``logp``: ``(..., L, V)`` log-probabilities; ``labels``: ``(..., L)`` token ids.
    """
    L = logp.shape[-2]
    w = torch.tensor([0.85 ** k for k in range(L)], dtype=logp.dtype)
    nll = -torch.gather(logp, -1, labels[..., None])[..., 0]
    return (nll * w).sum() / (w.sum() * (nll.numel() // L))


def exit_term(logp, W):
    r"""The exit-weighted term: :math:`-\sum W\log q / \sum W`, a cross-entropy per unit of exit
    mass (so on the same scale as :func:`plain_term`); 0 (with a graph) when ``W`` is all 0."""
    z = W.sum()
    return -(W * logp).sum() / z if z > 0 else logp.sum() * 0.0


def drafter_loss(logp, labels, W, *, loss: str, exit_weight: float = 1.0):
    r"""``plain``: :func:`plain_term`; ``exit``: :func:`exit_term` alone (the first ExitTrain);
    ``combined``: ``plain_term + exit_weight * exit_term`` (the exit term *added* to the
    drafter's ordinary loss)."""
    if loss == "plain":
        return plain_term(logp, labels)
    if loss == "exit":
        return exit_term(logp, W)
    if loss == "combined":
        return plain_term(logp, labels) + exit_weight * exit_term(logp, W)
    raise ValueError(f"loss must be one of {', '.join(LOSSES)}; got {loss!r}")


def train(bundle, data: dict, *, loss: str, steps: int, lr: float, batch: int,
          anchors_per_seq: int, seed: int, exit_weight: float = 1.0):
    """Fine-tune a copy of ``bundle.drafter``; return (drafter, log dict)."""
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}; got {loss!r}")
    spec = bundle.spec
    L = spec.depth
    V = bundle.vocab_size
    target = bundle.target.model
    seqs = torch.from_numpy(data["seqs"])
    feats = target_features(target, seqs, list(spec.target_layer_ids))
    anchors = data["anchors"]
    by_seq: dict[int, list[int]] = {}
    for r, (s, _a) in enumerate(anchors):
        by_seq.setdefault(int(s), []).append(r)
    # dense W per round, built on demand from the sparse arrays
    order = np.argsort(data["w_round"], kind="stable")
    starts = np.searchsorted(data["w_round"][order], np.arange(len(anchors) + 1))
    model = copy.deepcopy(bundle.drafter).float()
    model.train()
    embed = target.get_input_embeddings()
    head = target.get_output_embeddings()
    for p in target.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    rng = np.random.default_rng(seed)
    seq_ids = np.asarray(sorted(by_seq))
    losses = []
    t0 = time.perf_counter()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 20)
        idx = rng.choice(seq_ids, size=batch, replace=False)
        rounds = np.stack([rng.choice(by_seq[int(s)], size=anchors_per_seq,
                                      replace=len(by_seq[int(s)]) < anchors_per_seq)
                           for s in idx])                                  # (b, A)
        b, A = rounds.shape
        a = torch.from_numpy(anchors[rounds.reshape(-1), 1].reshape(b, A))
        x = seqs[idx]
        h = feats[idx]
        logp, labels = block_logp(model, spec, embed, head, x, h, a)      # (b, A, L, V)
        W = None
        if loss != "plain":
            W = torch.zeros((b * A, L, V))
            for j, r in enumerate(rounds.reshape(-1)):
                sl = order[starts[r]:starts[r + 1]]
                if sl.size:
                    W[j, torch.from_numpy(data["w_depth"][sl]),
                      torch.from_numpy(data["w_token"][sl])] += torch.from_numpy(
                          data["w_mass"][sl])
            W = W.view(b, A, L, V)
        total = drafter_loss(logp, labels, W, loss=loss, exit_weight=exit_weight)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(total.detach()))
        if step % 50 == 0 or step == steps - 1:
            _log(f"{loss} step {step}/{steps} loss {np.mean(losses[-50:]):.3f} "
                 f"({time.perf_counter() - t0:.0f}s)")
    model.eval()
    return model, {"loss": loss, "exit_weight": exit_weight if loss == "combined" else None,
                   "steps": steps, "lr": lr, "batch": batch,
                   "anchors_per_sequence": anchors_per_seq, "seed": seed,
                   "final_loss": float(np.mean(losses[-50:])),
                   "seconds": time.perf_counter() - t0}


# ---------------------------------------------------------------------------- public recipe
#: ``finetune`` defaults, the public recipe scaled to the tiny models (docs/real_models.md,
#: ExitTrain): tree budget 32 as released, context window 32 (released 64; the tiny block is 8
#: tokens, not 16), 8 anchors per sequence (released 32, on sequences of thousands of tokens).
PUBLIC_BUDGET = 32
PUBLIC_WINDOW = 32


@torch.no_grad()
def regenerate(bundle, prompts, gen_len: int, *, batch: int = 64) -> np.ndarray:
    """The target's greedy continuations of ``prompts`` (the public recipe's training data).

    Parameters
    ----------
    bundle : Bundle
    prompts : sequence of ndarray int64 (P,)
        Equal-length prompts.
    gen_len : int
        Tokens to generate after each prompt (argmax of the target's logits, first maximal
        index on ties, with a KV cache).

    Returns
    -------
    ndarray int64 (n, P + gen_len)
    """
    model = bundle.target.model
    out = []
    for i in range(0, len(prompts), batch):
        x = torch.from_numpy(np.stack(prompts[i:i + batch]).astype(np.int64))
        cache = {_cache_keyword(model): transformers_cache(model)}
        res = model(input_ids=x, use_cache=True, logits_to_keep=1, **cache)
        toks = [x]
        for _ in range(gen_len):
            nxt = res.logits[:, -1].float().argmax(-1, keepdim=True)
            toks.append(nxt)
            res = model(input_ids=nxt, use_cache=True, **cache)
        out.append(torch.cat(toks, dim=1).numpy())
        _log(f"regenerate {min(i + batch, len(prompts))}/{len(prompts)}")
    return np.concatenate(out).astype(np.int64)


def _cache_keyword(model) -> str:
    """``cache`` where ``model.forward`` takes it (newer transformers), else
    ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters \
        else "past_key_values"


def transformers_cache(model):
    """An empty ``transformers.DynamicCache`` for ``model``."""
    return require("transformers").DynamicCache(config=model.config)


def cosine_lr(step: int, steps: int, peak: float, warmup_frac: float) -> float:
    """The public recipe's schedule: linear warm-up over ``max(1, ceil(warmup_frac * steps))``
    steps, then cosine decay from ``peak`` to 0 at ``steps``."""
    warm = max(1, math.ceil(warmup_frac * steps))
    if step < warm:
        return peak * (step + 1) / warm
    return peak * 0.5 * (1.0 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))


def anchor_range(n_tokens: int, prompt_len: int, depth: int, window: int) -> tuple[int, int]:
    """Anchors ``lo <= a <= hi`` whose whole block ``a+1 .. a+depth`` is regenerated text and
    with ``window`` context tokens before them."""
    lo, hi = max(prompt_len - 1, window), n_tokens - 1 - depth
    if hi < lo:
        raise ValueError(f"no anchor fits: sequences of {n_tokens} tokens, prompt {prompt_len}, "
                         f"depth {depth}, window {window}")
    return lo, hi


def public_loss(ce, tree, tree_weight: float):
    r"""The public recipe's loss: ``ce + tree_weight * tree`` (``tree`` is ignored, and may be
    None, at ``tree_weight == 0``: the plain cross-entropy fine-tune).

    ``ce``: :func:`plain_term`; ``tree``: :func:`real_models._tree_term.tree_term`.
    """
    if tree_weight == 0:
        return ce
    return ce + tree_weight * tree


def finetune(bundle, data: dict, *, tree_weight: float, weighting: str = "P", steps: int,
             lr: float, batch: int, anchors_per_seq: int, seed: int,
             budget: int = PUBLIC_BUDGET, window: int = PUBLIC_WINDOW,
             warmup_frac: float = 0.005, tree_every: int = 1):
    r"""The public recipe: ``plain + tree_weight × tree term`` on regenerated sequences.

    Each step draws ``batch`` sequences and ``anchors_per_seq`` distinct anchors per sequence
    (:func:`anchor_range`) from ``numpy.random.default_rng(seed)``, the same draws whatever
    ``tree_weight`` (so arms with one seed train on the same batches). The loss is
    :func:`plain_term` at every anchor plus, when ``tree_weight > 0``, ``tree_weight`` ×
    :func:`real_models._tree_term.tree_term` on one DDTree per anchor (budget ``budget``, built
    from the detached marginals of this step's forward) scored by the frozen target over the
    last ``window`` context tokens; with ``tree_every = k`` the tree term is taken at every
    ``k``-th anchor of a sequence only (an unbiased estimate of the same per-node mean, for CPU
    time; ``1``: every anchor, as released). AdamW (betas 0.9, 0.95, weight decay 0.01),
    :func:`cosine_lr`, gradient-norm clip 1, warm start from ``bundle.drafter``.

    Returns
    -------
    (drafter, dict)
        The fine-tuned copy and its training record.
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {', '.join(WEIGHTINGS)}; got {weighting!r}")
    spec = bundle.spec
    L = spec.depth
    target = bundle.target.model
    seqs_np = np.asarray(data["seqs"], dtype=np.int64)
    n_seqs, N = seqs_np.shape
    lo, hi = anchor_range(N, int(data["prompt_len"]), L, window)
    if anchors_per_seq > hi - lo + 1:
        raise ValueError(f"anchors per sequence ({anchors_per_seq}) is more than the "
                         f"{hi - lo + 1} positions with a whole regenerated block")
    seqs = torch.from_numpy(seqs_np)
    feats = target_features(target, seqs, list(spec.target_layer_ids))
    model = copy.deepcopy(bundle.drafter).float()
    model.train()
    embed = target.get_input_embeddings()
    head = target.get_output_embeddings()
    for p in target.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    rng = np.random.default_rng(seed)
    ce_log, tree_log, reach_log, tree_s = [], [], [], 0.0
    t0 = time.perf_counter()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, steps, lr, warmup_frac)
        idx = rng.choice(n_seqs, size=batch, replace=False)
        anchors = np.stack([np.sort(rng.choice(np.arange(lo, hi + 1), size=anchors_per_seq,
                                               replace=False)) for _ in idx])       # (b, A)
        a = torch.from_numpy(anchors)
        logp, labels = block_logp(model, spec, embed, head, seqs[idx], feats[idx], a)
        ce = plain_term(logp, labels)
        total = ce
        if tree_weight > 0:
            t1 = time.perf_counter()
            flat = logp[:, ::tree_every].reshape(-1, L, logp.shape[-1])
            sub = anchors[:, ::tree_every]
            rows_i = np.repeat(idx, sub.shape[1])
            pos = sub.reshape(-1)
            trees = build_trees(flat, budget, seqs_np[rows_i, pos])
            win = np.stack([seqs_np[r, p - window:p] for r, p in zip(rows_i, pos, strict=True)])
            rows = score_trees(target, win, pos, trees)
            weights = [node_weights(t, edge_probs_from_rows(t, r), weighting)
                       for t, r in zip(trees, rows, strict=True)]
            reach_log.append(float(np.mean([node_weights(t, edge_probs_from_rows(t, r), "P")
                                            .sum() for t, r in zip(trees, rows, strict=True)])))
            tt = tree_term(flat, trees, weights)
            tree_s += time.perf_counter() - t1
            total = public_loss(ce, tt, tree_weight)
            tree_log.append(float(tt.detach()))
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        ce_log.append(float(ce.detach()))
        if step % 25 == 0 or step == steps - 1:
            extra = (f" tree {np.mean(tree_log[-25:]):.4f} sum P {np.mean(reach_log[-25:]):.2f}"
                     if tree_log else "")
            _log(f"finetune c={tree_weight} {weighting} step {step}/{steps} ce "
                 f"{np.mean(ce_log[-25:]):.3f}{extra} ({time.perf_counter() - t0:.0f}s)")
    model.eval()
    last = slice(-max(1, steps // 10), None)
    info = {"recipe": "public (ExitTrain, hsj576/TEV), scaled to the tiny models",
            "tree_weight": tree_weight,
            "weighting": weighting if tree_weight > 0 else None,
            "tree_budget": budget, "window": window, "floor": FLOOR, "target_temperature": 1.0,
            "tree_every": tree_every,
            "steps": steps, "lr": lr, "schedule": f"cosine to 0, warm-up {warmup_frac:g}",
            "optimizer": "AdamW betas (0.9, 0.95) weight decay 0.01, clip 1.0",
            "batch": batch, "anchors_per_sequence": anchors_per_seq, "anchor_range": [lo, hi],
            "seed": seed, "ce_loss": "plain_term: 0.85^(k-1)-weighted cross-entropy, k = 1..L",
            "final_ce": float(np.mean(ce_log[last])),
            "seconds": time.perf_counter() - t0, "tree_seconds": tree_s}
    if tree_log:
        info.update(final_tree_term=float(np.mean(tree_log[last])),
                    tree_share_of_loss=float(tree_weight * np.mean(tree_log[last])
                                             / (np.mean(ce_log[last])
                                                + tree_weight * np.mean(tree_log[last]))),
                    final_sum_P=float(np.mean(reach_log[last])))
    return model, info


def summarize(evals: dict, *, reference: str = "plain", base: str | None = "base") -> dict:
    """The ablation's numbers from per-prompt τ of several arms and seeds.

    Parameters
    ----------
    evals : dict
        ``{T: {B: {arm: {seed: [tau per prompt]}}}}`` (the base drafter: one seed, any key).
    reference, base : str
        Arms to difference against (paired over prompts and over seeds; the base has no seeds,
        so its differences are over prompts only).

    Returns
    -------
    dict
        ``{T: {B: {arm: {...}}}}`` with the mean τ, its interval over prompts (seeds averaged
        per prompt), and ``vs_<reference>`` / ``vs_<base>``: the paired difference's interval
        over prompts (per-prompt difference averaged over the shared seeds) and over seeds (per
        seed, the mean over prompts of the difference; ``nan`` bounds with one seed).
    """
    out: dict = {}
    for T, per_b in evals.items():
        out[T] = {}
        for B, arms in per_b.items():
            out[T][B] = {}
            for arm, seeds in arms.items():
                tau = np.mean([np.asarray(v, dtype=np.float64) for v in seeds.values()], axis=0)
                ci = stats_mean_ci(tau)
                row = {"seeds": sorted(seeds, key=str), "tau": ci.mean,
                       "tau_ci": [ci.low, ci.high]}
                for other in (reference, base):
                    if other is None or other == arm or other not in arms:
                        continue
                    ref = arms[other]
                    shared = [s for s in seeds if s in ref]
                    if shared:       # paired by seed (same batches)
                        diffs = [np.asarray(seeds[s]) - np.asarray(ref[s]) for s in shared]
                    elif len(ref) == 1:      # against the base (no seeds)
                        r0 = np.asarray(next(iter(ref.values())))
                        diffs = [np.asarray(v) - r0 for v in seeds.values()]
                    elif len(seeds) == 1:    # the base against a seeded arm
                        a0 = np.asarray(next(iter(seeds.values())))
                        diffs = [a0 - np.asarray(v) for v in ref.values()]
                    else:
                        raise ValueError(f"arms {arm!r} and {other!r} share no seed")
                    by_prompt = stats_mean_ci(np.mean(diffs, axis=0))
                    by_seed = stats_mean_ci(np.asarray([d.mean() for d in diffs]))
                    row[f"vs_{other}"] = {"mean": by_prompt.mean,
                                          "ci_prompts": [by_prompt.low, by_prompt.high],
                                          "ci_seeds": [by_seed.low, by_seed.high],
                                          "per_seed": [float(d.mean()) for d in diffs]}
                out[T][B][arm] = row
    return out


def summary_table(summary: dict, reference: str = "plain", base: str = "base") -> str:
    """Markdown rows of :func:`summarize`'s output (one row per temperature, budget and arm)."""
    def ci(lo, hi):
        return "—" if not np.isfinite(lo) else f"[{lo:+.3f}, {hi:+.3f}]"

    lines = [f"| T | B | arm | seeds | τ [95% CI, prompts] | Δ vs {base} [prompts] | "
             f"Δ vs {reference} [prompts] | Δ vs {reference} [seeds] |",
             "|---:|---:|---|---:|---|---|---|---|"]
    for T, per_b in summary.items():
        for B, arms in per_b.items():
            for arm, r in arms.items():
                cells = [str(T), str(B), arm, str(len(r["seeds"])),
                         f"{r['tau']:.3f} [{r['tau_ci'][0]:.3f}, {r['tau_ci'][1]:.3f}]"]
                for key, kind in ((base, "ci_prompts"), (reference, "ci_prompts"),
                                  (reference, "ci_seeds")):
                    d = r.get(f"vs_{key}")
                    cells.append("—" if d is None else f"{d['mean']:+.3f} {ci(*d[kind])}")
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def validation_prompts(bundle, n: int, length: int, seed: int, skip: int) -> list[np.ndarray]:
    """``n`` training-split windows from the files after the first ``skip`` that
    :func:`training_prompts` (same ``seed``) takes: prompts of the training split that ``collect
    --seqs skip`` did not decode, for choosing the exit weight (never the held-out prompts)."""
    return training_prompts(bundle, skip + n, length, seed)[skip:]


def expected_tau(tree, rows) -> float:
    r"""Exact :math:`E[\tau]` of one round given its tree and target rows, under ``follow``:
    :math:`1 + \sum_{v \ne \mathrm{root}} P(v)` (``docs/theory/exit_law.md``; at ``T = 0`` the
    realised τ), from the round rebuilt from its edges
    (:meth:`treespec_sim.engine.Round.from_edges`)."""
    return Round.from_edges(tree, edge_probabilities(tree, rows),
                            depth_limit=max(1, tree.max_depth)).expected_tau


def evaluate(bundles: dict, *, prompts, budgets=(16, 64), new_tokens: int = 96,
             temperature: float = 0.0, samples: int = 1, seed: int = 0) -> dict:
    """τ per prompt for each drafter and budget: ``{label: {B: [tau, ...]}}``.

    DDTree + ``follow``. A prompt's τ is the mean over its rounds of the round's exact expected
    τ given its tree (:func:`expected_tau`; at ``T = 0`` the realised τ), averaged over
    ``samples`` decodes with seeds ``(seed, i, s)``: at ``T = 1`` only the trajectory is random.
    Every drafter sees the same prompts and seeds (paired).
    """
    out: dict = {}
    for label, b in bundles.items():
        out[label] = {}
        pfs = [prefill(b, p, with_drafter=True) for p in prompts]
        for B in budgets:
            taus = []
            for i, pf in enumerate(pfs):
                per = []
                for s in range(samples):
                    ets = []

                    def on_round(rnd, state, ets=ets):
                        ets.append(rnd.expected_tau)   # the round's own exact E[tau]

                    run_from(b, pf, new_tokens, method="ddtree", rule="follow", budget=B,
                             temperature=temperature, rng=np.random.default_rng([seed, i, s]),
                             on_round=on_round)
                    per.append(float(np.mean(ets)))
                taus.append(float(np.mean(per)))
            out[label][B] = taus
            _log(f"evaluate {label} B={B}: tau {np.mean(taus):.3f}")
    return out


def marginal_stats(bundles: dict, data: dict) -> dict:
    """What fine-tuning did to each drafter's marginals on collected rounds (teacher-forced).

    Per drafter: mean log q of the target's token at the positions the round's tree hit (depths
    before its first miss), at the first miss, and after it; the marginals' mean entropy (nats)
    and top-1 accuracy over all depths. The first miss is the round's exit token at T = 0
    (``data`` from ``collect`` at ``--temperature 0``).
    """
    first = next(iter(bundles.values()))
    spec, L = first.spec, first.depth
    target = first.target.model
    seqs = torch.from_numpy(data["seqs"])
    feats = target_features(target, seqs, list(spec.target_layer_ids))
    anchors = data["anchors"]
    miss = {int(r): int(d) for r, d in zip(data["w_round"], data["w_depth"],
                                                     strict=True)}
    embed, head = target.get_input_embeddings(), target.get_output_embeddings()
    out = {}
    for label, bd in bundles.items():
        model = bd.drafter.float().eval()
        hit, at, after, ent, top1 = [], [], [], [], []
        with torch.no_grad():
            for s in range(seqs.shape[0]):
                rs = np.flatnonzero(anchors[:, 0] == s)
                if not rs.size:
                    continue
                a = torch.from_numpy(anchors[rs, 1])[None]
                logp, labels = block_logp(model, spec, embed, head, seqs[s:s + 1],
                                          feats[s:s + 1], a)
                logp, labels = logp[0], labels[0]
                lq = torch.gather(logp, -1, labels[..., None])[..., 0].numpy()
                ent.extend((-(logp.exp() * logp).sum(-1)).numpy().ravel())
                top1.extend((logp.argmax(-1) == labels).numpy().ravel())
                for j, r in enumerate(rs):
                    m = miss.get(int(r), L)
                    hit.extend(lq[j, :m])
                    if m < L:
                        at.append(lq[j, m])
                        after.extend(lq[j, m + 1:])
        out[label] = {"logq_hit": float(np.mean(hit)), "logq_first_miss": float(np.mean(at)),
                      "logq_after_miss": float(np.mean(after)), "entropy": float(np.mean(ent)),
                      "top1": float(np.mean(top1))}
        _log(f"marginals {label}: " + ", ".join(f"{k} {v:.3f}" for k, v in out[label].items()))
    return out


def _fmt(ci, signed: bool) -> str:
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(ci.mean)} [{f.format(ci.low)}, {f.format(ci.high)}]"


def results_table(res: dict, base: str, reference: str | None = None) -> str:
    """τ per drafter and budget (95% t-interval over prompts) and the paired differences to
    ``base`` and to ``reference`` (``treespec_sim.stats.mean_ci`` of the per-prompt
    differences)."""
    head = "| drafter | B | τ [95% CI] | Δτ vs " + base + " [95% CI, paired] |"
    sep = "|---|---:|---|---|"
    if reference:
        head += " Δτ vs " + reference + " [95% CI, paired] |"
        sep += "---|"
    lines = [head, sep]
    for label, per_b in res.items():
        for B, taus in per_b.items():
            row = f"| {label} | {B} | {_fmt(stats_mean_ci(np.asarray(taus)), False)} |"
            for ref in [base] + ([reference] if reference else []):
                if label == ref:
                    row += " — |"
                else:
                    d = np.asarray(taus) - np.asarray(res[ref][B])
                    row += f" {_fmt(stats_mean_ci(d), True)} |"
            lines.append(row)
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m real_models.exittrain`` (commands collect, train, evaluate)."""
    ap = OneLineParser(
        prog="python -m real_models.exittrain",
        description="ExitTrain: fine-tune the shipped tiny DFlash drafter on its own DDTree trees, "
                    "weighted by the exit law (or, as the control, by its original objective), "
                    "and compare tau before and after. Run 'collect', then 'train', then "
                    "'evaluate'; 'COMMAND --help' lists each command's options.",
        epilog="exit status: 0 done, 2 bad input")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND", title="commands", required=True)
    c = sub.add_parser("collect", help="decode training prompts with DDTree and save, per "
                       "round, the anchor and the exit-law weights W",
                       description="Decode training-split prompts with DDTree (the tiny models) "
                                   "and save per round the anchor position and the sparse "
                                   "exit-law weights W (an .npz for 'train').")
    add_out(c, "where to write the collected rounds (required)", metavar="FILE.npz",
            required=True)
    c.add_argument("--seqs", type=positive_int, metavar="N", default=320,
                   help="training prompts to decode (default: %(default)s)")
    c.add_argument("--prompt-len", type=int, metavar="N", default=64,
                   help="tokens per prompt (default: %(default)s)")
    c.add_argument("--gen-len", type=positive_int, metavar="N", default=128,
                   help="tokens to generate per prompt (default: %(default)s)")
    c.add_argument("--budget", type=positive_int, nargs="+", metavar="B", default=[64],
                   help="DDTree node budget(s) while decoding; several: prompt i uses the "
                        "(i mod n)-th (default: %(default)s)")
    add_temperature(c, default=0.0, help="decoding temperature (default: %(default)s)")
    c.add_argument("--weight-temperature", type=temperature, metavar="T", default=None,
                   help="temperature of the target rows in the exit law (default: "
                        "--temperature)")
    add_seed(c, "seed of the prompt choice and the sampling (default: %(default)s)")
    c.add_argument("--val-skip", type=nonnegative_int, metavar="N", default=None,
                   help="decode validation windows instead (those after the first N of "
                        "'collect --seqs N'), for 'marginals' (default: training windows)")
    t = sub.add_parser("train", help="fine-tune a copy of the tiny drafter on collected rounds",
                       description="Fine-tune a copy of the tiny drafter on the rounds of "
                                   "'collect', with the exit-law loss or the plain control; "
                                   "write the drafter and training.json to --out-dir.")
    t.add_argument("--data", type=Path, metavar="FILE.npz", required=True,
                   help="rounds written by 'collect' (required)")
    t.add_argument("--loss", choices=LOSSES, required=True,
                   help="'exit' (the exit-law term alone), 'plain' (the drafter's original "
                        "objective, the control) or 'combined' (plain + EXIT_WEIGHT x exit "
                        "term, both per-token means) (required)")
    t.add_argument("--exit-weight", type=float, metavar="LAMBDA", default=1.0,
                   help="weight of the exit term in --loss combined (default: %(default)s)")
    t.add_argument("--out-dir", type=Path, metavar="DIR", required=True,
                   help="where to write the fine-tuned drafter (required)")
    t.add_argument("--steps", type=positive_int, default=600,
                   help="optimiser steps (default: %(default)s)")
    t.add_argument("--lr", type=positive_float, default=3e-4,
                   help="AdamW learning rate, 20-step warm-up (default: %(default)s)")
    t.add_argument("--batch", type=positive_int, metavar="N", default=16,
                   help="sequences per step (default: %(default)s)")
    t.add_argument("--anchors", type=positive_int, metavar="N", default=8,
                   help="rounds (anchors) per sequence per step (default: %(default)s)")
    add_seed(t, "seed of the batch sampling (default: %(default)s)")
    e = sub.add_parser("evaluate", help="tau of several drafters on the held-out prompts, with "
                       "paired bootstrap CIs against the first",
                       description="Decode the held-out prompts with DDTree and each drafter; "
                                   "print tau per drafter and budget with 95% CIs, and the "
                                   "paired difference to the first drafter.")
    e.add_argument("--drafters", nargs="+", metavar="LABEL=DIR", required=True,
                   help="drafters to compare, the first is the baseline ('before'); an empty "
                        "DIR is the shipped tiny drafter, e.g. 'before=' (required)")
    add_budgets(e, default=[16, 64], help="DDTree budgets (default: %(default)s)")
    add_prompts(e, default=32, help="prompts (default: %(default)s)")
    e.add_argument("--prompt-set", choices=("heldout", "validation"), default="heldout",
                   help="'heldout': real_models/checkpoints/heldout_prompts.json (held-out "
                        "files); 'validation': training-split windows that 'collect --seqs "
                        "VAL_SKIP' did not decode, for choosing the exit weight "
                        "(default: %(default)s)")
    e.add_argument("--val-skip", type=nonnegative_int, metavar="N", default=400,
                   help="--prompt-set validation: skip the first N training windows, those of "
                        "'collect --seqs N' with the same --seed (default: %(default)s)")
    add_seed(e, "seed of the validation windows and of the decoding draws "
                "(default: %(default)s)")
    e.add_argument("--samples", type=positive_int, metavar="N", default=1,
                   help="decodes per prompt (T > 0: τ is averaged over them; each round "
                        "counts its exact expected τ given its tree) (default: %(default)s)")
    e.add_argument("--reference", metavar="LABEL", default=None,
                   help="also tabulate paired differences to this drafter (default: none)")
    add_new_tokens(e, default=96)
    add_temperature(e, default=0.0, help="decoding temperature (default: %(default)s)")
    add_out(e, "write tau and the table as JSON here (default: print only)",
            metavar="FILE.json")
    m = sub.add_parser("marginals", help="what fine-tuning did to the drafters' marginals on "
                       "collected rounds",
                       description="Teacher-forced on the rounds of 'collect' (T = 0): mean log q "
                                   "of the target's token before, at and after each round's "
                                   "first miss, mean entropy and top-1 accuracy per drafter.")
    m.add_argument("--data", type=Path, metavar="FILE.npz", required=True,
                   help="rounds written by 'collect' (required)")
    m.add_argument("--drafters", nargs="+", metavar="LABEL=DIR", required=True,
                   help="drafters, as in 'evaluate' (required)")
    add_out(m, "write the numbers as JSON here (default: print only)", metavar="FILE.json")
    r = sub.add_parser("regen", help="the public recipe's data: the target's greedy "
                       "continuations of training prompts",
                       description="Continue training-split windows greedily with the tiny "
                                   "target (the public recipe's regenerated training data; an "
                                   ".npz for 'finetune').")
    add_out(r, "where to write the sequences (required)", metavar="FILE.npz", required=True)
    r.add_argument("--seqs", type=positive_int, metavar="N", default=400,
                   help="training prompts (default: %(default)s)")
    r.add_argument("--prompt-len", type=int, metavar="N", default=64,
                   help="tokens per prompt (default: %(default)s)")
    r.add_argument("--gen-len", type=positive_int, metavar="N", default=128,
                   help="tokens to generate per prompt (default: %(default)s)")
    add_seed(r, "seed of the prompt choice (default: %(default)s)")
    f = sub.add_parser("finetune", help="the public recipe: cross-entropy on regenerated data + "
                       "C x the tree term (C = 0: the plain fine-tune)",
                       description="Fine-tune a copy of the tiny drafter on 'regen' sequences "
                                   "with cross-entropy + C x the tree term (DDTree per anchor "
                                   "from the drafter's detached marginals, scored by the "
                                   "frozen target with tree attention at T = 1); write the "
                                   "drafter and training.json to --out-dir.")
    f.add_argument("--data", type=Path, metavar="FILE.npz", required=True,
                   help="sequences written by 'regen' (required)")
    f.add_argument("--out-dir", type=Path, metavar="DIR", required=True,
                   help="where to write the fine-tuned drafter (required)")
    f.add_argument("--tree-weight", type=float, metavar="C", default=0.1,
                   help="weight of the tree term; 0 is the plain cross-entropy fine-tune "
                        "(default: %(default)s, the released recipes')")
    f.add_argument("--weighting", choices=WEIGHTINGS, default="P",
                   help="node weight: P (reach, floored at 1e-4; released), P-rho (exit mass), "
                        "P-rho-depth (default: %(default)s)")
    f.add_argument("--tree-budget", type=positive_int, metavar="B", default=PUBLIC_BUDGET,
                   help="DDTree nodes per anchor (default: %(default)s)")
    f.add_argument("--window", type=positive_int, metavar="W", default=PUBLIC_WINDOW,
                   help="context tokens before the anchor in the target's scoring pass "
                        "(default: %(default)s)")
    f.add_argument("--tree-every", type=positive_int, metavar="K", default=1,
                   help="take the tree term at every K-th anchor of a sequence only (CPU time; "
                        "1 = every anchor, as released) (default: %(default)s)")
    f.add_argument("--steps", type=positive_int, default=200,
                   help="optimiser steps (default: %(default)s)")
    f.add_argument("--lr", type=positive_float, default=3e-4,
                   help="peak AdamW learning rate, cosine decay to 0 (default: %(default)s)")
    f.add_argument("--warmup", type=float, metavar="FRAC", default=0.005,
                   help="warm-up fraction of the steps (default: %(default)s)")
    f.add_argument("--batch", type=positive_int, metavar="N", default=16,
                   help="sequences per step (default: %(default)s)")
    f.add_argument("--anchors", type=positive_int, metavar="N", default=8,
                   help="anchors per sequence per step (default: %(default)s)")
    add_seed(f, "seed of the batch and anchor draws (default: %(default)s)")
    s_ = sub.add_parser("summarize", help="the ablation table from 'evaluate' files of "
                        "ARM@SEED drafters",
                        description="Merge 'evaluate --out' files whose drafter labels are "
                                    "ARM@SEED (or 'base'): τ per arm, and paired differences "
                                    "to the reference arm over prompts and over seeds.")
    s_.add_argument("--evals", type=Path, nargs="+", metavar="FILE.json", required=True,
                    help="files written by 'evaluate --out' (required)")
    s_.add_argument("--reference", default="plain",
                    help="the arm to difference against (default: %(default)s)")
    add_out(s_, "write the summary and the table as JSON here (default: print only)",
            metavar="FILE.json")
    v = sub.add_parser("tev-cost", help="TEV's verifier decision + commit against follow's, "
                       "on the same trees",
                       description="Decode held-out prompts with DDTree + follow and verify "
                                   "every round again with follow and with TEV on the same "
                                   "tree and logits; time each rule's decision (rows + "
                                   "verifier) and KV-cache commit; print the TEV / follow "
                                   "ratio with a 95%% paired bootstrap interval over prompts.")
    v.add_argument("--budget", type=positive_int, metavar="B", default=64,
                   help="DDTree budget (default: %(default)s)")
    add_temperature(v, default=1.0, help="temperature, > 0 (default: %(default)s)",
                    positive=True)
    add_prompts(v, default=16)
    add_new_tokens(v, default=48)
    add_repeats(v, default=5, help="timed verifications per rule and round (median) (default: "
                                   "%(default)s)")
    add_seed(v, "seed of the draws and the bootstrap (default: %(default)s)")
    add_out(v, "write the numbers as JSON here (default: print only)", metavar="FILE.json")
    for p in (c, t, e, m, r, f, s_, v):
        add_threads(p)
        add_debug(p)
    return ap


def main(argv=None) -> int:
    return run_subcommand(build_parser(), argv, lambda args: _main(args, argv))


def _at_least(args: argparse.Namespace, **lows) -> None:
    """The lower bounds of the options no type of ``treespec_sim.cli`` checks."""
    for opt, low in lows.items():
        v = getattr(args, opt)
        if not v >= low:
            raise ValueError(f"--{opt.replace('_', '-')} must be >= {low}; got {v}")


def _parse_drafters(items) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for item in items:
        label, eq, path = item.partition("=")
        if not eq or not label:
            raise ValueError(f"--drafters takes LABEL=DIR pairs (an empty DIR is the shipped "
                             f"tiny drafter, e.g. 'before='); got {item!r}")
        if label in out:
            raise ValueError(f"--drafters: label {label!r} given twice")
        out[label] = Path(path) if path else TINY_DRAFTER
    return out


def _read_rounds(path: Path, batch: int) -> dict:
    keys = ("seqs", "anchors", "w_round", "w_depth", "w_token", "w_mass", "meta")
    if not path.is_file():
        raise FileNotFoundError(f"--data {path} does not exist (write it with 'collect')")
    try:
        data = read_npz(path, "--data")
    except ValueError as exc:
        raise ValueError(f"--data {path}: not an .npz written by 'collect' ({exc})") from None
    missing = [k for k in keys if k not in data]
    if missing:
        raise ValueError(f"--data {path}: not written by 'collect' (missing "
                         f"{', '.join(missing)})")
    n = len(np.unique(data["anchors"][:, 0])) if len(data["anchors"]) else 0
    if batch > n:
        raise ValueError(f"--batch {batch} is more than the {n} sequences with rounds in "
                         f"{path}")
    return data


def _read_regen(path: Path, batch: int) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"--data {path} does not exist (write it with 'regen')")
    try:
        data = read_npz(path, "--data")
    except ValueError as exc:
        raise ValueError(f"--data {path}: not an .npz written by 'regen' ({exc})") from None
    missing = [k for k in ("seqs", "prompt_len", "meta") if k not in data]
    if missing:
        raise ValueError(f"--data {path}: not written by 'regen' (missing {', '.join(missing)})")
    if batch > len(data["seqs"]):
        raise ValueError(f"--batch {batch} is more than the {len(data['seqs'])} sequences in "
                         f"{path}")
    return data


def _read_evals(paths) -> dict:
    """``{T: {B: {arm: {seed: taus}}}}`` from 'evaluate' files with ARM@SEED labels."""
    out: dict = {}
    for path in paths:
        try:
            rec = json.loads(Path(path).read_text())
            T, tau = float(rec["temperature"]), rec["tau"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"--evals {path}: not a file of 'evaluate --out' ({exc})") from None
        for label, per_b in tau.items():
            arm, _, seed = label.partition("@")
            for B, taus in per_b.items():
                slot = out.setdefault(f"{T:g}", {}).setdefault(str(B), {}).setdefault(arm, {})
                if (seed or "-") in slot:
                    raise ValueError(f"--evals: {label} at T = {T:g}, B = {B} given twice")
                slot[seed or "-"] = taus
    return out


def _main(args: argparse.Namespace, argv) -> int:
    # the parser checks every count, seed, temperature and --lr (treespec_sim.cli)
    if args.cmd == "collect":
        _at_least(args, prompt_len=2)
        torch.set_num_threads(args.threads)
        bundle = load(TINY_TARGET, TINY_DRAFTER)
        data = collect(bundle, n_seqs=args.seqs, prompt_len=args.prompt_len,
                       gen_len=args.gen_len, budget=args.budget, temperature=args.temperature,
                       seed=args.seed, weight_temperature=args.weight_temperature,
                       val_skip=args.val_skip)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(args.out, **data)
        _log(f"wrote {args.out}: {len(data['anchors'])} rounds, {data['seqs'].shape} tokens")
    elif args.cmd == "train":
        _at_least(args, exit_weight=0.0)
        data = _read_rounds(args.data, args.batch)
        torch.set_num_threads(args.threads)
        bundle = load(TINY_TARGET, TINY_DRAFTER)
        model, info = train(bundle, data, loss=args.loss, steps=args.steps, lr=args.lr,
                            batch=args.batch, anchors_per_seq=args.anchors, seed=args.seed,
                            exit_weight=args.exit_weight)
        cfg = json.loads((TINY_DRAFTER / "config.json").read_text())
        model.save_pretrained(args.out_dir, cfg)
        info.update(data_meta=json.loads(str(data["meta"])), data_rounds=len(data["anchors"]),
                    command="python -m real_models.exittrain " + " ".join(argv or sys.argv[1:]),
                    base_drafter=str(TINY_DRAFTER.name), torch=torch.__version__)
        (args.out_dir / "training.json").write_text(json.dumps(info, indent=1) + "\n")
        _log(f"wrote {args.out_dir}")
    elif args.cmd == "regen":
        _at_least(args, prompt_len=2)
        torch.set_num_threads(args.threads)
        bundle = load(TINY_TARGET, TINY_DRAFTER)
        t0 = time.perf_counter()
        prompts = training_prompts(bundle, args.seqs, args.prompt_len, args.seed)
        seqs = regenerate(bundle, prompts, args.gen_len)
        meta = {"what": "greedy (T = 0) continuations by the tiny target of training-split "
                        "windows (real_models.exittrain.training_prompts)",
                "seqs": len(prompts), "prompt_len": args.prompt_len, "gen_len": args.gen_len,
                "seed": args.seed, "seconds": time.perf_counter() - t0,
                "command": "python -m real_models.exittrain " + " ".join(argv or sys.argv[1:])}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(args.out, seqs=seqs, prompt_len=np.int64(args.prompt_len),
                            meta=json.dumps(meta))
        _log(f"wrote {args.out}: {seqs.shape} tokens")
    elif args.cmd == "finetune":
        _at_least(args, tree_weight=0.0, warmup=0.0)
        data = _read_regen(args.data, args.batch)
        torch.set_num_threads(args.threads)
        bundle = load(TINY_TARGET, TINY_DRAFTER)
        model, info = finetune(bundle, data, tree_weight=args.tree_weight,
                               weighting=args.weighting, steps=args.steps, lr=args.lr,
                               batch=args.batch, anchors_per_seq=args.anchors, seed=args.seed,
                               budget=args.tree_budget, window=args.window,
                               warmup_frac=args.warmup, tree_every=args.tree_every)
        cfg = json.loads((TINY_DRAFTER / "config.json").read_text())
        model.save_pretrained(args.out_dir, cfg)
        info.update(data=json.loads(str(data["meta"])), data_file=str(args.data),
                    command="python -m real_models.exittrain " + " ".join(argv or sys.argv[1:]),
                    base_drafter=str(TINY_DRAFTER.name), torch=torch.__version__, threads=1)
        atomic_write_text(args.out_dir / "training.json", json.dumps(info, indent=1) + "\n")
        _log(f"wrote {args.out_dir}")
    elif args.cmd == "summarize":
        evals = _read_evals(args.evals)
        summary = summarize(evals, reference=args.reference)
        table = summary_table(summary, reference=args.reference)
        print(table)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(args.out, json.dumps({
                "command": "python -m real_models.exittrain " + " ".join(argv or sys.argv[1:]),
                "evals": [str(p) for p in args.evals], "summary": summary, "table": table,
                "tau": evals}, indent=1) + "\n")
    elif args.cmd == "tev-cost":
        torch.set_num_threads(args.threads)
        bundle = load(TINY_TARGET, TINY_DRAFTER)
        res = tev_cost(bundle, load_prompts(bundle, args.prompts, 64), budget=args.budget,
                       temperature=args.temperature, new_tokens=args.new_tokens,
                       repeats=args.repeats, rng=np.random.default_rng(args.seed))
        rec = {"command": "python -m real_models.exittrain " + " ".join(argv or sys.argv[1:]),
               "budget": args.budget, "temperature": args.temperature,
               "prompts": args.prompts, "new_tokens": args.new_tokens,
               "repeats": args.repeats, "rounds": len(res["prompt"]),
               "mean_tree_size": float(res["tree_size"].mean()), "rules": res["rules"],
               "mean_us": {k: (res[k].mean(axis=0) * 1e6).round(2).tolist()
                           for k in ("decide", "commit")},
               "ratio_tev_over_follow": list(res["ratio"]),
               "ratio_decide": list(res["ratio_parts"]["decide"]),
               "ratio_commit": list(res["ratio_parts"]["commit"]),
               "expected_tau": res["expected_tau"].mean(axis=0).tolist(),
               "expected_tau_max_abs_diff": float(np.abs(np.diff(res["expected_tau"],
                                                                 axis=1)).max()),
               "torch_threads": args.threads}
        print(json.dumps(rec, indent=1))
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(args.out, json.dumps(rec, indent=1) + "\n")
    elif args.cmd == "marginals":
        data = _read_rounds(args.data, 1)
        drafters = _parse_drafters(args.drafters)
        torch.set_num_threads(args.threads)
        bundles = {label: load(TINY_TARGET, path) for label, path in drafters.items()}
        res = marginal_stats(bundles, data)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({
                "data_meta": json.loads(str(data["meta"])),
                "command": "python -m real_models.exittrain " + " ".join(argv or sys.argv[1:]),
                "drafters": res}, indent=1) + "\n")
    else:
        drafters = _parse_drafters(args.drafters)
        if args.reference is not None and args.reference not in drafters:
            raise ValueError(f"--reference {args.reference!r} is not a --drafters label")
        torch.set_num_threads(args.threads)
        bundles = {label: load(TINY_TARGET, path) for label, path in drafters.items()}
        first = next(iter(bundles.values()))
        if args.prompt_set == "heldout":
            prompts = load_prompts(first, args.prompts, 64)
        else:
            prompts = validation_prompts(first, args.prompts, 64, args.seed, args.val_skip)
        res = evaluate(bundles, prompts=prompts, budgets=tuple(args.budgets),
                       new_tokens=args.new_tokens, temperature=args.temperature,
                       samples=args.samples, seed=args.seed)
        table = results_table(res, next(iter(bundles)), args.reference)
        print(table)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"temperature": args.temperature,
                                            "prompt_set": args.prompt_set,
                                            "samples": args.samples, "seed": args.seed,
                                            "command": "python -m real_models.exittrain "
                                                       + " ".join(argv or sys.argv[1:]),
                                            "new_tokens": args.new_tokens,
                                            "prompts": args.prompts,
                                            "tau": {k: {str(b): v for b, v in d.items()}
                                                    for k, d in res.items()},
                                            "table": table}, indent=1) + "\n")
    return 0

if __name__ == "__main__":
    sys.exit(main())
