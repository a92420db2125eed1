r"""Measure the drafter's and the target's latency and write a ``treespec-latency/1`` file.

``python -m real_models.profile [--target DIR --drafter DIR | --arch qwen3-8b] [--device cpu]``

What is timed (median of ``--repeats`` after ``--warmup`` untimed calls, per cell):

* **verification** ``C_v(n, ℓ)``: one target forward
  (:meth:`real_models.target.TargetBackend.verify_forward`, hidden states requested, as in
  decoding) over ``n`` query tokens (root included) after a cached context of ``ℓ`` tokens,
  with the 4-D tree mask of a DDTree-shaped tree of ``n - 1`` nodes (built from a fixed
  synthetic ``log_q``; the mask is built before the clock starts, as decoding counts it as
  overhead). The KV cache is restored to the ``ℓ``-token prefill before every call.
* **draft** ``C_d(ℓ)``: the drafter's block forward with log-softmax to host
  (``real_models.backend.Drafting.log_q``) plus the context-cache update for
  ``ceil(block_size / 2)`` accepted tokens, i.e. the draft stage of one round.

Each context's verification row is replaced by its monotone-convex least-squares fit
(:func:`treespec_sim.cost.fit_monotone_convex`) and the result is a
:class:`treespec_sim.cost.TabulatedCost`, written with ``to_dict()`` plus metadata: ``device``,
``device_name``, ``model``, ``target_arch`` / ``drafter_arch`` (the shapes that determine
latency), ``dtype``, ``torch``, ``transformers``, ``threads``, ``date``, the raw medians and
the draft cost per context. ``treespec_sim.cost.get_cost_model(path)`` and
``real_models.decode(..., cost=path)`` read it; :func:`load_profile` also checks the metadata
against the bundle it will be used with.

``--arch qwen3-4b`` / ``qwen3-8b`` profiles *randomly initialised* Qwen3-4B / Qwen3-8B
targets with DFlash drafters of the published ``z-lab/Qwen3-{4B,8B}-DFlash-b16`` shapes, built
from configs written here (no download): latency does not depend on weight values. Meant for a
GPU (``--device cuda``, bfloat16); ``real_models/gpu_run.sh`` runs both in one device slot
(``--small`` scales them down for its CPU rehearsal).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import math
import platform
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from treespec_sim import DraftTree, machine
from treespec_sim.cli import (
    OneLineParser,
    add_checkpoints,
    add_debug,
    add_device,
    add_dtype,
    add_out,
    add_repeats,
    add_threads,
    nonnegative_int,
    positive_float,
    positive_int,
    run,
)
from treespec_sim.cost import SCHEMA_BATCH, BatchTabulatedCost, TabulatedCost, cost_model_from_dict
from treespec_sim.files import atomic_path, atomic_write_text
from treespec_sim.policies import ddtree

from . import bundle as bundle_mod
from ._deps import require
from .backend import Drafting
from .bundle import DTYPES, Bundle, check_device, check_pair
from .drafter import DFlashDrafter, DraftCache, parse_drafter_config, qwen3_config
from .target import TargetBackend

torch = require("torch")

__all__ = ["ARCHS", "SCHEMA", "ProfileMismatch", "batch_document", "build_parser",
           "build_random_bundle", "check_profile", "fit_document", "load_profile", "main",
           "model_signature", "profile_bundle", "raw_document", "small_arch"]

SCHEMA = "treespec-latency/1"
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
#: The committed CPU profile of the shipped tiny models.
CPU_TINY = PROFILES_DIR / "cpu_tiny.json"

_QWEN3_COMMON = dict(vocab_size=151936, head_dim=128, num_attention_heads=32,
                     num_key_value_heads=8, max_position_embeddings=40960, rms_norm_eps=1e-6,
                     rope_theta=1000000.0, attention_bias=False, initializer_range=0.02)
#: Published Qwen3 shapes (Qwen/Qwen3-4B, Qwen/Qwen3-8B config.json) and the DFlash drafters'
#: (z-lab/Qwen3-{4B,8B}-DFlash-b16: 5 layers of the target's width, block 16, mask id 151669,
#: target_layer_ids [1, 9, 17, 25, 33]).
ARCHS: dict[str, dict] = {
    "qwen3-4b": {"target": dict(_QWEN3_COMMON, hidden_size=2560, intermediate_size=9728,
                                num_hidden_layers=36, tie_word_embeddings=True),
                 "drafter_layers": 5, "block_size": 16, "mask_token_id": 151669,
                 "target_layer_ids": [1, 9, 17, 25, 33]},
    "qwen3-8b": {"target": dict(_QWEN3_COMMON, hidden_size=4096, intermediate_size=12288,
                                num_hidden_layers=36, tie_word_embeddings=False),
                 "drafter_layers": 5, "block_size": 16, "mask_token_id": 151669,
                 "target_layer_ids": [1, 9, 17, 25, 33]},
}



def small_arch(name: str) -> dict:
    """A scaled-down copy of ``ARCHS[name]`` for CPU rehearsals of the GPU run.

    The same depth (36 target layers), drafter layout (5 layers, block 16, the same target
    layer ids) and head layout, at 1/64 of the width, 4 heads of 16 and a vocabulary of 2048
    (mask id 2047). Named ``"<name>-small"``; latencies from it say nothing about ``name``.
    """
    if name not in ARCHS:
        raise ValueError(f"unknown arch {name!r}; known: {', '.join(ARCHS)}")
    a = ARCHS[name]
    width = a["target"]["hidden_size"] // 64
    target = dict(a["target"], vocab_size=2048, hidden_size=width,
                  intermediate_size=a["target"]["intermediate_size"] // 64, head_dim=16,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    return dict(a, name=f"{name}-small", target=target, mask_token_id=2047)


CPU_NODE_COUNTS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)
CPU_CONTEXTS = (16, 64, 128, 192)
GPU_NODE_COUNTS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 160, 192, 256, 384, 512, 768, 1024)
GPU_CONTEXTS = (256, 1024, 2048, 4096)

_ARCH_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "head_dim", "tie_word_embeddings")


class ProfileMismatch(ValueError):
    """A latency file does not describe the requested device or models."""


# ------------------------------------------------------------------------------ identity
def device_identity(device) -> tuple[str, str]:
    """(device type, device name): ``("cpu", "<cpu model>")`` or ``("cuda", "<gpu name>")``."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return "cuda", torch.cuda.get_device_name(dev)
    return dev.type, machine.cpu_name()


def model_signature(bundle) -> dict:
    """The shapes that determine latency: target and drafter architecture, dtype, block size."""
    tcfg = bundle.target.config
    target = {k: getattr(tcfg, k, None) for k in _ARCH_KEYS}
    drafter = None
    if bundle.drafter is not None:
        dcfg = bundle.drafter.config
        drafter = {k: getattr(dcfg, k, None) for k in _ARCH_KEYS if k != "tie_word_embeddings"}
        drafter["target_layer_ids"] = list(bundle.spec.target_layer_ids)
        drafter["block_size"] = int(bundle.block_size)
    return {"target_arch": target, "drafter_arch": drafter, "dtype": str(bundle.dtype)}


def _model_name(bundle) -> str:
    t = Path(str(bundle.target_dir)).name
    d = "none" if bundle.drafter_dir is None else Path(str(bundle.drafter_dir)).name
    return f"{t} + {d}"


# ------------------------------------------------------------------------- random models
def build_random_bundle(arch: str | dict, *, device="cuda", dtype="bfloat16", seed: int = 0):
    """A :class:`real_models.bundle.Bundle` of randomly initialised models (no files).

    Parameters
    ----------
    arch : str or dict
        A key of :data:`ARCHS`, or a dict of the same form (``target`` Qwen3 config keys,
        ``drafter_layers``, ``block_size``, ``mask_token_id``, ``target_layer_ids``).
    device : str
    dtype : str
        ``bfloat16`` (default), ``float16`` or ``float32``.
    seed : int
    """
    transformers = require("transformers")
    name = arch if isinstance(arch, str) else arch.get("name", "custom")
    if isinstance(arch, str):
        if arch not in ARCHS:
            raise ValueError(f"unknown arch {arch!r}; known: {', '.join(ARCHS)}")
        arch = ARCHS[arch]
    if isinstance(dtype, str) and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}; got {dtype!r}")
    tdtype = DTYPES[dtype] if isinstance(dtype, str) else dtype
    device = check_device(device)
    tcfg_d = dict(arch["target"], architectures=["Qwen3ForCausalLM"], model_type="qwen3")
    tcfg = transformers.Qwen3Config(**{k: v for k, v in tcfg_d.items()
                                       if k not in ("architectures", "model_type")})
    tcfg._attn_implementation = "sdpa"
    dcfg = {k: v for k, v in arch["target"].items() if k != "tie_word_embeddings"}
    dcfg.update(architectures=["DFlashDraftModel"], model_type="qwen3",
                num_hidden_layers=arch["drafter_layers"], block_size=arch["block_size"],
                num_target_layers=arch["target"]["num_hidden_layers"],
                dflash_config={"target_layer_ids": arch["target_layer_ids"],
                               "mask_token_id": arch["mask_token_id"]},
                tie_word_embeddings=False, layer_types=["full_attention"] * arch["drafter_layers"])
    spec = parse_drafter_config(dcfg, f"<{name} drafter>")
    bs = check_pair(tcfg_d, dcfg, spec)
    torch.manual_seed(seed)
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(tdtype)
        with torch.device(device):
            model = transformers.Qwen3ForCausalLM(tcfg)
            drafter = DFlashDrafter(qwen3_config(dcfg), spec)
    finally:
        torch.set_default_dtype(old)
    model = model.to(device=device, dtype=tdtype).eval()
    gen = torch.Generator(device=device).manual_seed(seed)
    drafter.init_weights(gen)
    drafter = drafter.to(device=device, dtype=tdtype).eval()
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

    # ``.to(dtype)`` also cast the RoPE ``inv_freq`` buffers; rebuild them in float32, as
    # ``from_pretrained`` (real_models.load) leaves them, so the random models' positions match
    model.model.rotary_emb = Qwen3RotaryEmbedding(model.config).to(device)
    drafter.rotary_emb = Qwen3RotaryEmbedding(drafter.config).to(device)
    backend = TargetBackend(model, spec.target_layer_ids)
    label = Path(f"random-{name}")
    return Bundle(backend, drafter, spec, bs, None, device, tdtype, label,
                  Path(f"random-{name}-dflash"))


# ------------------------------------------------------------------------------ timing
def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _profile_tree(n_nodes: int, depth: int, vocab: int):
    """A DDTree of ``n_nodes`` nodes from a fixed, moderately peaked synthetic ``log_q`` (the
    root alone for ``n_nodes = 0``: one query token)."""
    if n_nodes == 0:
        return DraftTree.root_only(2)
    rng = np.random.default_rng(1234)
    logits = rng.standard_normal((depth, vocab)) * 3.0
    log_q = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    return ddtree(log_q.astype(np.float32), n_nodes, root_token=2)


@dataclass
class ProfileResult:
    """Raw medians and the fitted model (see :func:`profile_bundle`)."""

    node_counts: tuple[int, ...]
    context_lengths: tuple[int, ...]
    raw_verify_s: np.ndarray          # (C, N) medians
    spread_verify_s: np.ndarray       # (C, N) (p75 - p25) / median
    draft_s: np.ndarray               # (C,) medians
    seconds: float
    meta: dict = field(default_factory=dict)
    batch_size: int = 1               # requests per pass (node_counts are per request)


@torch.inference_mode()
def profile_bundle(bundle, *, node_counts=CPU_NODE_COUNTS, context_lengths=CPU_CONTEXTS,
                   warmup: int = 2, repeats: int = 7, time_budget_s: float | None = None,
                   progress: bool = False, on_row=None, batch_size: int = 1) -> ProfileResult:
    """Time verification forwards and draft rounds on ``bundle`` (see the module docstring).

    Parameters
    ----------
    bundle : real_models.bundle.Bundle
    node_counts : sequence of int
        Query tokens per verification forward, root included (``>= 1``, increasing).
    context_lengths : sequence of int
        Cached tokens before the forward; ``ℓ + depth + 1`` must fit the target's positions.
    warmup, repeats : int
        Untimed and timed calls per cell (the median is kept).
    time_budget_s : float, optional
        If the projected time of the next context row would pass this budget, the remaining
        rows are skipped (recorded in ``meta["truncated"]``); at least one row is measured.
    progress : bool
        Print one line per context row.
    on_row : callable, optional
        Called with the :class:`ProfileResult` of the rows measured so far after each context
        row (``meta["partial"]`` says how many of how many), so that a caller can save partial
        results before a time limit interrupts the profile.
    batch_size : int
        Requests per pass (``b``): each verification pass verifies ``b`` trees of ``n - 1``
        nodes after ``b`` cached contexts of ``ℓ`` tokens (``b n`` query tokens in all), and
        the draft stage is one drafter forward over ``b`` blocks plus their cache updates.
        ``node_counts`` stay per request; :func:`batch_document` turns them into totals.
    """
    nc = tuple(int(n) for n in node_counts)
    cl = tuple(int(c) for c in context_lengths)
    if not nc or nc[0] < 1 or any(b <= a for a, b in itertools.pairwise(nc)):
        raise ValueError(f"node_counts must be increasing integers >= 1; got {nc}")
    if not cl or cl[0] < 2 or any(b <= a for a, b in itertools.pairwise(cl)):
        raise ValueError(f"context_lengths must be increasing integers >= 2; got {cl}")
    if repeats < 1 or warmup < 0:
        raise ValueError("repeats must be >= 1 and warmup >= 0")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer; got {batch_size!r}")
    b = batch_size
    if bundle.drafter is None:
        raise ValueError("profiling needs a drafter (the draft cost is part of the model)")
    limit = min(bundle.max_positions, int(bundle.drafter.config.max_position_embeddings))
    if cl[-1] + bundle.block_size + 1 > limit:
        raise ValueError(f"context length {cl[-1]} + a block of {bundle.block_size} does not fit "
                         f"the models' {limit} positions")
    V, L = bundle.vocab_size, bundle.depth
    trees = {n: _profile_tree(n - 1, L, V) for n in nc}
    dev = bundle.device
    target = bundle.target
    drafting = Drafting(bundle)
    rng = np.random.default_rng(0)
    k_acc = math.ceil(bundle.block_size / 2)
    raw = np.full((len(cl), len(nc)), np.nan)
    spread = np.full_like(raw, np.nan)
    draft = np.full(len(cl), np.nan)
    # global warm-up: allocator and kernels at the largest size
    if b == 1:
        target.prefill(rng.integers(2, V, size=cl[0]), want_features=True)
    else:
        target.prefill_batch(rng.integers(2, V, size=(b, cl[0])))
    snap0 = target.snapshot()
    for _ in range(max(warmup, 1)):
        target.restore(snap0)
        if b == 1:
            target.verify_forward(trees[nc[-1]], want_features=True)
        else:
            target.verify_batch_forward(trees[nc[-1]], b)
    t_start = time.perf_counter()
    done = 0
    truncated = None
    for ci, ell in enumerate(cl):
        elapsed = time.perf_counter() - t_start
        if time_budget_s is not None and done and elapsed / done * (done + 1) > time_budget_s:
            truncated = f"stopped after {done} of {len(cl)} contexts (time budget {time_budget_s}s)"
            break
        prompt = rng.integers(2, V, size=(b, ell + 1))
        if b == 1:
            feats = target.prefill(prompt[0, :-1], want_features=True)
        else:
            feats = target.prefill_batch(prompt[:, :-1])
        dcache = DraftCache(len(bundle.drafter.layers))
        bundle.drafter.extend_cache(dcache, feats,
                                    torch.arange(ell, device=dev)[None].expand(b, -1))
        snap = target.snapshot()
        masks = {n: (target.tree_mask(trees[n], ell) if trees[n].size or b > 1 else None)
                 for n in nc}
        times: dict[int, list[float]] = {n: [] for n in nc}
        # interleaved: every repeat visits every token count in a fresh random order, so slow
        # drifts of a shared machine spread over all cells instead of biasing a few
        for r in range(warmup + repeats):
            for n in rng.permutation(nc):
                n = int(n)
                target.restore(snap)
                _sync(dev)
                t0 = time.perf_counter()
                if b == 1:
                    target.verify_forward(trees[n], want_features=True, mask=masks[n])
                else:
                    target.verify_batch_forward(trees[n], b, mask=masks[n])
                _sync(dev)
                if r >= warmup:
                    times[n].append(time.perf_counter() - t0)
        for ni, n in enumerate(nc):
            ts = times[n]
            med = float(np.median(ts))
            raw[ci, ni] = med
            q25, q75 = np.percentile(ts, [25, 75])
            spread[ci, ni] = float((q75 - q25) / med) if med > 0 else 0.0
        del masks
        # draft stage: block forward + log-softmax to host + cache update for k accepted tokens
        target.restore(snap)
        fwd = (target.verify_forward(trees[nc[-1]], want_features=True) if b == 1
               else target.verify_batch_forward(trees[nc[-1]], b))
        kf = fwd.features[:, : min(k_acc, fwd.features.shape[1])]
        pos = torch.arange(ell, ell + kf.shape[1], device=dev)[None].expand(b, -1)
        ds = []
        for r in range(warmup + repeats):
            c = DraftCache(len(bundle.drafter.layers))
            c.keys, c.values, c.length = list(dcache.keys), list(dcache.values), dcache.length
            _sync(dev)
            t0 = time.perf_counter()
            if b == 1:
                drafting.log_q(c, int(prompt[0, -1]), ell)
            else:
                drafting.log_q_batch(c, prompt[:, -1], ell)
            bundle.drafter.extend_cache(c, kf, pos)
            _sync(dev)
            if r >= warmup:
                ds.append(time.perf_counter() - t0)
        draft[ci] = float(np.median(ds))
        done += 1
        if progress:
            where = f"context {ell}" if b == 1 else f"batch {b}, context {ell}"
            print(f"  {where}: verify {raw[ci, 0] * 1e3:.2f} .. {raw[ci, -1] * 1e3:.2f} ms "
                  f"(n = {nc[0]} .. {nc[-1]}), draft {draft[ci] * 1e3:.2f} ms "
                  f"({time.perf_counter() - t_start:.0f}s)", flush=True)
        if on_row is not None and done < len(cl):
            on_row(ProfileResult(nc, cl[:done], raw[:done].copy(), spread[:done].copy(),
                                 draft[:done].copy(), time.perf_counter() - t_start,
                                 {"partial": f"{done} of {len(cl)} contexts measured"}))
    keep = slice(0, done)
    meta = {"truncated": truncated} if truncated else {}
    return ProfileResult(nc, cl[keep], raw[keep], spread[keep], draft[keep],
                         time.perf_counter() - t_start, meta, b)


def profile_meta(bundle, result: ProfileResult, *, warmup: int = 2, repeats: int = 7) -> dict:
    """The latency file's metadata: device, models, versions, raw medians (no fit)."""
    import transformers

    dtype, dname = device_identity(bundle.device)
    sig = model_signature(bundle)
    return {
        "device": dtype, "device_name": dname, "model": _model_name(bundle), **sig,
        "runtime": f"HF transformers {transformers.__version__}, SDPA, "
                   f"{str(bundle.dtype).removeprefix('torch.')}, batch 1, tree mask",
        "kind": "monotone-convex least-squares fit of median verification latency (seconds)",
        "source": "python -m real_models.profile",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "python": sys.version.split()[0], "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "profile": {"warmup": warmup, "repeats": repeats, "statistic": "median",
                    "seconds": round(result.seconds, 1),
                    "tree": "DDTree shape of n-1 nodes from a fixed synthetic log_q, 4-D mask",
                    "draft": "block forward + log-softmax to host + context-cache update of "
                             "ceil(block_size/2) tokens; draft_cost_s = median over contexts"},
        "raw_verify_s": {str(c): [float(x) for x in r] for c, r in
                         zip(result.context_lengths, result.raw_verify_s, strict=True)},
        "iqr_over_median": {str(c): [round(float(x), 4) for x in r] for c, r in
                            zip(result.context_lengths, result.spread_verify_s, strict=True)},
        "draft_cost_s_by_context": {str(c): float(x) for c, x in
                                    zip(result.context_lengths, result.draft_s, strict=True)},
        **result.meta,
    }


def raw_document(bundle, result: ProfileResult, *, name: str | None = None, warmup: int = 2,
                 repeats: int = 7) -> dict:
    """The raw medians and metadata as a JSON object, before any fit (``"fit": "pending"``).

    It has no ``verify_cost_s``, so it is not yet a usable latency model;
    :func:`fit_document` turns it into one.
    """
    dev = device_identity(bundle.device)[0]
    return {"schema": SCHEMA, "cost_model": "tabulated",
            "name": name or f"{dev}-{Path(str(bundle.target_dir)).name}",
            "fit": "pending", **profile_meta(bundle, result, warmup=warmup, repeats=repeats),
            "draft_cost_s": float(np.median(result.draft_s)),
            "node_counts": list(result.node_counts),
            "context_lengths": list(result.context_lengths)}


def fit_document(data: dict):
    """The fitted :class:`treespec_sim.cost.TabulatedCost` of a :func:`raw_document`.

    Works on any latency file that carries ``raw_verify_s`` (a finished one is refitted).
    """
    keys = ("node_counts", "context_lengths", "raw_verify_s", "draft_cost_s")
    missing = [k for k in keys if k not in data]
    if missing:
        raise ValueError(f"data: not a raw profile; missing {', '.join(missing)}")
    meta = {k: v for k, v in data.items()
            if k not in (*keys[:2], "draft_cost_s", "schema", "cost_model", "name", "fit",
                         "attribution", "estimate", "verify_cost_s", "node_count_meaning")}
    rows = [data["raw_verify_s"][str(c)] for c in data["context_lengths"]]
    dev, dname = data.get("device", "?"), data.get("device_name", "?")
    return TabulatedCost.from_measurements(
        data["node_counts"], data["context_lengths"], rows, float(data["draft_cost_s"]),
        fit=True, name=data.get("name", "profile"),
        provenance=f"measured by python -m real_models.profile on {dev} ({dname})",
        estimate=False, meta=meta)


def to_cost_model(bundle, result: ProfileResult, *, name: str | None = None,
                  warmup: int = 2, repeats: int = 7):
    """The fitted :class:`treespec_sim.cost.TabulatedCost` with the profile's metadata."""
    return fit_document(raw_document(bundle, result, name=name, warmup=warmup,
                                     repeats=repeats))


def batch_document(bundle, results: dict[int, ProfileResult], *, name: str | None = None,
                   warmup: int = 2, repeats: int = 7) -> dict:
    """A ``treespec-latency/2`` file of :func:`profile_bundle` results at several batch sizes.

    Each batch size's table is :func:`fit_document` of its raw medians with ``node_counts`` the
    pass's total query tokens (``b`` times the per-request counts); the device, models and
    versions are stated once, each table keeps its raw medians.
    """
    if not results:
        raise ValueError("results: no batch size was profiled")
    first = results[min(results)]
    common = profile_meta(bundle, first, warmup=warmup, repeats=repeats)
    per_batch = ("raw_verify_s", "iqr_over_median", "draft_cost_s_by_context", "profile",
                 "truncated", "partial")
    tables = []
    for b in sorted(results):
        res = results[b]
        raw = raw_document(bundle, res, name=name, warmup=warmup, repeats=repeats)
        raw["node_counts"] = [b * n for n in res.node_counts]
        table = fit_document(raw)
        keep = {k: v for k, v in table.meta.items() if k in per_batch}
        tables.append((b, TabulatedCost(table.node_counts, table.context_lengths,
                                        table.verify_s, table.draft_s, meta=keep)))
    dev = device_identity(bundle.device)[0]
    runtime = common["runtime"].replace("batch 1", f"batches {sorted(results)}")
    meta = {k: v for k, v in common.items() if k not in per_batch} | {"runtime": runtime}
    model = BatchTabulatedCost(
        tuple(tables), name=name or f"{dev}-{Path(str(bundle.target_dir)).name}",
        provenance=f"measured by python -m real_models.profile --batch-sizes on {dev} "
                   f"({common['device_name']})", estimate=False, meta=meta)
    return model.to_dict()


# ------------------------------------------------------------------------------ checking
def check_profile(data: dict, bundle, *, where: str = "latency file") -> list[str]:
    """Check a latency file's contents against ``bundle``; return warnings.

    Raises
    ------
    ValueError
        Not a ``treespec-latency/1`` object.
    ProfileMismatch
        The file names another device type (``cpu`` vs ``cuda``) or other target/drafter
        shapes or dtype than ``bundle``'s.

    Returns
    -------
    list of str
        Softer differences (another CPU or GPU model, no device/model metadata at all, another
        thread count), to be recorded in the run record.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a latency file must be a JSON object; got "
                         f"{type(data).__name__}")
    if data.get("schema") not in (SCHEMA, SCHEMA_BATCH):
        raise ValueError(f"{where}: schema is {data.get('schema')!r}, expected {SCHEMA!r} "
                         f"or {SCHEMA_BATCH!r} "
                         f"(write latency files with python -m real_models.profile or "
                         f"treespec_sim.cost.save_cost_model)")
    notes = []
    dev_type, dev_name = device_identity(bundle.device)
    fdev = data.get("device")
    if fdev is None:
        notes.append(f"{where}: no 'device' metadata; cannot check that it was measured on "
                     f"{dev_type} ({dev_name})")
    else:
        if str(fdev).split(":")[0] != dev_type:
            raise ProfileMismatch(f"{where}: measured on device {fdev!r}, but decoding runs on "
                                  f"{dev_type!r} ({dev_name}); profile this device with "
                                  f"python -m real_models.profile --device {dev_type}")
        if data.get("device_name") and data["device_name"] != dev_name:
            notes.append(f"{where}: measured on {data['device_name']!r}, running on "
                         f"{dev_name!r}; latencies may differ")
    sig = model_signature(bundle)
    if "target_arch" not in data and "model" not in data:
        notes.append(f"{where}: no 'model' metadata; cannot check that it describes "
                     f"{_model_name(bundle)}")
    for key in ("target_arch", "drafter_arch", "dtype"):
        if key in data and data[key] != sig[key]:
            raise ProfileMismatch(f"{where}: {key} is {data[key]!r} but the loaded models have "
                                  f"{sig[key]!r} (model {data.get('model')!r} vs "
                                  f"{_model_name(bundle)!r}); latency depends on these shapes")
    if "target_arch" not in data and "model" in data and data["model"] != _model_name(bundle):
        notes.append(f"{where}: measured for model {data['model']!r}, running "
                     f"{_model_name(bundle)!r} (no architecture metadata to compare)")
    if dev_type == "cpu" and "threads" in data and data["threads"] != torch.get_num_threads():
        notes.append(f"{where}: measured with {data['threads']} CPU thread(s), running with "
                     f"{torch.get_num_threads()}")
    return notes


def load_profile(path, bundle, *, on_mismatch: str = "error"):
    """Read a latency file for use with ``bundle``: (model, warnings).

    ``on_mismatch="warn"`` turns a :class:`ProfileMismatch` into a warning (returned and
    issued with :func:`warnings.warn`); a wrong schema always raises ``ValueError``.
    """
    if on_mismatch not in ("error", "warn"):
        raise ValueError(f"on_mismatch must be 'error' or 'warn'; got {on_mismatch!r}")
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"no latency file at {str(p)!r}")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: not valid JSON ({exc})") from None
    try:
        notes = check_profile(data, bundle, where=str(p))
    except ProfileMismatch as exc:
        if on_mismatch == "error":
            raise
        notes = [f"MISMATCH (used anyway): {exc}"]
    try:
        model = cost_model_from_dict(data)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{p}: not a usable latency model ({exc})") from None
    for n in notes:
        warnings.warn(n, stacklevel=2)
    return model, notes


# ------------------------------------------------------------------------------ figure
def plot_profile(data: dict, path) -> None:
    """Measured medians (points) and the monotone-convex fit (lines), one colour per context."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = np.asarray(data["node_counts"])
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, c in enumerate(data["context_lengths"]):
        col = f"C{i}"
        raw = np.asarray(data["raw_verify_s"][str(c)]) * 1e3
        fit = np.asarray(data["verify_cost_s"][str(c)]) * 1e3
        ax.plot(n, raw, "o", color=col, ms=4)
        ax.plot(n, fit, "-", color=col, lw=1.2, label=f"context {c}")
    ax.axhline(data["draft_cost_s"] * 1e3, color="gray", ls=":", lw=1,
               label="draft stage (median)")
    ax.set_xlabel("query tokens in the verification forward (root included)")
    ax.set_ylabel("milliseconds")
    ax.set_title(f"{data.get('model', '')} on {data.get('device', '')} "
                 f"({data.get('device_name', '')[:32]})", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)


# ------------------------------------------------------------------------------ saving
def save_profile(bundle, result: ProfileResult, out, *, figure=None, name: str | None = None,
                 warmup: int = 2, repeats: int = 7) -> dict:
    """Write ``result`` to ``out``: first the raw medians, then the fitted latency file.

    Parameters
    ----------
    bundle : real_models.bundle.Bundle
    result : ProfileResult
        Complete or partial (``meta["partial"]``) measurements.
    out : path
        The latency ``.json``; each write replaces it whole (no half-written file on a kill).
    figure : path, optional
        Also draw :func:`plot_profile` there (``.png``).
    name : str, optional
    warmup, repeats : int
        Recorded in the metadata.

    Returns
    -------
    dict
        The fitted file's contents (``treespec_sim.cost.get_cost_model(out)`` loads it).

    Raises
    ------
    ValueError, RuntimeError
        The fit failed; ``out`` then holds the raw document (``"fit": "pending"``).
    """
    raw = raw_document(bundle, result, name=name, warmup=warmup, repeats=repeats)
    atomic_write_text(out, json.dumps(raw, indent=1) + "\n")
    data = fit_document(raw).to_dict()
    if figure is not None:  # before the fitted file: a fitted file implies its figure
        with atomic_path(figure) as tmp:
            plot_profile(data, tmp)
    atomic_write_text(out, json.dumps(data, indent=1) + "\n")
    return data


# ------------------------------------------------------------------------------ CLI
def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m real_models.profile``."""
    ap = OneLineParser(
        prog="python -m real_models.profile",
        description="Measure the verification cost C_v(n, context) and the draft cost of a "
                    "target + drafter pair and write a treespec-latency/1 file (monotone-convex "
                    "fit of the medians, with metadata). With no arguments: the shipped tiny "
                    "models on CPU, printed as JSON.",
        epilog="exit status: 0 done, 1 the fit failed (the raw medians are kept in --out), "
               "2 bad input")
    add_checkpoints(ap)
    ap.add_argument("--arch", choices=sorted(ARCHS), default=None,
                    help="profile randomly initialised Qwen3 + DFlash drafter models of these "
                         "published shapes instead of --target/--drafter (default: none)")
    ap.add_argument("--small", action="store_true",
                    help="with --arch: scaled-down shapes (small_arch) for CPU rehearsals")
    add_device(ap)
    add_dtype(ap, DTYPES, "model dtype (default: the checkpoint's; bfloat16 for --arch)")
    ap.add_argument("--tokens", type=positive_int, nargs="+", metavar="N", default=None,
                    help="increasing query-token counts, root included (default: "
                         f"{' '.join(map(str, CPU_NODE_COUNTS))} on CPU, "
                         f"{' '.join(map(str, GPU_NODE_COUNTS))} on CUDA)")
    ap.add_argument("--contexts", type=int, nargs="+", metavar="L", default=None,
                    help="increasing cached context lengths (default: "
                         f"{' '.join(map(str, CPU_CONTEXTS))} on CPU, "
                         f"{' '.join(map(str, GPU_CONTEXTS))} on CUDA)")
    ap.add_argument("--batch-sizes", type=positive_int, nargs="+", metavar="B", default=None,
                    help="profile passes over B requests at once (increasing; --tokens are per "
                         "request) and write a treespec-latency/2 file with a table per batch "
                         "size (default: batch 1, a treespec-latency/1 file)")
    ap.add_argument("--warmup", type=nonnegative_int, default=2,
                    help="untimed calls before each cell (default: %(default)s)")
    add_repeats(ap, default=7,
                help="timed calls per cell; the median is kept (default: %(default)s)")
    add_threads(ap, "torch threads on CPU (default: %(default)s)")
    ap.add_argument("--time-budget", type=positive_float, metavar="SECONDS", default=None,
                    help="skip the context rows that would end past this many seconds "
                         "(recorded as truncated; at least one row is measured) (default: no "
                         "limit)")
    ap.add_argument("--name", default=None,
                    help="name stored in the latency file (default: DEVICE-TARGETDIR, or "
                         "DEVICE-ARCH-random with --arch)")
    add_out(ap, "latency file to write, updated after each context row (default: print the "
                "result as JSON)", metavar="FILE.json")
    ap.add_argument("--figure", type=Path, metavar="FILE.png", default=None,
                    help="cost-vs-tokens figure to draw (default: none)")
    add_debug(ap)
    return ap


def main(argv=None) -> int:
    parser = build_parser()
    return run(parser, parser.parse_args(argv), _main)


def _check_args(args: argparse.Namespace) -> torch.device:
    """The argument checks the parser cannot make (the numbers are checked as they are parsed),
    before any model is built or loaded; returns the device."""
    if args.arch and (args.target or args.drafter):
        raise ValueError("--arch builds random models; do not combine it with "
                         "--target/--drafter")
    if args.small and not args.arch:
        raise ValueError("--small scales down an --arch; give --arch too")
    for opt, values, low in (("--tokens", args.tokens, 1), ("--contexts", args.contexts, 2),
                             ("--batch-sizes", args.batch_sizes, 1)):
        if values is not None and (any(v < low for v in values)
                                   or any(b <= a for a, b in itertools.pairwise(values))):
            raise ValueError(f"{opt} must be increasing integers >= {low}; got "
                             f"{' '.join(map(str, values))}")
    return check_device(args.device)


def _main(args: argparse.Namespace) -> int:
    device = _check_args(args)
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    gpu = device.type == "cuda"
    if args.arch:
        arch = small_arch(args.arch) if args.small else args.arch
        bundle = build_random_bundle(arch, device=args.device, dtype=args.dtype or "bfloat16")
        label = f"{args.arch}-small" if args.small else args.arch
        name = args.name or f"{device.type}-{label}-random"
    else:
        bundle = bundle_mod.load(args.target or bundle_mod.TINY_TARGET,
                                 args.drafter or bundle_mod.TINY_DRAFTER,
                      device=args.device, dtype=args.dtype)
        name = args.name
    tokens = args.tokens or (GPU_NODE_COUNTS if gpu else CPU_NODE_COUNTS)
    contexts = args.contexts or (GPU_CONTEXTS if gpu else CPU_CONTEXTS)
    print(f"profiling {_model_name(bundle)} on {device_identity(bundle.device)}: "
          f"{len(tokens)} token counts x {len(contexts)} contexts, "
          f"{args.warmup} warm-up + {args.repeats} timed calls each", flush=True)
    save = dict(figure=args.figure, name=name, warmup=args.warmup, repeats=args.repeats)
    if args.batch_sizes:
        return _batches(args, bundle, tokens, contexts, name)

    def on_row(partial: ProfileResult) -> None:
        # partial results survive a time limit that interrupts the later rows
        try:
            save_profile(bundle, partial, args.out, **save)
            print(f"  saved {partial.meta['partial']} to {args.out}", flush=True)
        except (ValueError, RuntimeError) as exc:
            print(f"  warning: fit failed ({exc}); raw medians kept in {args.out}",
                  flush=True)

    res = profile_bundle(bundle, node_counts=tokens, context_lengths=contexts,
                         warmup=args.warmup, repeats=args.repeats,
                         time_budget_s=args.time_budget, progress=True,
                         on_row=on_row if args.out else None)
    if args.out:
        try:
            data = save_profile(bundle, res, args.out, **save)
        except (ValueError, RuntimeError) as exc:
            print(f"python -m real_models.profile: error: the fit failed ({exc}); the raw "
                  f"medians are in {args.out} (refit with real_models.profile.fit_document)",
                  file=sys.stderr)
            return 1
        print(f"wrote {args.out}" + (f" and {args.figure}" if args.figure else ""))
    else:
        data = to_cost_model(bundle, res, name=name, warmup=args.warmup,
                             repeats=args.repeats).to_dict()
        print(json.dumps(data, indent=1))
        if args.figure:
            plot_profile(data, args.figure)
            print(f"wrote {args.figure}")
    for c in data["context_lengths"]:
        row = ", ".join(f"{n}: {s * 1e3:.2f}" for n, s in
                        zip(data["node_counts"], data["verify_cost_s"][str(c)], strict=True))
        print(f"context {c} (fit, ms): {row}")
    print(f"draft stage {data['draft_cost_s'] * 1e3:.2f} ms; {res.seconds:.0f}s")
    return 0

def _batches(args: argparse.Namespace, bundle, tokens, contexts, name) -> int:
    """``--batch-sizes``: one profile per batch size, one treespec-latency/2 document."""
    results = {}
    for b in args.batch_sizes:
        results[b] = profile_bundle(bundle, node_counts=tokens, context_lengths=contexts,
                                    warmup=args.warmup, repeats=args.repeats,
                                    time_budget_s=args.time_budget, progress=True, batch_size=b)
    data = batch_document(bundle, results, name=name, warmup=args.warmup, repeats=args.repeats)
    text = json.dumps(data, indent=1) + "\n"
    if args.out:
        atomic_write_text(args.out, text)
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    for b, body in data["batches"].items():
        for c in body["context_lengths"]:
            row = ", ".join(f"{n}: {t * 1e3:.2f}" for n, t in
                            zip(body["node_counts"], body["verify_cost_s"][str(c)], strict=True))
            print(f"batch {b}, context {c} (fit, ms, query tokens in all): {row}")
        print(f"batch {b}: draft stage {body['draft_cost_s'] * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
