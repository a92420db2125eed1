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

``real_models.decode`` is the function; the module of the same name is reached with
``from real_models.decode import ...`` (or ``importlib.import_module("real_models.decode")``).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = ["TINY_DRAFTER", "TINY_TARGET", "ModelBackend", "decode", "generate", "load"]

_LAZY = {"load": "bundle", "TINY_TARGET": "bundle", "TINY_DRAFTER": "bundle",
         "generate": "decode", "decode": "decode", "ModelBackend": "backend"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value  # later look-ups find it without coming here
        return value
    raise AttributeError(f"module 'real_models' has no attribute {name!r}")


class _Package(types.ModuleType):
    """The package module, keeping its lazy public names over same-named submodules.

    Importing a submodule binds it to the parent's attribute of the same name
    (``real_models.decode = <module real_models.decode>``), which would shadow the public
    function ``real_models.decode`` after the first ``from real_models.decode import ...``.
    Such a binding is dropped here: the public name stays the function, and the submodule
    stays importable through ``sys.modules``.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if (name in _LAZY and isinstance(value, types.ModuleType)
                and value.__name__ == f"{__name__}.{name}"):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
