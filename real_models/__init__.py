"""Real models: a Qwen3 target and a DFlash-architecture drafter driving ``treespec_sim``.

The torch backend of treespec: tree-attention verification on a Hugging Face
``Qwen3ForCausalLM``, a DFlash block drafter, the decoding loop for every method (each round
calls the simulator's own policies and verifiers on numpy rows), tiny models trained here
(``python -m real_models.train``) and ``python -m real_models.validate``. See
``docs/real_models.md``.

Public API::

    bundle = real_models.load(target_dir, drafter_dir, device="cpu")
    ids = real_models.generate(bundle, prompt_ids, 64, method="ddtree", budget=64,
                               temperature=0.0, seed=0)
    result = real_models.decode(...)     # tokens + per-round statistics

torch and transformers are imported on first use of these names (the ``models`` extra).
"""

from __future__ import annotations

from typing import Any

__all__ = ["TINY_DRAFTER", "TINY_TARGET", "decode", "generate", "load"]

_LAZY = {"load": "bundle", "TINY_TARGET": "bundle", "TINY_DRAFTER": "bundle",
         "generate": "decode", "decode": "decode"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        mod = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(mod, name)
    raise AttributeError(f"module 'real_models' has no attribute {name!r}")
