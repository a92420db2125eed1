r"""The target backend: a Hugging Face ``Qwen3ForCausalLM`` with tree-attention verification.

One verification forward (DDTree ``compile_ddtree_tree``; ``docs/real_models.md``) feeds the root
(the last committed token, not yet in the KV cache) and the ``n`` tree nodes in node order, with

* position ids ``start + depth`` (:meth:`treespec_sim.DraftTree.position_ids`),
* a 4-D additive mask ``(1, 1, n+1, start+n+1)``: 0 over the whole cached prefix, and inside
  the tree block 0 for ancestors and the node itself, the dtype's most negative value otherwise
  (:meth:`treespec_sim.DraftTree.attention_mask`); transformers passes a 4-D mask to the
  attention kernel as-is.

Row ``v`` of the returned logits is the target's next-token distribution after the path to node
``v``. After the verifier decides, :meth:`TargetBackend.commit` compacts the KV cache to the
prefix plus the accepted path (root included), so the next round's ``start`` is
``start + 1 + len(path)``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from treespec_sim import DraftTree

from ._deps import require

torch = require("torch")
transformers = require("transformers")

__all__ = ["LogitsOracle", "TargetBackend", "TreeForward", "logits_to_rows"]


@dataclass
class TreeForward:
    """Outputs of one verification forward.

    Attributes
    ----------
    logits : torch.Tensor (n+1, V)
        Row ``v``: logits after the path to node ``v``.
    features : torch.Tensor (1, n+1, k*d) or None
        Concatenated hidden states at the drafter's ``target_layer_ids`` (context features).
    start : int
        Cache length before the forward (position of the root).
    """

    logits: object
    features: object | None
    start: int


def logits_to_rows(logits, temperature: float) -> np.ndarray:
    """Target rows, float64 ``(n, V)``: ``softmax(logits / T)``; ``T = 0`` is one-hot argmax.

    The argmax takes the first maximal index (``numpy.argmax``), for tree and sequential
    decoding alike. Computed in float64 from the model's logits.
    """
    lg = logits.detach().to("cpu", torch.float64)
    if temperature == 0.0:
        idx = lg.argmax(dim=-1).numpy()
        rows = np.zeros(tuple(lg.shape), dtype=np.float64)
        rows[np.arange(rows.shape[0]), idx] = 1.0
        return rows
    return torch.softmax(lg / temperature, dim=-1).numpy()


class LogitsOracle:
    """Lazy target rows from a tree forward's logits (a ``treespec_sim.rows.TargetOracle``).

    Row ``v`` is computed only when a verifier reads it, in float64 on the logits' device,
    exactly as :func:`logits_to_rows` computes it (``softmax(logits / T)``; one-hot of the first
    maximal index at ``T = 0``); :meth:`edge_probs` gathers ``row(parent[v])[token[v]]`` for
    every node in one vectorised pass. A predraw-and-follow round thus reads ``depth + 1``
    rows instead of ``n + 1``, and on a GPU only those rows cross to the host.

    Parameters
    ----------
    logits : torch.Tensor (n+1, V)
    temperature : float
        ``>= 0``.
    """

    def __init__(self, logits, temperature: float) -> None:
        self.logits = logits.detach()
        self.temperature = float(temperature)
        self._rows: dict[int, np.ndarray] = {}
        self._argmax = None
        if self.temperature == 0.0:
            self._argmax = self.logits.argmax(dim=-1).cpu().numpy()

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.logits.shape[0]), int(self.logits.shape[1]))

    def row(self, v: int) -> np.ndarray:
        v = int(v)
        r = self._rows.get(v)
        if r is None:
            if self._argmax is not None:
                r = np.zeros(self.shape[1], dtype=np.float64)
                r[self._argmax[v]] = 1.0
            else:
                lg = self.logits[v].to(torch.float64) / self.temperature
                r = torch.softmax(lg, dim=-1).cpu().numpy()
            r.flags.writeable = False
            self._rows[v] = r
        return r

    def edge_probs(self, tree: DraftTree) -> np.ndarray:
        out = np.ones(tree.n_nodes, dtype=np.float64)
        if tree.size == 0:
            return out
        if int(tree.token[1:].max()) >= self.shape[1]:
            v = int(np.argmax(tree.token[1:] >= self.shape[1])) + 1
            raise ValueError(f"tree.token[{v}] = {tree.token[v]} is outside the vocabulary "
                             f"(V = {self.shape[1]})")
        par, tok = tree.parent[1:], tree.token[1:]
        if self._argmax is not None:
            out[1:] = (self._argmax[par] == tok).astype(np.float64)
            return out
        dev = self.logits.device
        inner, inv = np.unique(par, return_inverse=True)
        lg = self.logits[torch.as_tensor(inner, device=dev)].to(torch.float64) / self.temperature
        lse = torch.logsumexp(lg, dim=-1)
        picked = lg[torch.as_tensor(inv, device=dev), torch.tensor(tok, device=dev)]
        out[1:] = torch.exp(picked - lse[torch.as_tensor(inv, device=dev)]).cpu().numpy()
        return out


def _cache_kw(model) -> str:
    """Name of the KV-cache argument of ``model.forward`` (``cache`` in newer transformers)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _layers_kv(cache):
    """(keys, values) tensor lists of a DynamicCache, for old and new transformers layouts."""
    if hasattr(cache, "layers"):
        return [layer.keys for layer in cache.layers], [layer.values for layer in cache.layers]
    return cache.key_cache, cache.value_cache  # pragma: no cover - transformers < 4.56


def _set_layer_kv(cache, i: int, k, v) -> None:
    if hasattr(cache, "layers"):
        cache.layers[i].keys, cache.layers[i].values = k, v
    else:  # pragma: no cover - transformers < 4.56
        cache.key_cache[i], cache.value_cache[i] = k, v


class TargetBackend:
    """A causal LM with a KV cache for one sequence, verifying draft trees in one forward.

    Parameters
    ----------
    model : transformers ``Qwen3ForCausalLM`` (eval mode)
    feature_layers : sequence of int
        ``target_layer_ids`` whose outputs (``hidden_states[id + 1]``) are returned as
        context features (empty: no hidden states are requested).
    """

    def __init__(self, model, feature_layers=()) -> None:
        self.model = model
        self.config = model.config
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.feature_layers = tuple(int(i) for i in feature_layers)
        self._kw = _cache_kw(model)
        self.cache = None

    # ------------------------------------------------------------------ cache lifecycle
    @property
    def length(self) -> int:
        """Cached positions (``0 .. length - 1``)."""
        return 0 if self.cache is None else int(self.cache.get_seq_length())

    def reset(self) -> None:
        self.cache = transformers.DynamicCache(config=self.config)

    def snapshot(self):
        """A copy of the KV cache (restore with :meth:`restore`)."""
        keys, values = _layers_kv(self.cache)
        return [(k.clone(), v.clone()) for k, v in zip(keys, values, strict=True)]

    def restore(self, snap) -> None:
        self.reset()
        for i, (k, v) in enumerate(snap):
            self.cache.update(k.clone(), v.clone(), i)

    def _forward(self, ids, positions, mask, *, want_features: bool, logits_to_keep: int = 0):
        kwargs = {self._kw: self.cache}
        out = self.model(input_ids=ids, position_ids=positions, attention_mask=mask,
                         use_cache=True, output_hidden_states=want_features,
                         logits_to_keep=logits_to_keep, **kwargs)
        feats = None
        if want_features:
            feats = torch.cat([out.hidden_states[i + 1] for i in self.feature_layers], dim=-1)
        return out.logits[0], feats

    @torch.inference_mode()
    def prefill(self, prompt_ids, *, want_features: bool = True):
        """Start a sequence: cache ``prompt_ids`` (positions ``0..P-1``).

        Returns the context features of the prompt (1, P, k*d), or None.
        """
        self.reset()
        ids = torch.as_tensor(np.asarray(prompt_ids, dtype=np.int64), device=self.device)[None]
        pos = torch.arange(ids.shape[1], device=self.device)[None]
        _, feats = self._forward(ids, pos, None, want_features=want_features and bool(
            self.feature_layers), logits_to_keep=1)
        return feats

    @torch.inference_mode()
    def prefill_batch(self, prompt_ids):
        """Start ``b`` sequences of one length ``P`` at once (``prompt_ids`` (b, P)): a cache of
        batch ``b``, to time a batch's verification pass (``real_models.profile
        --batch-sizes``); :meth:`snapshot` and :meth:`restore` keep its batch.

        Returns the context features (b, P, k*d), or None without feature layers.
        """
        self.reset()
        ids = torch.as_tensor(np.asarray(prompt_ids, dtype=np.int64), device=self.device)
        if ids.ndim != 2:
            raise ValueError(f"prompt_ids must be (b, P); got shape {tuple(ids.shape)}")
        pos = torch.arange(ids.shape[1], device=self.device)[None].expand(ids.shape[0], -1)
        want = bool(self.feature_layers)
        out = self.model(input_ids=ids, position_ids=pos, use_cache=True,
                         output_hidden_states=want, logits_to_keep=1, **{self._kw: self.cache})
        if not want:
            return None
        return torch.cat([out.hidden_states[i + 1] for i in self.feature_layers], dim=-1)

    @torch.inference_mode()
    def verify_batch_forward(self, tree: DraftTree, batch_size: int, *, mask=None
                             ) -> TreeForward:
        """One pass over ``batch_size`` copies of ``tree``, each after its own cached sequence
        (a cache of that batch, :meth:`prefill_batch`): every request's root and nodes, in one
        forward. ``logits`` (b, n+1, V), ``features`` (b, n+1, k*d); the cache grows by
        ``n + 1`` per sequence. ``mask`` is :meth:`tree_mask` (built here when not given).
        """
        start = self.length
        if tree.root_token < 0:
            raise ValueError("tree.token[0] (root) must be the last committed token; got -1")
        b = int(batch_size)
        ids = torch.tensor(tree.token, device=self.device)[None].expand(b, -1)
        pos = torch.tensor(tree.position_ids(start), device=self.device)[None].expand(b, -1)
        if mask is None:
            mask = self.tree_mask(tree, start)
        want = bool(self.feature_layers)
        out = self.model(input_ids=ids, position_ids=pos, attention_mask=mask.expand(b, -1, -1, -1),
                         use_cache=True, output_hidden_states=want, **{self._kw: self.cache})
        feats = (torch.cat([out.hidden_states[i + 1] for i in self.feature_layers], dim=-1)
                 if want else None)
        return TreeForward(out.logits, feats, start)

    # ------------------------------------------------------------------ verification
    def tree_mask(self, tree: DraftTree, start: int):
        """The 4-D additive mask ``(1, 1, n+1, start+n+1)`` for a tree after ``start`` tokens.

        0 over the cached prefix and for ancestors-or-self inside the tree block
        (:meth:`treespec_sim.DraftTree.attention_mask`), the dtype's most negative value
        elsewhere.
        """
        n1 = tree.n_nodes
        block = np.where(tree.attention_mask(), np.float32(0.0),
                         np.float32(torch.finfo(self.dtype).min))
        mask = torch.zeros((1, 1, n1, start + n1), dtype=self.dtype, device=self.device)
        mask[0, 0, :, start:] = torch.from_numpy(block).to(device=self.device, dtype=self.dtype)
        return mask

    @torch.inference_mode()
    def verify_forward(self, tree: DraftTree, *, want_features: bool = True,
                       mask=None) -> TreeForward:
        """One forward over the root and the tree nodes; the cache grows by ``n + 1``.

        ``tree.token[0]`` must be the last committed token (the root, not yet cached).
        ``mask`` is :meth:`tree_mask` for this tree and the current cache length (built here
        when not given).
        """
        start = self.length
        n1 = tree.n_nodes
        if tree.root_token < 0:
            raise ValueError("tree.token[0] (root) must be the last committed token; got -1")
        if start + tree.max_depth + 1 > self.config.max_position_embeddings:
            raise ValueError(f"verification would reach position {start + tree.max_depth}, past "
                             f"the target's context (max_position_embeddings = "
                             f"{self.config.max_position_embeddings})")
        ids = torch.tensor(tree.token, device=self.device)[None]
        pos = torch.tensor(tree.position_ids(start), device=self.device)[None]
        if mask is None and n1 > 1:
            mask = self.tree_mask(tree, start)
        want = want_features and bool(self.feature_layers)
        logits, feats = self._forward(ids, pos, mask, want_features=want)
        return TreeForward(logits, feats, start)

    @torch.inference_mode()
    def commit(self, start: int, nodes) -> None:
        """Keep the prefix ``0..start-1`` and the tree nodes ``nodes`` (root first), in order.

        The kept entries move to positions ``start .. start + len(nodes) - 1`` of the cache.
        """
        nodes = [int(v) for v in nodes]
        m = len(nodes)
        keys, values = _layers_kv(self.cache)
        contiguous = nodes == list(range(m))
        idx = None if contiguous else torch.tensor(nodes, device=self.device) + start
        for i, (k, v) in enumerate(zip(keys, values, strict=True)):
            if idx is not None:
                k[:, :, start:start + m] = k.index_select(2, idx)
                v[:, :, start:start + m] = v.index_select(2, idx)
            _set_layer_kv(self.cache, i, k[:, :, :start + m], v[:, :, :start + m])

    @torch.inference_mode()
    def step(self, token: int):
        """Autoregressive step: feed ``token`` at the next position; logits (V,) after it."""
        start = self.length
        if start + 1 > self.config.max_position_embeddings:
            raise ValueError(f"position {start} is past the target's context "
                             f"({self.config.max_position_embeddings})")
        ids = torch.tensor([[int(token)]], device=self.device)
        pos = torch.tensor([[start]], device=self.device)
        logits, _ = self._forward(ids, pos, None, want_features=False, logits_to_keep=1)
        return logits[-1]

    # ------------------------------------------------------------------ reference path
    @torch.inference_mode()
    def sequential_logits(self, ids) -> object:
        """Logits at every position of ``ids`` from one plain causal forward, no cache (n, V)."""
        t = torch.as_tensor(np.asarray(ids, dtype=np.int64), device=self.device)[None]
        return self.model(input_ids=t, use_cache=False).logits[0]


def load_target_model(path: str | Path, *, device="cpu", dtype=None):
    """``Qwen3ForCausalLM.from_pretrained`` on a local directory (SDPA attention, eval mode)."""
    kwargs = {"attn_implementation": "sdpa"}
    if dtype is not None:
        kwargs["dtype"] = dtype
    model = transformers.Qwen3ForCausalLM.from_pretrained(str(path), local_files_only=True,
                                                          **kwargs)
    return model.to(device).eval()
