"""Optional heavy dependencies of :mod:`real_models`, imported with an install hint."""

from __future__ import annotations

import importlib
from types import ModuleType

_HINT = ("real_models needs the 'models' extra (torch, transformers, safetensors): "
         "pip install -e '.[models]'")


def require(name: str) -> ModuleType:
    """Import ``name`` or raise ``ImportError`` with the install hint."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(f"{_HINT} (missing: {name})") from exc
