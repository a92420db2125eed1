r"""A DFlash-architecture block drafter (Chen, Liang & Liu, *DFlash*, arXiv 2602.06036).

Architecture (``dflash/model.py`` of ``z-lab/dflash``; ``docs/real_models.md``, "The drafter"):

* a stack of Qwen3-style decoder layers (RMSNorm before attention and MLP, per-head q/k
  RMSNorm, RoPE at absolute positions, SwiGLU MLP), then a final RMSNorm;
* **context features**: the target's hidden states at ``target_layer_ids`` (read at
  ``hidden_states[id + 1]``), concatenated, passed through ``fc`` (no bias) and
  ``hidden_norm`` (RMSNorm);
* in every layer, Q comes from the block only; K and V come from the context features **and**
  the block; attention is **non-causal** (every block position sees the whole context and the
  whole block);
* the block is ``[b, m, ..., m]`` (the last committed token ``b`` and ``L = block_size - 1``
  copies of ``mask_token_id``), embedded with the **target's** embedding; the outputs at block
  positions ``1..L`` go through the **target's** LM head: per-depth logits ``(L, V)`` in one
  forward pass.

The drafter has no embedding or LM head of its own. Context K/V are cached across rounds
(:class:`DraftCache`); block K/V never persist (DFlash crops its draft cache back to ``start``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._deps import require

torch = require("torch")
nn = torch.nn
F = torch.nn.functional
_qwen3 = require("transformers.models.qwen3.modeling_qwen3")
Qwen3Config = _qwen3.Qwen3Config
Qwen3MLP = _qwen3.Qwen3MLP
Qwen3RMSNorm = _qwen3.Qwen3RMSNorm
Qwen3RotaryEmbedding = _qwen3.Qwen3RotaryEmbedding
rotate_half = _qwen3.rotate_half

__all__ = ["DFlashDrafter", "DraftCache", "DrafterSpec", "check_full_attention"]

#: Weight file names looked for in a drafter directory (single file or sharded index).
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")


@dataclass(frozen=True)
class DrafterSpec:
    """The DFlash-specific part of a drafter ``config.json`` (validated).

    Attributes
    ----------
    block_size : int
        Block length including the root position; the drafter proposes ``block_size - 1``
        depths.
    target_layer_ids : tuple of int
        Target layers whose outputs are the context features (``hidden_states[id + 1]``).
    mask_token_id : int
        Token id filling block positions ``1..L``.
    num_target_layers : int or None
        Number of layers of the target the drafter was trained with (checked when present).
    output_multiplier : float
        Logit multiplier (DFlash ``compute_logits``; 1 when absent).
    final_logit_softcapping : float or None
        ``tanh`` soft-capping of the logits (DFlash ``compute_logits``; off when absent).
    input_embedding_scale : float
        Scale of the block embedding (DFlash ``_raw_input_embeddings``; 1 when absent).
    """

    block_size: int
    target_layer_ids: tuple[int, ...]
    mask_token_id: int
    num_target_layers: int | None = None
    output_multiplier: float = 1.0
    final_logit_softcapping: float | None = None
    input_embedding_scale: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def depth(self) -> int:
        """``L = block_size - 1``: the number of drafted depths."""
        return self.block_size - 1


def _dflash_value(cfg: dict, name: str, default=None):
    """DFlash's ``_draft_value``: ``dflash_config[name]``, else the top-level key."""
    sub = cfg.get("dflash_config") or {}
    return sub.get(name, cfg.get(name, default))


def parse_drafter_config(cfg: dict, where: str = "config.json") -> DrafterSpec:
    """Validate a drafter ``config.json`` (already parsed) and return its :class:`DrafterSpec`.

    Raises
    ------
    ValueError
        Naming the file and the offending key: missing ``dflash_config`` keys, a block size
        below 2, a DFlash2 (candidate-selector / conv) checkpoint, sliding-window or causal
        draft layers, a hidden size that does not split into heads.
    """
    arch = cfg.get("architectures") or []
    if any("DFlash2" in a for a in arch) or "selector_rank" in (cfg.get("dflash_config") or {}):
        raise ValueError(f"{where}: DFlash2 drafters (candidate selector, dynamic convolutions) "
                         f"are not supported; only the DFlash (v1) layout is")
    if arch and not any("DFlash" in a for a in arch):
        raise ValueError(f"{where}: architectures {arch} is not a DFlash drafter "
                         f"(expected DFlashDraftModel)")
    if "dflash_config" in cfg and not isinstance(cfg["dflash_config"], dict):
        raise ValueError(f"{where}: dflash_config must be an object")
    if _dflash_value(cfg, "target_layer_ids") is None:
        raise ValueError(f"{where}: missing dflash_config.target_layer_ids (the target layers "
                         f"whose hidden states are the drafter's context)")
    if _dflash_value(cfg, "mask_token_id") is None:
        raise ValueError(f"{where}: missing dflash_config.mask_token_id")
    ids = _dflash_value(cfg, "target_layer_ids")
    if not isinstance(ids, list) or not ids or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ValueError(f"{where}: dflash_config.target_layer_ids must be a non-empty list of "
                         f"non-negative layer indices; got {ids!r}")
    mask = _dflash_value(cfg, "mask_token_id")
    if not isinstance(mask, int) or isinstance(mask, bool) or mask < 0:
        raise ValueError(f"{where}: dflash_config.mask_token_id must be a token id; got {mask!r}")
    bs = _dflash_value(cfg, "block_size")
    if not isinstance(bs, int) or isinstance(bs, bool) or bs < 2:
        raise ValueError(f"{where}: block_size must be an integer >= 2; got {bs!r}")
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                "intermediate_size"):
        if not isinstance(cfg.get(key), int):
            raise ValueError(f"{where}: missing or non-integer {key!r}")
    if cfg.get("is_causal") is True:
        raise ValueError(f"{where}: is_causal = true (causal draft layers) is not supported; "
                         f"DFlash draft layers are non-causal")
    check_full_attention(cfg, where)
    if mask >= cfg["vocab_size"]:
        raise ValueError(f"{where}: mask_token_id {mask} is outside the vocabulary "
                         f"(vocab_size {cfg['vocab_size']})")
    ntl = cfg.get("num_target_layers")
    if ntl is not None and max(ids) >= ntl:
        raise ValueError(f"{where}: target_layer_ids {ids} reach past num_target_layers {ntl}")
    softcap = _dflash_value(cfg, "final_logit_softcapping")
    return DrafterSpec(
        block_size=bs, target_layer_ids=tuple(ids), mask_token_id=mask,
        num_target_layers=ntl,
        output_multiplier=float(_dflash_value(cfg, "output_multiplier", 1.0)),
        final_logit_softcapping=None if not softcap else float(softcap),
        input_embedding_scale=float(_dflash_value(cfg, "input_embedding_scale", 1.0)),
    )


def check_full_attention(cfg: dict, where: str) -> None:
    """Refuse a Qwen3 ``config.json`` (target or drafter) with any sliding-window attention.

    transformers' ``Qwen3Config`` (5.x, read in 5.24) switches sliding-window attention on in
    two ways: ``layer_types`` entries ``"sliding_attention"``, or, when ``layer_types`` is
    absent, ``use_sliding_window = true``, which turns every layer from ``max_window_layers``
    on into one. Tree verification needs every node to see the whole committed prefix, and the
    drafter here implements full attention only, so either key is refused, whatever
    ``max_window_layers`` says (a config that sets the switch means it).

    Parameters
    ----------
    cfg : dict
        The parsed ``config.json``.
    where : str
        The file, for the message.

    Raises
    ------
    ValueError
        Naming ``where`` and the key: ``use_sliding_window`` true, ``layer_types`` not a list,
        or an entry of ``layer_types`` other than ``"full_attention"`` (with its index).
    """
    if cfg.get("use_sliding_window"):
        raise ValueError(f"{where}: use_sliding_window = {cfg['use_sliding_window']!r}: "
                         f"sliding-window attention is not supported (tree verification and "
                         f"the drafter attend to the whole context); it must be false or absent")
    layer_types = cfg.get("layer_types")
    if layer_types is None:
        return
    if not isinstance(layer_types, list):
        raise ValueError(f"{where}: layer_types must be a list of attention types; got "
                         f"{layer_types!r}")
    for i, kind in enumerate(layer_types):
        if kind != "full_attention":
            raise ValueError(f"{where}: layer_types[{i}] = {kind!r}: only 'full_attention' "
                             f"layers are supported (no sliding window)")


def qwen3_config(cfg: dict) -> Any:
    """A transformers ``Qwen3Config`` from a parsed ``config.json`` (extra keys kept)."""
    c = Qwen3Config(**{k: v for k, v in cfg.items() if k not in ("architectures",)})
    c._attn_implementation = "sdpa"
    return c


def _apply_rope(x, cos, sin):
    """RoPE on ``x`` (batch, heads, len, head_dim) with ``cos``/``sin`` (batch, len, head_dim)."""
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


class DraftAttention(nn.Module):
    """DFlash attention: Q from the block; K/V from [context features, block]; non-causal."""

    def __init__(self, config) -> None:
        super().__init__()
        self.head_dim = getattr(config, "head_dim", None) or (
            config.hidden_size // config.num_attention_heads)
        self.n_heads = config.num_attention_heads
        self.n_kv = config.num_key_value_heads
        bias = bool(getattr(config, "attention_bias", False))
        d = config.hidden_size
        self.q_proj = nn.Linear(d, self.n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, d, bias=bias)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def kv(self, x, cos, sin):
        """Keys (normed, rotated) and values of ``x`` (batch, len, d) -> (batch, kv, len, hd)."""
        b, n, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(b, n, self.n_kv, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.n_kv, self.head_dim).transpose(1, 2)
        return _apply_rope(k, cos, sin), v

    def forward(self, h, block_rope, ctx_k, ctx_v, mask=None):
        """Attend from block ``h`` to ``[ctx_k/ctx_v, block K/V]`` (non-causal)."""
        b, n, _ = h.shape
        cos, sin = block_rope
        q = self.q_norm(self.q_proj(h).view(b, n, self.n_heads, self.head_dim)).transpose(1, 2)
        q = _apply_rope(q, cos, sin)
        bk, bv = self.kv(h, cos, sin)
        k = torch.cat([ctx_k, bk], dim=2)
        v = torch.cat([ctx_v, bv], dim=2)
        if self.n_kv != self.n_heads:
            rep = self.n_heads // self.n_kv
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                             scale=1.0 / math.sqrt(self.head_dim))
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))


class DraftLayer(nn.Module):
    """A Qwen3-style decoder layer whose attention also reads the context features."""

    def __init__(self, config) -> None:
        super().__init__()
        self.self_attn = DraftAttention(config)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size,
                                                     eps=config.rms_norm_eps)

    def forward(self, h, block_rope, ctx_k, ctx_v, mask=None):
        h = h + self.self_attn(self.input_layernorm(h), block_rope, ctx_k, ctx_v, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class DraftCache:
    """Context K/V of every draft layer for one sequence (grows by the committed tokens only).

    Attributes
    ----------
    keys, values : list of tensors (1, kv_heads, n_ctx, head_dim), one per layer
    length : int
        Context positions cached (``0 .. length - 1``).
    """

    def __init__(self, n_layers: int) -> None:
        self.keys: list = [None] * n_layers
        self.values: list = [None] * n_layers
        self.length = 0


class DFlashDrafter(nn.Module):
    """The DFlash drafter (parameters named as in the public checkpoints).

    Parameters
    ----------
    config : transformers Qwen3Config
        ``hidden_size`` must equal the target's (the block is embedded with the target's
        embedding and decoded with its LM head).
    spec : DrafterSpec
    """

    def __init__(self, config, spec: DrafterSpec) -> None:
        super().__init__()
        self.config = config
        self.spec = spec
        d = config.hidden_size
        self.layers = nn.ModuleList(DraftLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = Qwen3RMSNorm(d, eps=config.rms_norm_eps)
        self.fc = nn.Linear(len(spec.target_layer_ids) * d, d, bias=False)
        self.hidden_norm = Qwen3RMSNorm(d, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)

    # ------------------------------------------------------------------ construction / io
    def init_weights(self, generator) -> None:
        """Qwen3-style initialisation: normal(0, initializer_range) linears, unit norms."""
        std = float(getattr(self.config, "initializer_range", 0.02))
        with torch.no_grad():
            for mod in self.modules():
                if isinstance(mod, nn.Linear):
                    mod.weight.normal_(0.0, std, generator=generator)
                    if mod.bias is not None:
                        mod.bias.zero_()
                elif isinstance(mod, Qwen3RMSNorm):
                    mod.weight.fill_(1.0)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, device="cpu", dtype=None) -> DFlashDrafter:
        """Load a drafter directory: ``config.json`` + safetensors weights (strict names)."""
        path = Path(path)
        cfg_file = path / "config.json"
        if not cfg_file.is_file():
            raise FileNotFoundError(f"drafter directory {path} has no config.json")
        cfg = json.loads(cfg_file.read_text())
        spec = parse_drafter_config(cfg, str(cfg_file))
        model = cls(qwen3_config(cfg), spec)
        state = load_safetensors_dir(path, "drafter")
        state = {k.removeprefix("model."): v for k, v in state.items()}
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if "rotary_emb" not in k]
        if missing or unexpected:
            raise ValueError(f"drafter weights in {path} do not match the DFlash layout: "
                             f"missing {sorted(missing)[:6]}, unexpected {sorted(unexpected)[:6]}")
        dtype = dtype or _config_dtype(cfg)
        model = model.to(device=device, dtype=dtype).eval()
        # keep the RoPE frequencies in float32 (a cast to bf16 would round them)
        model.rotary_emb = Qwen3RotaryEmbedding(model.config).to(device)
        return model

    def save_pretrained(self, path: str | Path, extra_config: dict | None = None) -> None:
        """Write ``config.json`` (Qwen3 keys + DFlash keys) and ``model.safetensors``."""
        st = require("safetensors.torch")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()
                 if "rotary_emb" not in k}
        st.save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
        cfg = dict(extra_config or {})
        (path / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

    # ------------------------------------------------------------------ forward pieces
    def context_features(self, target_hidden):
        """``hidden_norm(fc(concat of selected target hidden states))``: (b, n, d)."""
        return self.hidden_norm(self.fc(target_hidden))

    def rope(self, x, positions):
        """(cos, sin), each (b, n, head_dim), at integer ``positions`` (b, n)."""
        return self.rotary_emb(x, positions)

    def logits(self, hidden, lm_head):
        """DFlash ``compute_logits``: the target LM head, multiplier, optional soft-cap."""
        out = lm_head(hidden)
        if self.spec.output_multiplier != 1.0:
            out = out * self.spec.output_multiplier
        cap = self.spec.final_logit_softcapping
        if cap:
            out = torch.tanh(out / cap) * cap
        return out

    def forward_train(self, block_emb, block_pos, target_hidden, ctx_pos, mask):
        """Training forward over many blocks of one batch of sequences.

        Parameters
        ----------
        block_emb : (b, m, d) embedded block tokens (all blocks of a sequence, concatenated)
        block_pos : (b, m) their absolute positions
        target_hidden : (b, n, k*d) selected target hidden states of the whole sequence
        ctx_pos : (b, n) context positions
        mask : bool (b or 1, 1, m, n + m); True = may attend

        Returns
        -------
        (b, m, d) final-normed hidden states of every block position.
        """
        ctx = self.context_features(target_hidden)
        ctx_rope = self.rope(ctx, ctx_pos)
        block_rope = self.rope(block_emb, block_pos)
        h = block_emb
        for layer in self.layers:
            ck, cv = layer.self_attn.kv(ctx, *ctx_rope)
            h = layer(h, block_rope, ck, cv, mask)
        return self.norm(h)

    def extend_cache(self, cache: DraftCache, target_hidden, positions) -> None:
        """Append context K/V for newly committed tokens (``target_hidden``: (1, n, k*d))."""
        ctx = self.context_features(target_hidden)
        cos, sin = self.rope(ctx, positions)
        for i, layer in enumerate(self.layers):
            k, v = layer.self_attn.kv(ctx, cos, sin)
            if cache.keys[i] is None:
                cache.keys[i], cache.values[i] = k, v
            else:
                cache.keys[i] = torch.cat([cache.keys[i], k], dim=2)
                cache.values[i] = torch.cat([cache.values[i], v], dim=2)
        cache.length += int(target_hidden.shape[1])

    def draft(self, cache: DraftCache, block_emb, start: int):
        """Block forwards at positions ``start .. start + block_size - 1``.

        ``block_emb`` is the embedded ``[b, m, ..., m]`` (1, block_size, d), or ``k`` blocks
        of one sequence at once (k, block_size, d) -- e.g. the conditional correction's blocks,
        ``[b, m, .., x, .., m]`` with a sampled token ``x`` written in place of a mask
        (``docs/real_models.md``, "The conditional correction"): every block attends to the
        same cached context (its K/V broadcast over the ``k`` blocks, not copied) and to
        itself only. Returns the final-normed hidden states of positions ``1..L`` (k, L, d).
        Nothing is cached.
        """
        k, n = block_emb.shape[0], block_emb.shape[1]
        pos = torch.arange(start, start + n, device=block_emb.device)[None].expand(k, n)
        rope = self.rope(block_emb, pos)
        h = block_emb
        for i, layer in enumerate(self.layers):
            ck, cv = cache.keys[i], cache.values[i]
            if k > 1:
                ck, cv = ck.expand(k, -1, -1, -1), cv.expand(k, -1, -1, -1)
            h = layer(h, rope, ck, cv, None)
        return self.norm(h)[:, 1:]


def _config_dtype(cfg: dict):
    name = cfg.get("dtype") or cfg.get("torch_dtype") or "float32"
    return {"float32": torch.float32, "bfloat16": torch.bfloat16,
            "float16": torch.float16}.get(str(name), torch.float32)


def load_safetensors_dir(path: Path, what: str) -> dict:
    """All tensors of a checkpoint directory (``model.safetensors`` or a sharded index)."""
    st = require("safetensors.torch")
    single = path / "model.safetensors"
    index = path / "model.safetensors.index.json"
    if single.is_file():
        return st.load_file(str(single))
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        out: dict = {}
        for s in shards:
            f = path / s
            if not f.is_file():
                raise FileNotFoundError(f"{what} directory {path}: shard {s} listed in "
                                        f"{index.name} is missing")
            out.update(st.load_file(str(f)))
        return out
    raise FileNotFoundError(f"{what} directory {path} has no weights: expected one of "
                            f"{', '.join(WEIGHT_FILES)}")
