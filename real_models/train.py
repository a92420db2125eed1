r"""Train the shipped tiny target and DFlash drafter (reproducible, CPU, one thread).

``python -m real_models.train [--out real_models/checkpoints] [--seed 0]``

Steps (each recorded in ``training.json`` of the checkpoint directories):

1. **Corpus**: the ``.py`` files of this interpreter's standard library (``sysconfig``'s
   ``stdlib`` path), without ``site-packages`` and test packages, in sorted relative-path order.
   A file is **held out** when the first byte of ``sha256(relative path)`` is below 13 (about 5%
   of files); held-out files are used for nothing but the validation prompts. The corpus hash is
   ``sha256`` over ``relpath NUL content NUL`` of every file in order.
2. **Tokenizer**: byte-level BPE (``tokenizers``) with 1024 entries, trained on the training
   split; special tokens ``<|endoftext|>`` (file separator) and ``<|mask|>`` (the drafter's mask
   token). Saved in Hugging Face format with the target.
3. **Target**: a ``Qwen3ForCausalLM`` trained on random 256-token windows of the training split.
4. **Drafter data**: the trained target continues random training-split prompts (96 tokens)
   by 128 tokens, two thirds greedily and one third by sampling at ``T = 1``, as DFlash trains on
   target-generated text; the target's hidden states at ``target_layer_ids`` are then computed
   by one teacher-forced forward over each whole sequence.
5. **Drafter**: the DFlash drafter trained with random anchors (many blocks per sequence, one
   attention mask), cross-entropy at depths ``1..L`` with weights ``0.85^(k-1)``; the target's
   embedding and LM head are frozen and not part of the drafter.

Every random choice comes from ``numpy.random.default_rng(seed)`` or a ``torch.Generator``
seeded from ``seed``; the script runs on one thread. Bit-identical weights are expected only on
the same machine type and library versions (float summation order differs elsewhere).
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

from treespec_sim.cli import OneLineParser, add_out, add_seed, positive_float, positive_int

from ._deps import require
from .drafter import DFlashDrafter, parse_drafter_config, qwen3_config

torch = require("torch")
transformers = require("transformers")

DEFAULT_OUT = Path(__file__).resolve().parent / "checkpoints"
HELD_OUT_BYTE = 13          # sha256(relpath)[0] < 13  ->  held out (~5%)
SPECIALS = ("<|endoftext|>", "<|mask|>")

TARGET_ARCH = dict(vocab_size=1024, hidden_size=192, intermediate_size=512, num_hidden_layers=6,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=48,
                   max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
                   rope_theta=10000.0, initializer_range=0.02)
DRAFTER_LAYERS = 2
BLOCK_SIZE = 8
TARGET_LAYER_IDS = [1, 4]


# ---------------------------------------------------------------------------- corpus
def stdlib_files() -> tuple[Path, list[str]]:
    """(stdlib root, sorted relative paths of its ``.py`` files, tests excluded)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "test", "tests", "idle_test", "__pycache__"}
    rels = []
    for p in root.rglob("*.py"):
        rel = p.relative_to(root)
        if skip.intersection(rel.parts[:-1]):
            continue
        rels.append(rel.as_posix())
    return root, sorted(rels)


def is_held_out(rel: str) -> bool:
    """The held-out rule: first byte of ``sha256(relative path)`` below :data:`HELD_OUT_BYTE`."""
    return hashlib.sha256(rel.encode()).digest()[0] < HELD_OUT_BYTE


def load_corpus() -> dict:
    """Read the corpus; return texts per split and its description (with the hash)."""
    root, rels = stdlib_files()
    h = hashlib.sha256()
    train, held = [], []
    n_bytes = 0
    for rel in rels:
        data = (root / rel).read_bytes()
        h.update(rel.encode() + b"\0" + data + b"\0")
        n_bytes += len(data)
        text = data.decode("utf-8", errors="replace")
        (held if is_held_out(rel) else train).append((rel, text))
    desc = {
        "source": "Python standard library .py files of the training interpreter",
        "python": sys.version.split()[0], "stdlib_root": str(root),
        "excluded_dirs": ["site-packages", "test", "tests", "idle_test"],
        "files": len(rels), "bytes": n_bytes, "sha256": h.hexdigest(),
        "held_out_rule": f"sha256(relpath)[0] < {HELD_OUT_BYTE}",
        "train_files": len(train), "held_out_files": len(held),
        "held_out_paths": [r for r, _ in held],
    }
    return {"train": train, "held": held, "description": desc}


def train_tokenizer(texts: list[str], vocab_size: int):
    """Byte-level BPE (tokenizers), wrapped as a ``PreTrainedTokenizerFast``."""
    tk = require("tokenizers")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS),
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                                     show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=SPECIALS[0], pad_token=SPECIALS[0],
        mask_token=SPECIALS[1])
    return fast


def encode_stream(tok, texts: list[str]) -> np.ndarray:
    eos = tok.convert_tokens_to_ids(SPECIALS[0])
    out: list[int] = []
    for ids in tok(texts, add_special_tokens=False)["input_ids"]:
        out.extend(ids)
        out.append(eos)
    return np.asarray(out, dtype=np.int32)


# ---------------------------------------------------------------------------- helpers
def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _lr(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def _init_(model, gen, std: float) -> None:
    nn = torch.nn
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.Linear | nn.Embedding):
                mod.weight.normal_(0.0, std, generator=gen)
                if getattr(mod, "bias", None) is not None:
                    mod.bias.zero_()


def windows(stream: np.ndarray, n: int, length: int, rng: np.random.Generator) -> np.ndarray:
    starts = rng.integers(0, stream.size - length, size=n)
    return np.stack([stream[s:s + length] for s in starts]).astype(np.int64)


# ---------------------------------------------------------------------------- target
def train_target(stream, val_stream, tok, args, rng, gen):
    cfg = transformers.Qwen3Config(**TARGET_ARCH, bos_token_id=tok.eos_token_id,
                                   eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    cfg._attn_implementation = "sdpa"
    model = transformers.Qwen3ForCausalLM(cfg)
    _init_(model, gen, cfg.initializer_range)
    n_params = sum(p.numel() for p in model.parameters())
    _log(f"target: {n_params / 1e6:.2f}M parameters")
    opt = torch.optim.AdamW(model.parameters(), lr=args.target_lr, betas=(0.9, 0.95),
                            weight_decay=0.1)
    seq = args.seq_len
    losses = []
    t0 = time.perf_counter()
    model.train()
    for step in range(args.target_steps):
        for g in opt.param_groups:
            g["lr"] = _lr(step, args.target_steps, args.target_lr, 50)
        x = torch.from_numpy(windows(stream, args.batch, seq, rng))
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % 25 == 0 or step == args.target_steps - 1:
            _log(f"target step {step}/{args.target_steps} loss {np.mean(losses[-25:]):.3f} "
                 f"({time.perf_counter() - t0:.0f}s)")
    model.eval()
    with torch.no_grad():
        vx = torch.from_numpy(windows(val_stream, 32, seq, np.random.default_rng(1)))
        val = float(model(input_ids=vx, labels=vx).loss)
    _log(f"target held-out loss {val:.3f}")
    return model, {"parameters": n_params, "steps": args.target_steps, "batch": args.batch,
                   "seq_len": seq, "peak_lr": args.target_lr,
                   "final_train_loss": float(np.mean(losses[-25:])),
                   "held_out_loss": val, "seconds": time.perf_counter() - t0}


# ---------------------------------------------------------------------------- drafter data
@torch.no_grad()
def generate_sequences(model, stream, args, rng, gen):
    """Prompts from the training split continued by the target (greedy or T = 1)."""
    P, G = args.prompt_len, args.gen_len
    seqs = []
    t0 = time.perf_counter()
    n_batches = math.ceil(args.draft_seqs / args.gen_batch)
    for b in range(n_batches):
        x = torch.from_numpy(windows(stream, args.gen_batch, P, rng))
        greedy = b % 3 != 2
        cache = transformers.DynamicCache(config=model.config)
        out = model(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1)
        toks = [x]
        for _ in range(G):
            logits = out.logits[:, -1].float()
            if greedy:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)
            toks.append(nxt)
            out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
        seqs.append(torch.cat(toks, dim=1))
        if b % 10 == 0:
            _log(f"generated batch {b + 1}/{n_batches} ({time.perf_counter() - t0:.0f}s)")
    return torch.cat(seqs)[: args.draft_seqs]


@torch.no_grad()
def target_features(model, seqs, layer_ids, bs=32):
    feats = []
    for i in range(0, seqs.shape[0], bs):
        out = model(input_ids=seqs[i:i + bs], output_hidden_states=True)
        feats.append(torch.cat([out.hidden_states[j + 1] for j in layer_ids], dim=-1))
    return torch.cat(feats)


# ---------------------------------------------------------------------------- drafter
def drafter_config(target_cfg, tok) -> dict:
    """The drafter ``config.json``: Qwen3 keys plus the DFlash keys."""
    base = {k: v for k, v in TARGET_ARCH.items() if k != "max_position_embeddings"}
    return {
        **base,
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "num_hidden_layers": DRAFTER_LAYERS,
        "max_position_embeddings": target_cfg.max_position_embeddings,
        "block_size": BLOCK_SIZE,
        "num_target_layers": target_cfg.num_hidden_layers,
        "dflash_config": {"target_layer_ids": TARGET_LAYER_IDS,
                          "mask_token_id": tok.convert_tokens_to_ids(SPECIALS[1])},
        "dtype": "float32",
        "tie_word_embeddings": False,
        "layer_types": ["full_attention"] * DRAFTER_LAYERS,
    }


def train_drafter(target, seqs, feats, dcfg, args, rng, gen):
    spec = parse_drafter_config(dcfg)
    model = DFlashDrafter(qwen3_config(dcfg), spec)
    model.init_weights(gen)
    n_params = sum(p.numel() for p in model.parameters())
    _log(f"drafter: {n_params / 1e6:.2f}M parameters")
    embed = target.get_input_embeddings()
    head = target.get_output_embeddings()
    for p in target.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=args.drafter_lr, betas=(0.9, 0.95),
                            weight_decay=0.01)
    L = spec.depth
    K = spec.block_size
    N = seqs.shape[1]
    A = args.anchors
    weights = torch.tensor([0.85 ** k for k in range(L)])
    ctx_pos = torch.arange(N)[None]
    losses, accs = [], []
    t0 = time.perf_counter()
    model.train()
    for step in range(args.drafter_steps):
        for g in opt.param_groups:
            g["lr"] = _lr(step, args.drafter_steps, args.drafter_lr, 50)
        idx = rng.integers(0, seqs.shape[0], size=args.batch)
        x = seqs[idx]                                         # (b, N)
        h = feats[idx]                                        # (b, N, k d)
        # anchors: distinct positions with a full block of labels after them
        anchors = np.stack([np.sort(rng.choice(np.arange(16, N - L), size=A, replace=False))
                            for _ in idx])
        a = torch.from_numpy(anchors)                         # (b, A)
        offs = torch.arange(K)
        pos = (a[:, :, None] + offs).reshape(len(idx), A * K)  # block positions
        tokens = torch.full((len(idx), A, K), spec.mask_token_id, dtype=torch.long)
        tokens[:, :, 0] = torch.gather(x, 1, a)
        labels = torch.gather(x, 1, (a[:, :, None] + offs[1:]).reshape(len(idx), -1))
        labels = labels.view(len(idx), A, L)
        # mask: block j sees context positions < a_j and its own block
        ctx_vis = ctx_pos[:, None, :] < a.reshape(len(idx), A, 1)          # (b, A, N)
        ctx_vis = ctx_vis.repeat_interleave(K, dim=1)                       # (b, A K, N)
        blk = torch.arange(A).repeat_interleave(K)
        blk_vis = (blk[:, None] == blk[None, :]).expand(len(idx), -1, -1)
        mask = torch.cat([ctx_vis, blk_vis], dim=2)[:, None]
        emb = embed(tokens.view(len(idx), -1)) * spec.input_embedding_scale
        out = model.forward_train(emb, pos, h, ctx_pos.expand(len(idx), -1), mask)
        out = out.view(len(idx), A, K, -1)[:, :, 1:]
        logits = model.logits(out, head).float()
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                               labels.reshape(-1), reduction="none")
        ce = ce.view(len(idx), A, L)
        loss = (ce * weights).sum(-1).mean() / weights.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        accs.append((logits.argmax(-1) == labels).float().mean(dim=(0, 1)).numpy())
        if step % 25 == 0 or step == args.drafter_steps - 1:
            acc = np.mean(accs[-25:], axis=0)
            _log(f"drafter step {step}/{args.drafter_steps} loss {np.mean(losses[-25:]):.3f} "
                 f"acc@depth {np.round(acc, 2).tolist()} ({time.perf_counter() - t0:.0f}s)")
    model.eval()
    return model, {"parameters": n_params, "steps": args.drafter_steps, "batch": args.batch,
                   "anchors_per_sequence": A, "peak_lr": args.drafter_lr,
                   "loss_weights": "0.85^(k-1), k = 1..L",
                   "final_loss": float(np.mean(losses[-25:])),
                   "final_accuracy_by_depth": np.mean(accs[-25:], axis=0).round(4).tolist(),
                   "seconds": time.perf_counter() - t0}


# ---------------------------------------------------------------------------- prompts
def held_out_prompts(held, tok, n: int, length: int, rng: np.random.Generator) -> list[dict]:
    """``n`` prompts of ``length`` tokens from held-out files (text and ids)."""
    out = []
    eligible = [(r, t) for r, t in held if len(t) > 8 * length]
    order = rng.permutation(len(eligible))
    for i in order:
        rel, text = eligible[int(i)]
        ids = tok(text, add_special_tokens=False)["input_ids"]
        if len(ids) < length + 1:
            continue
        s = int(rng.integers(0, len(ids) - length))
        piece = ids[s:s + length]
        out.append({"file": rel, "token_offset": s, "text": tok.decode(piece)})
        if len(out) == n:
            break
    return out


def _portable_tokenizer_config(tdir: Path) -> None:
    """Name the tokenizer class ``PreTrainedTokenizerFast`` (loads in transformers 4.x and 5.x;
    5.x writes its own ``TokenizersBackend``, unknown to older versions)."""
    f = tdir / "tokenizer_config.json"
    cfg = json.loads(f.read_text())
    cfg.pop("backend", None)
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    f.write_text(json.dumps(cfg, indent=2) + "\n")


# ---------------------------------------------------------------------------- main
def _versions() -> dict:
    return {"python": sys.version.split()[0], "torch": torch.__version__,
            "transformers": transformers.__version__, "numpy": np.__version__,
            "machine": platform.machine(), "processor": platform.processor()}


def build_parser() -> OneLineParser:
    """The parser of ``python -m real_models.train``."""
    ap = OneLineParser(prog="python -m real_models.train",
                       description=__doc__.splitlines()[0])
    add_out(ap, default=DEFAULT_OUT)
    add_seed(ap)
    ap.add_argument("--target-steps", type=positive_int, default=800)
    ap.add_argument("--drafter-steps", type=positive_int, default=1500)
    ap.add_argument("--batch", type=positive_int, default=16)
    ap.add_argument("--seq-len", type=positive_int, default=256)
    ap.add_argument("--target-lr", type=positive_float, default=3e-3)
    ap.add_argument("--drafter-lr", type=positive_float, default=2e-3)
    ap.add_argument("--draft-seqs", type=positive_int, default=3840)
    ap.add_argument("--gen-batch", type=positive_int, default=64)
    ap.add_argument("--prompt-len", type=positive_int, default=96)
    ap.add_argument("--gen-len", type=positive_int, default=128)
    ap.add_argument("--anchors", type=positive_int, default=24)
    ap.add_argument("--n-prompts", type=positive_int, default=32)
    return ap


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    t_all = time.perf_counter()

    corpus = load_corpus()
    desc = corpus["description"]
    _log(f"corpus: {desc['files']} files, {desc['bytes'] / 1e6:.1f} MB, sha256 "
         f"{desc['sha256'][:16]}..., held out {desc['held_out_files']} files")
    tok = train_tokenizer([t for _, t in corpus["train"]], TARGET_ARCH["vocab_size"])
    _log(f"tokenizer: {len(tok)} entries")
    stream = encode_stream(tok, [t for _, t in corpus["train"]])
    val_stream = encode_stream(tok, [t for _, t in corpus["held"]])
    _log(f"tokens: train {stream.size}, held out {val_stream.size}")

    target, t_info = train_target(stream, val_stream, tok, args, rng, gen)
    tdir, ddir = args.out / "tiny-target", args.out / "tiny-drafter"
    target.generation_config.pad_token_id = tok.eos_token_id
    target.save_pretrained(tdir, safe_serialization=True)
    tok.save_pretrained(tdir)
    _portable_tokenizer_config(tdir)

    seqs = generate_sequences(target, stream, args, rng, gen)
    feats = target_features(target, seqs, TARGET_LAYER_IDS)
    _log(f"drafter data: {tuple(seqs.shape)} tokens, features {tuple(feats.shape)}")
    dcfg = drafter_config(target.config, tok)
    drafter, d_info = train_drafter(target, seqs, feats, dcfg, args, rng, gen)
    drafter.save_pretrained(ddir, dcfg)

    prompts = held_out_prompts(corpus["held"], tok, args.n_prompts, args.prompt_len,
                               np.random.default_rng(args.seed + 1))
    (args.out / "heldout_prompts.json").write_text(json.dumps(
        {"description": "held-out prompts: token windows of held-out stdlib files, decoded "
                        "with the tiny tokenizer", "prompt_tokens": args.prompt_len,
         "corpus_sha256": desc["sha256"], "prompts": prompts}, indent=1) + "\n")
    record = {"command": "python -m real_models.train " + " ".join(argv or sys.argv[1:]),
              "seed": args.seed, "threads": 1, "args": {k: str(v) for k, v in vars(args).items()},
              "corpus": desc, "versions": _versions(), "target": t_info, "drafter": d_info,
              "total_seconds": time.perf_counter() - t_all}
    for d in (tdir, ddir):
        (d / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    _log(f"done in {record['total_seconds']:.0f}s; wrote {tdir} and {ddir}")


if __name__ == "__main__":
    main()
