"""Real models: a Qwen3 target and a DFlash-architecture drafter driving ``treespec_sim``.

The torch backend of treespec: tree-attention verification on a Hugging Face
``Qwen3ForCausalLM``, a DFlash block drafter, :class:`~real_models.backend.ModelBackend` (a
loaded bundle as a :class:`treespec_sim.engine.Backend`, so every round runs through
:func:`treespec_sim.engine.run_round`), tiny models trained here
(``python -m real_models.train``) and ``python -m real_models.validate``. See
``docs/real_models.md``.

Public API::

    bundle = real_models.load(target_dir, drafter_dir, device="cpu")
    ids = real_models.generate(bundle, prompt_ids, 64, method="ddtree", budget=64,
                               temperature=0.0, seed=0)
    result = real_models.decode(...)     # tokens + per-round statistics
    backend = real_models.ModelBackend(bundle)   # for treespec_sim.engine.run_round

torch and transformers are imported on first use of these names (the ``models`` extra).

The decoding loop lives in the private module ``real_models._decode`` (no module shares a name
with a function here, so ``real_models.decode`` is always the function); import its names from
this package: ``from real_models import decode, run_from``. The names are loaded on first
look-up through a module ``__getattr__`` (PEP 562), so ``import real_models`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["TINY_DRAFTER", "TINY_TARGET", "DecodeResult", "ModelBackend", "RoundStats",
           "check_request", "decode", "generate", "latency_profile", "load", "run_from"]

#: public name -> the module (in this package) that defines it
_LAZY = {"load": "bundle", "TINY_TARGET": "bundle", "TINY_DRAFTER": "bundle",
         "ModelBackend": "backend",
         **{name: "_decode" for name in ("generate", "decode", "run_from", "check_request",
                                         "latency_profile", "DecodeResult", "RoundStats")}}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value  # later look-ups find it without coming here
        return value
    raise AttributeError(f"module 'real_models' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
