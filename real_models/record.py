r"""Record real rounds into a trace: ``python -m real_models.record --out FILE``.

Decodes held-out prompts, each round verifying the superset tree
(:func:`treespec_sim.trace.superset`: DDTree at ``--budget`` = ``B_max``, plus the argmax chain's
and the dynamic tree's nodes it leaves out) under rule ``follow`` at the decoding temperature,
and records, before each round's commit, what the exact replay of every tree inside that
round's data needs (``docs/traces.md``): the context, the drafter's marginals (dense, or the
top ``--top-k`` per depth), the superset tree and the target's rows on it (full float32
logits, or per recorded temperature the edge probabilities, the argmax and the top
``--target-top-k`` entries), optionally a sampled tree (``--sampled-tree
METHOD:BUDGET[@T][:RULE]``) drawn on the same context with its proposal laws and the target's
full rows on it, the decode's outcome and the measured seconds.

The file is written atomically (:mod:`treespec_sim.files`); after every prompt a checkpoint
``FILE.part`` is written the same way, and a run with the same settings resumes from it (a
prompt's rounds depend only on the seed and its index, so a resumed file is the file an
uninterrupted run writes).

``treespec_sim.trace.load(FILE)`` replays it.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from treespec_sim import engine, trace
from treespec_sim.cli import (
    OneLineParser,
    add_checkpoints,
    add_debug,
    add_device,
    add_dtype,
    add_out,
    add_prompts,
    add_seed,
    add_threads,
    nonnegative_int,
    positive_int,
    run,
    temperature,
)
from treespec_sim.marginals import ranked_candidates
from treespec_sim.methods import get_method, resolve_rule
from treespec_sim.proposal import ProposalRows
from treespec_sim.verify import SCHEME_FOR_RULE

from ._deps import require
from .backend import DecodeState, ModelBackend
from .bundle import DTYPES, TINY_DRAFTER, TINY_TARGET, load
from .profile import device_identity
from .validate import load_prompts

torch = require("torch")

__all__ = ["DENSE_VOCAB_LIMIT", "RecordSettings", "build_parser", "discard_forward", "main",
           "parse_sampled_spec", "record"]

#: Vocabularies up to this size are recorded densely by default (``--top-k 0``, full rows).
DENSE_VOCAB_LIMIT = 4096


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass(frozen=True)
class RecordSettings:
    """What a recording keeps (the header's ``settings``; ``docs/traces.md``).

    Attributes
    ----------
    b_max : int
        The superset tree's budget (DDTree at ``b_max``; also the decode's budget).
    temperatures : tuple of float
        Target temperatures whose rows are recorded.
    decode_temperature : float
        The temperature the decode itself verifies (and commits) at; one of ``temperatures``.
    rounds : int
        Rounds per prompt.
    top_k : int
        Drafter entries per depth (``0``: dense; otherwise ``>= b_max``).
    target_top_k : int
        Target entries per node at each positive temperature (``0``: full rows).
    sampled : dict or None
        ``{"method", "budget", "temperature", "rule", "scheme"}`` of the recorded sampled tree.
    seed : int
    prompt_tokens : int
        Tokens per prompt.
    """

    b_max: int
    temperatures: tuple[float, ...]
    decode_temperature: float
    rounds: int
    top_k: int
    target_top_k: int
    sampled: dict | None
    seed: int
    prompt_tokens: int

    def as_dict(self) -> dict:
        return {"b_max": self.b_max, "temperatures": list(self.temperatures),
                "decode_temperature": self.decode_temperature, "rounds": self.rounds,
                "top_k": self.top_k, "target_top_k": self.target_top_k,
                "sampled": self.sampled, "seed": self.seed,
                "prompt_tokens": self.prompt_tokens}


def parse_sampled_spec(spec: str, temperatures: Sequence[float]) -> dict:
    """``METHOD:BUDGET[@T][:RULE]`` (e.g. ``sampled-ddtree:16@1:rrsw``) as the header's
    ``sampled`` entry; ``T`` defaults to the largest recorded temperature, ``RULE`` to the
    method's first lossless rule at ``T`` (``rrsw`` for a rule-driven fill)."""
    m = re.fullmatch(r"([^:@]+):(\d+)(?:@([0-9.eE+-]+))?(?::([a-z-]+))?", spec.strip())
    if not m:
        raise ValueError(f"--sampled-tree must be METHOD:BUDGET[@T][:RULE], e.g. "
                         f"sampled-ddtree:16@1:rrsw; got {spec!r}")
    name, budget, t, rule = m.group(1), int(m.group(2)), m.group(3), m.group(4)
    meth, _ = get_method(name)
    if meth.scheme == "deterministic":
        raise ValueError(f"--sampled-tree: method {name!r} is deterministic (the superset tree "
                         "already covers it)")
    t = max(temperatures) if t is None else float(t)
    if t not in temperatures:
        raise ValueError(f"--sampled-tree: T = {t:g} is not among --temperatures")
    if t == 0:
        raise ValueError("--sampled-tree needs a positive temperature")
    if meth.needs_conditional:
        raise ValueError(f"--sampled-tree: method {name!r} needs conditional proposals, which "
                         "the real-model backend has not (use sampled-ddtree or sampled-tree[WxD])")
    rule = resolve_rule(meth, rule, t)
    scheme = meth.scheme if meth.scheme != "by-rule" else SCHEME_FOR_RULE[rule]
    return {"method": name, "budget": budget, "temperature": t, "rule": rule, "scheme": scheme}


def discard_forward(backend: ModelBackend, ctx: DecodeState) -> None:
    """Drop ``ctx``'s uncommitted verification forward (a round run for its exact facts only):
    the target cache is cut back to the context, nothing is committed."""
    backend.target.commit(ctx.length, [])
    ctx.forward = None


def _proposal_laws(prop, tree) -> tuple[list[np.ndarray], np.ndarray]:
    """Distinct proposal laws and the law index of each node (-1: a leaf, never read)."""
    if isinstance(prop, ProposalRows):
        return [np.asarray(q, dtype=np.float64) for q in prop.laws], np.asarray(prop.row_of)
    arr = np.asarray(prop, dtype=np.float64)
    laws, row_of = [], np.full(tree.n_nodes, -1, dtype=np.int64)
    for v in range(tree.n_nodes):
        if tree.children(v).size:
            row_of[v] = len(laws)
            laws.append(arr[v])
    return laws, row_of


def _topk_rows(probs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top ``k`` entries per row of ``probs`` (m, V): tokens, probabilities, remaining mass."""
    m = probs.shape[0]
    tok = np.zeros((m, k), dtype=np.int32)
    val = np.zeros((m, k), dtype=np.float32)
    rest = np.zeros(m, dtype=np.float64)
    for i in range(m):
        t, v = ranked_candidates(probs[i], -np.inf, k)
        tok[i, :t.size], val[i, :v.size] = t, v
        rest[i] = max(0.0, 1.0 - float(v.sum()))
    return tok, val, rest


def record(bundle, prompts: Sequence[np.ndarray], settings: RecordSettings, *,
           prompt_ids: Sequence[int] | None = None,
           on_round: Callable[[dict], None] | None = None) -> list[dict]:
    """Record ``settings.rounds`` rounds of each prompt; one dict of arrays per round.

    Parameters
    ----------
    bundle : real_models.Bundle
    prompts : sequence of ndarray int
    settings : RecordSettings
    prompt_ids : sequence of int, optional
        The prompts' indices (default ``0..``); they seed the decode (``[seed, id]``).
    on_round : callable, optional
        Sees each round's dict after it is recorded.

    Returns
    -------
    list of dict
        Per round: ``prompt``, ``round``, ``tokens``, the drafter and target arrays, the
        superset tree, the outcome, the timings (and the sampled tree).
    """
    be = ModelBackend(bundle)
    s = settings
    out = []
    ids = list(range(len(prompts))) if prompt_ids is None else list(prompt_ids)
    for pid, p in zip(ids, prompts, strict=True):
        ctx = be.start(np.asarray(p, dtype=np.int64))
        rng = np.random.default_rng([s.seed, pid])
        for r in range(s.rounds):
            rec: dict = {"prompt": pid, "round": r, "tokens": np.asarray(ctx.tokens, np.int32)}
            if s.sampled is not None:
                sp = s.sampled
                srnd = engine.run_round(be, ctx, method=sp["method"], budget=sp["budget"],
                                        rule=sp["rule"], temperature=sp["temperature"],
                                        rng=np.random.default_rng([s.seed, pid, r, 1]),
                                        sample=False)
                laws, row_of = _proposal_laws(srnd.proposal, srnd.tree)
                rec.update(s_parent=srnd.tree.parent.astype(np.int32),
                           s_token=srnd.tree.token.astype(np.int32), s_laws=laws,
                           s_row_of=row_of.astype(np.int32),
                           s_target_logits=srnd.rows.logits.float().cpu().numpy(),
                           s_verify_s=srnd.timings["verify"])
                discard_forward(be, ctx)
            rnd = engine.run_round(be, ctx, method="superset", budget=s.b_max, rule="follow",
                                   temperature=s.decode_temperature, rng=rng)
            lq = np.asarray(rnd.log_q, dtype=np.float32)
            if s.top_k:
                tops = [ranked_candidates(lq[d].astype(np.float64), -np.inf, s.top_k)
                        for d in range(lq.shape[0])]
                rec["q_top_tokens"] = np.stack([t for t, _ in tops]).astype(np.int32)
                rec["q_top_logp"] = np.stack([v for _, v in tops]).astype(np.float32)
                kept = np.array([np.exp(v).sum() for _, v in tops])
                rec["q_rest_logp"] = np.log(np.clip(1.0 - kept, 0.0, None))
            else:
                rec["log_q"] = lq
            tree = rnd.tree
            rec.update(tree_parent=tree.parent.astype(np.int32),
                       tree_token=tree.token.astype(np.int32))
            logits = rnd.rows.logits.float().cpu().numpy()
            if s.target_top_k:
                rec["target_argmax"] = np.argmax(logits, axis=1).astype(np.int32)
                for j, t in enumerate(s.temperatures):
                    if t == 0:
                        continue
                    rows = trace.rows_from_logits(logits, t)
                    e = np.ones(tree.n_nodes)
                    e[1:] = rows[tree.parent[1:], tree.token[1:]]
                    tok, val, rest = _topk_rows(rows, s.target_top_k)
                    rec[f"edge_t{j}"], rec[f"p_top_tokens_t{j}"] = e, tok
                    rec[f"p_top_probs_t{j}"], rec[f"p_rest_t{j}"] = val, rest
            else:
                rec["target_logits"] = logits
            rec.update(outcome_path=np.asarray(rnd.outcome.path, dtype=np.int32),
                       outcome_bonus=int(rnd.outcome.bonus), draft_s=rnd.timings["draft"],
                       verify_s=rnd.timings["verify"])
            out.append(rec)
            if on_round is not None:
                on_round(rec)
            if r + 1 < s.rounds:
                engine.commit(be, ctx, rnd)
            else:
                discard_forward(be, ctx)
    return out


def pack(recs: Sequence[dict], settings: RecordSettings, *, L: int, V: int) -> dict:
    """The trace arrays (``docs/traces.md``) from :func:`record`'s per-round dicts."""
    R = len(recs)
    n1 = max([settings.b_max + 1, *(r["tree_parent"].size for r in recs)])
    a: dict[str, np.ndarray] = {}
    lens = [r["tokens"].size for r in recs]
    a["ctx_offsets"] = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    a["ctx_tokens"] = (np.concatenate([r["tokens"] for r in recs]) if R
                       else np.zeros(0)).astype(np.int32)
    a["prompt"] = np.array([r["prompt"] for r in recs], dtype=np.int32)
    a["round"] = np.array([r["round"] for r in recs], dtype=np.int32)
    a["tree_size"] = np.array([r["tree_parent"].size - 1 for r in recs], dtype=np.int32)

    def padded(key: str, width: int, fill, dtype, tail=()) -> np.ndarray:
        arr = np.full((R, width, *tail), fill, dtype=dtype)
        for i, r in enumerate(recs):
            x = np.asarray(r[key])
            arr[i, :x.shape[0]] = x
        return arr

    a["tree_parent"] = padded("tree_parent", n1, -2, np.int32)
    a["tree_token"] = padded("tree_token", n1, -1, np.int32)
    if settings.top_k:
        for k, dt in (("q_top_tokens", np.int32), ("q_top_logp", np.float32),
                      ("q_rest_logp", np.float64)):
            a[k] = np.stack([r[k] for r in recs]).astype(dt)
    else:
        a["log_q"] = np.stack([r["log_q"] for r in recs]).astype(np.float32)
    if settings.target_top_k:
        a["target_argmax"] = padded("target_argmax", n1, -1, np.int32)
        kt = settings.target_top_k
        for j, t in enumerate(settings.temperatures):
            if t == 0:
                continue
            a[f"edge_t{j}"] = padded(f"edge_t{j}", n1, 0.0, np.float64)
            a[f"p_top_tokens_t{j}"] = padded(f"p_top_tokens_t{j}", n1, -1, np.int32, (kt,))
            a[f"p_top_probs_t{j}"] = padded(f"p_top_probs_t{j}", n1, 0.0, np.float32, (kt,))
            a[f"p_rest_t{j}"] = padded(f"p_rest_t{j}", n1, 0.0, np.float64)
    else:
        a["target_logits"] = padded("target_logits", n1, 0.0, np.float32, (V,))
    a["outcome_path"] = padded("outcome_path", L, -1, np.int32)
    a["outcome_bonus"] = np.array([r["outcome_bonus"] for r in recs], dtype=np.int32)
    a["draft_s"] = np.array([r["draft_s"] for r in recs], dtype=np.float64)
    a["verify_s"] = np.array([r["verify_s"] for r in recs], dtype=np.float64)
    if settings.sampled is not None:
        s1 = settings.sampled["budget"] + 1
        a["s_size"] = np.array([r["s_parent"].size - 1 for r in recs], dtype=np.int32)
        a["s_parent"] = padded("s_parent", s1, -2, np.int32)
        a["s_token"] = padded("s_token", s1, -1, np.int32)
        offs, laws, row_of = [0], [], np.full((R, s1), -1, dtype=np.int32)
        for i, r in enumerate(recs):
            base = len(laws)
            laws.extend(r["s_laws"])
            ro = np.asarray(r["s_row_of"])
            row_of[i, :ro.size] = np.where(ro >= 0, ro + base, -1)
            offs.append(len(laws))
        a["s_row_of"] = row_of
        a["s_law_offsets"] = np.asarray(offs, dtype=np.int64)
        a["s_laws"] = (np.stack(laws) if laws else np.zeros((0, V))).astype(np.float64)
        a["s_target_logits"] = padded("s_target_logits", s1, 0.0, np.float32, (V,))
        a["s_verify_s"] = np.array([r["s_verify_s"] for r in recs], dtype=np.float64)
    return a


def _portable(path: Path) -> str:
    """``path`` relative to the repository for the shipped checkpoints, else as given."""
    root = Path(__file__).resolve().parent.parent
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return str(path)


def header_for(bundle, settings: RecordSettings, *, device: str, dtype: str | None,
               target: Path, drafter: Path, prompts: int) -> dict:
    """The trace header (``docs/traces.md``, "Header")."""
    return {"format": trace.FORMAT,
            "models": {"target": _portable(target), "drafter": _portable(drafter)},
            "dtype": dtype or str(next(bundle.target.model.parameters()).dtype).replace(
                "torch.", ""),
            "device": device, "device_name": device_identity(device)[1],
            "torch": torch.__version__,
            "L": int(bundle.depth), "V": int(bundle.vocab_size), "prompts": prompts,
            "settings": settings.as_dict(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


# ----------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m real_models.record",
                      description="Record real speculative-decoding rounds into a trace file "
                                  "(docs/traces.md).")
    add_out(p, "the trace file to write (.npz)", metavar="FILE", required=True)
    add_checkpoints(p)
    add_device(p)
    add_dtype(p, DTYPES, "model dtype (default: the checkpoint's)")
    add_prompts(p, default=4)
    p.add_argument("--rounds", type=positive_int, metavar="N", default=8,
                   help="rounds per prompt (default: %(default)s)")
    p.add_argument("--budget", type=positive_int, metavar="B_MAX", default=256,
                   help="the superset tree's budget B_max (default: %(default)s)")
    p.add_argument("--temperatures", type=temperature, nargs="+", metavar="T",
                   default=[0.0, 1.0], help="recorded target temperatures (default: 0 1)")
    p.add_argument("--decode-temperature", type=temperature, metavar="T", default=None,
                   help="the decode's own temperature (default: the first of --temperatures)")
    p.add_argument("--top-k", type=nonnegative_int, metavar="K", default=None,
                   help="drafter entries kept per depth, >= B_max (0: dense; default dense "
                        f"for V <= {DENSE_VOCAB_LIMIT}, else B_max)")
    p.add_argument("--target-top-k", type=nonnegative_int, metavar="K", default=None,
                   help="target entries kept per node and positive temperature (0: full "
                        f"rows; default full for V <= {DENSE_VOCAB_LIMIT}, else 64)")
    p.add_argument("--sampled-tree", metavar="SPEC", default=None,
                   help="also record a sampled tree: METHOD:BUDGET[@T][:RULE], e.g. "
                        "sampled-ddtree:16@1:rrsw")
    p.add_argument("--prompt-tokens", type=positive_int, metavar="N", default=32,
                   help="tokens per held-out prompt (default: %(default)s)")
    add_seed(p, "seed of the decode and of the sampled trees (default: %(default)s)")
    add_threads(p)
    add_debug(p)
    return p


def settings_from(args: argparse.Namespace, V: int) -> RecordSettings:
    temps = tuple(dict.fromkeys(float(t) for t in args.temperatures))
    dt = temps[0] if args.decode_temperature is None else float(args.decode_temperature)
    if dt not in temps:
        raise ValueError(f"--decode-temperature {dt:g} must be one of --temperatures")
    top_k = (0 if V <= DENSE_VOCAB_LIMIT else args.budget) if args.top_k is None else args.top_k
    if top_k and top_k < min(args.budget, V):
        raise ValueError(f"--top-k {top_k} is below --budget {args.budget}: DDTree at B_max "
                         "reads the top B_max entries of every depth")
    top_k = 0 if top_k >= V else top_k
    ttk = (0 if V <= DENSE_VOCAB_LIMIT else 64) if args.target_top_k is None \
        else args.target_top_k
    ttk = 0 if ttk >= V else ttk
    sampled = None if args.sampled_tree is None else parse_sampled_spec(args.sampled_tree, temps)
    return RecordSettings(args.budget, temps, dt, args.rounds, top_k, ttk, sampled, args.seed,
                          args.prompt_tokens)


def _human(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} GB"


def _body(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    target = args.target or TINY_TARGET
    drafter = args.drafter or TINY_DRAFTER
    bundle = load(target, drafter, device=args.device, dtype=args.dtype)
    s = settings_from(args, int(bundle.vocab_size))
    prompts = load_prompts(bundle, args.prompts, args.prompt_tokens)
    header = header_for(bundle, s, device=args.device, dtype=args.dtype, target=target,
                        drafter=drafter, prompts=len(prompts))
    R = len(prompts) * s.rounds
    est = trace.expected_bytes(
        rounds=R, vocab_size=int(bundle.vocab_size), depth=int(bundle.depth), b_max=s.b_max,
        temperatures=s.temperatures, top_k=s.top_k, target_top_k=s.target_top_k,
        sampled_size=0 if s.sampled is None else s.sampled["budget"],
        context_tokens=args.prompt_tokens + s.rounds * (int(bundle.depth) + 1) // 2)
    _log(f"recording {R} rounds ({len(prompts)} prompts x {s.rounds}) of {target} + {drafter} "
         f"on {args.device}: expected size <= {_human(est)} uncompressed")
    part = args.out.with_name(args.out.name + ".part")
    recs: list[dict] = []
    if part.is_file():
        h, arrays = trace.read(part)
        if h.get("settings") == header["settings"] and h.get("models") == header["models"]:
            recs = _unpack_part(arrays)
            _log(f"resuming from {part}: {len({r['prompt'] for r in recs})} prompts done")
        else:
            _log(f"ignoring {part}: other settings")
    done = {r["prompt"] for r in recs}
    t0, n0 = time.perf_counter(), 0
    for i, p in enumerate(prompts):
        if i in done:
            continue
        new = record(bundle, [p], s, prompt_ids=[i])
        recs.extend(new)
        n0 += len(new)
        el = time.perf_counter() - t0
        _log(f"prompt {i + 1}/{len(prompts)}: {len(recs)}/{R} rounds, "
             f"{n0 / el:.2f} rounds/s")
        if len(recs) < R:
            trace.write(part, header, _pack_part(recs))
    recs.sort(key=lambda r: (r["prompt"], r["round"]))
    trace.write(args.out, header, pack(recs, s, L=int(bundle.depth), V=int(bundle.vocab_size)))
    if part.is_file():
        part.unlink()
    size = args.out.stat().st_size
    el = time.perf_counter() - t0
    _log(f"wrote {args.out}: {R} rounds, {_human(size)} ({size / max(R, 1):.0f} bytes/round), "
         f"{n0 / el if el > 0 else float('nan'):.2f} rounds/s")
    return 0


def _pack_part(recs: list[dict]) -> dict:
    """A checkpoint: each round's dict flattened into arrays ``r{i}.{key}``."""
    out: dict[str, np.ndarray] = {}
    for i, r in enumerate(recs):
        for k, v in r.items():
            if k == "s_laws":
                out[f"r{i}.{k}"] = np.stack(v) if v else np.zeros((0, 0))
            else:
                out[f"r{i}.{k}"] = np.asarray(v)
    return out


def _unpack_part(arrays: dict) -> list[dict]:
    recs: dict[int, dict] = {}
    for key, v in arrays.items():
        if not key.startswith("r") or "." not in key:
            continue
        i, k = key[1:].split(".", 1)
        val = list(v) if k == "s_laws" else (v.item() if v.ndim == 0 else np.array(v))
        recs.setdefault(int(i), {})[k] = val
    return [recs[i] for i in sorted(recs)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return run(parser, args, _body)


if __name__ == "__main__":
    sys.exit(main())
