r"""ExitTrain: fine-tune the DFlash drafter on its own trees, weighted by the exit law.

THEORY §2: on a fixed tree, adding the child ``(v, a)`` raises the target coverage
:math:`C_p` by :math:`P(v)\,p_v(a)`. Summed over the tokens ``a`` the tree does not yet hold
under ``v`` this is the exit mass :math:`w(v) = P(v)\rho(v)`. ExitTrain's loss on one round is

.. math::
    \mathcal L = -\frac{1}{Z}\sum_{v:\ \mathrm{depth}(v) < L}\ \sum_{a \notin \mathrm{ch}(v)}
    P(v)\,p_v(a)\,\log q_{\mathrm{depth}(v)+1}(a)
    = -\frac{1}{Z}\sum_{d=1}^{L}\sum_a W_d(a)\log q_d(a),

the log-likelihood of each prospective node's incoming token ``a`` under the drafter's marginal
at its depth, weighted by its parent's exit mass (:math:`W_d(a) = \sum_{\mathrm{depth}(v)=d-1}
P(v)p_v(a)[a \notin \mathrm{ch}(v)]`, so :math:`\sum_a W_{d}(a)` is the exit mass at depth
``d - 1``, :func:`treespec_sim.exits.exit_law`); ``Z`` is the total weight of the batch. Exits at
the depth cap ``L`` have no next marginal and carry no loss. The trees are DDTree trees the
drafter builds itself while decoding training-split prompts (``collect``); the target's rows at
their nodes come from the same tree forward. At ``T = 0`` the target rows are one-hot, so
:math:`W` is one token: the target's next token after the deepest accepted node (the first
miss).

The control (``--loss plain``) fine-tunes for the same steps on the same rounds with the
drafter's original objective: cross-entropy to the committed (target) continuation at every
depth ``1..L``, weights ``0.85^(k-1)`` (``real_models.train``). Only the weighting differs.

Commands::

    python -m real_models.exittrain collect --out runs/exittrain/data.npz
    python -m real_models.exittrain train --loss exit  --data ... --out-dir DIR
    python -m real_models.exittrain train --loss plain --data ... --out-dir DIR
    python -m real_models.exittrain evaluate --drafters BASE DIR1 DIR2 --out results.json
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np

from treespec_sim.exits import edge_probabilities, reach_from_edges

from ._deps import require
from .backend import prefill
from .bundle import TINY_DRAFTER, TINY_TARGET, load
from .decode import decode, run_from
from .target import LogitsOracle
from .train import load_corpus, target_features
from .validate import load_prompts

torch = require("torch")

__all__ = ["collect", "evaluate", "exit_targets", "main", "train"]


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


def collect(bundle, *, n_seqs: int, prompt_len: int, gen_len: int, budget: int,
            temperature: float, seed: int, weight_temperature: float | None = None) -> dict:
    """Decode training prompts with DDTree; per round: anchor position and sparse ``W``.

    Decoding runs at ``temperature``; the exit law that weights the loss uses the target's rows
    at ``weight_temperature`` (default: the same). At ``T = 0`` the rows are one-hot and ``W``
    is one token per round; at ``T = 1`` it spreads over every depth the target can exit at.
    """
    wt = temperature if weight_temperature is None else float(weight_temperature)
    prompts = training_prompts(bundle, n_seqs, prompt_len, seed)
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
        res = run_from(bundle, pf, gen_len, method="ddtree", rule="follow", budget=budget,
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
            "meta": json.dumps({"budget": budget, "temperature": temperature,
                                "weight_temperature": wt, "seed": seed,
                                "prompt_len": prompt_len, "gen_len": gen_len,
                                "seconds": time.perf_counter() - t0})}


def train(bundle, data: dict, *, loss: str, steps: int, lr: float, batch: int,
          anchors_per_seq: int, seed: int):
    """Fine-tune a copy of ``bundle.drafter``; return (drafter, log dict)."""
    if loss not in ("exit", "plain"):
        raise ValueError(f"loss must be 'exit' or 'plain'; got {loss!r}")
    spec = bundle.spec
    L, K = spec.depth, spec.block_size
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
    plain_w = torch.tensor([0.85 ** k for k in range(L)])
    N = seqs.shape[1]
    ctx_pos = torch.arange(N)[None]
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
        logp = torch.log_softmax(model.logits(out, head).float(), dim=-1)   # (b, A, L, V)
        if loss == "plain":
            labels = torch.gather(x, 1, (a[:, :, None] + offs[1:]).reshape(b, -1)).view(b, A, L)
            nll = -torch.gather(logp, -1, labels[..., None])[..., 0]          # (b, A, L)
            total = (nll * plain_w).sum() / (plain_w.sum() * b * A)
        else:
            W = torch.zeros((b * A, L, V))
            for j, r in enumerate(rounds.reshape(-1)):
                sl = order[starts[r]:starts[r + 1]]
                if sl.size:
                    W[j, torch.from_numpy(data["w_depth"][sl]),
                      torch.from_numpy(data["w_token"][sl])] += torch.from_numpy(
                          data["w_mass"][sl])
            W = W.view(b, A, L, V)
            z = W.sum()
            total = -(W * logp).sum() / z if z > 0 else logp.sum() * 0.0
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(total.detach()))
        if step % 50 == 0 or step == steps - 1:
            _log(f"{loss} step {step}/{steps} loss {np.mean(losses[-50:]):.3f} "
                 f"({time.perf_counter() - t0:.0f}s)")
    model.eval()
    return model, {"loss": loss, "steps": steps, "lr": lr, "batch": batch,
                   "anchors_per_sequence": anchors_per_seq, "seed": seed,
                   "final_loss": float(np.mean(losses[-50:])),
                   "seconds": time.perf_counter() - t0}


def evaluate(bundles: dict, *, budgets=(16, 64), n_prompts: int = 32, new_tokens: int = 96,
             temperature: float = 0.0, seed: int = 0) -> dict:
    """τ per held-out prompt for each drafter and budget: ``{label: {B: [tau, ...]}}``."""
    first = next(iter(bundles.values()))
    prompts = load_prompts(first, n_prompts, 64)
    out: dict = {}
    for label, b in bundles.items():
        out[label] = {}
        for B in budgets:
            taus = []
            for i, p in enumerate(prompts):
                r = decode(b, p, new_tokens, method="ddtree", budget=B,
                           temperature=temperature, seed=seed + i)
                taus.append(sum(x.tau for x in r.rounds) / len(r.rounds))
            out[label][B] = taus
            _log(f"evaluate {label} B={B}: tau {np.mean(taus):.3f}")
    return out


def paired_bootstrap(a, b, *, n_boot: int = 4000, seed: int = 0):
    """Mean of ``b - a`` over prompts and its 95% percentile-bootstrap interval (paired)."""
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    rng = np.random.default_rng(seed)
    boot = d[rng.integers(0, d.size, size=(n_boot, d.size))].mean(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return float(d.mean()), float(lo), float(hi)


def mean_ci(x, *, n_boot: int = 4000, seed: int = 0):
    x = np.asarray(x, dtype=np.float64)
    rng = np.random.default_rng(seed)
    boot = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return float(x.mean()), float(lo), float(hi)


def results_table(res: dict, base: str) -> str:
    lines = ["| drafter | B | τ [95% CI] | Δτ vs before [95% CI, paired] |",
             "|---|---:|---|---|"]
    for label, per_b in res.items():
        for B, taus in per_b.items():
            m, lo, hi = mean_ci(taus)
            if label == base:
                rel = "—"
            else:
                d, dlo, dhi = paired_bootstrap(res[base][B], taus)
                rel = f"{d:+.3f} [{dlo:+.3f}, {dhi:+.3f}]"
            lines.append(f"| {label} | {B} | {m:.3f} [{lo:.3f}, {hi:.3f}] | {rel} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m real_models.exittrain",
                                 description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--seqs", type=int, default=320)
    c.add_argument("--prompt-len", type=int, default=64)
    c.add_argument("--gen-len", type=int, default=128)
    c.add_argument("--budget", type=int, default=64)
    c.add_argument("--temperature", type=float, default=0.0)
    c.add_argument("--weight-temperature", type=float, default=None,
                   help="temperature of the target rows in the exit law (default: --temperature)")
    c.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("train")
    t.add_argument("--data", type=Path, required=True)
    t.add_argument("--loss", choices=("exit", "plain"), required=True)
    t.add_argument("--out-dir", type=Path, required=True)
    t.add_argument("--steps", type=int, default=600)
    t.add_argument("--lr", type=float, default=3e-4)
    t.add_argument("--batch", type=int, default=16)
    t.add_argument("--anchors", type=int, default=8)
    t.add_argument("--seed", type=int, default=0)
    e = sub.add_parser("evaluate")
    e.add_argument("--drafters", nargs="+", required=True,
                   help="label=DIR pairs; the first is the baseline ('before')")
    e.add_argument("--budgets", type=int, nargs="+", default=[16, 64])
    e.add_argument("--prompts", type=int, default=32)
    e.add_argument("--new-tokens", type=int, default=96)
    e.add_argument("--temperature", type=float, default=0.0)
    e.add_argument("--out", type=Path, default=None)
    for p in (c, t, e):
        p.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.cmd == "collect":
        bundle = load(TINY_TARGET, TINY_DRAFTER)
        data = collect(bundle, n_seqs=args.seqs, prompt_len=args.prompt_len,
                       gen_len=args.gen_len, budget=args.budget, temperature=args.temperature,
                       seed=args.seed, weight_temperature=args.weight_temperature)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(args.out, **data)
        _log(f"wrote {args.out}: {len(data['anchors'])} rounds, {data['seqs'].shape} tokens")
    elif args.cmd == "train":
        bundle = load(TINY_TARGET, TINY_DRAFTER)
        with np.load(args.data) as z:
            data = {k: z[k] for k in z.files}
        model, info = train(bundle, data, loss=args.loss, steps=args.steps, lr=args.lr,
                            batch=args.batch, anchors_per_seq=args.anchors, seed=args.seed)
        cfg = json.loads((TINY_DRAFTER / "config.json").read_text())
        model.save_pretrained(args.out_dir, cfg)
        info.update(data_meta=json.loads(str(data["meta"])), data_rounds=len(data["anchors"]),
                    command="python -m real_models.exittrain " + " ".join(argv or sys.argv[1:]),
                    base_drafter=str(TINY_DRAFTER.name), torch=torch.__version__)
        (args.out_dir / "training.json").write_text(json.dumps(info, indent=1) + "\n")
        _log(f"wrote {args.out_dir}")
    else:
        bundles = {}
        for item in args.drafters:
            label, _, path = item.partition("=")
            bundles[label] = load(TINY_TARGET, Path(path) if path else TINY_DRAFTER)
        res = evaluate(bundles, budgets=tuple(args.budgets), n_prompts=args.prompts,
                       new_tokens=args.new_tokens, temperature=args.temperature)
        table = results_table(res, next(iter(bundles)))
        print(table)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"temperature": args.temperature,
                                            "new_tokens": args.new_tokens,
                                            "prompts": args.prompts,
                                            "tau": {k: {str(b): v for b, v in d.items()}
                                                    for k, d in res.items()},
                                            "table": table}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
