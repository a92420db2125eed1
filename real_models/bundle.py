"""Load a target and a drafter from local directories, checking they fit together.

Every check runs before any model weights are used, so bad input fails with a clear message
and never produces tokens: missing files, a target that is not a Qwen3 causal LM, a drafter
config outside the supported DFlash layout, and a drafter that does not fit the target
(vocabulary, hidden size, target layer ids, number of target layers, block size).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from treespec_sim.files import read_json

from ._deps import require
from .drafter import (
    WEIGHT_FILES,
    DFlashDrafter,
    DrafterSpec,
    check_full_attention,
    parse_drafter_config,
)
from .target import TargetBackend, load_target_model

torch = require("torch")

__all__ = ["DTYPES", "TINY_DRAFTER", "TINY_TARGET", "Bundle", "check_device", "check_pair",
           "load"]

_HERE = Path(__file__).resolve().parent
#: The shipped tiny checkpoints (trained by ``python -m real_models.train``).
TINY_TARGET = _HERE / "checkpoints" / "tiny-target"
TINY_DRAFTER = _HERE / "checkpoints" / "tiny-drafter"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

#: The ``dtype`` names :func:`load` accepts.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
          "float64": torch.float64}


@dataclass
class Bundle:
    """A loaded target/drafter pair (see :func:`load`).

    Attributes
    ----------
    target : real_models.target.TargetBackend
    drafter : DFlashDrafter or None
        None when loaded without a drafter (only ``method="ar"`` works then).
    spec : DrafterSpec or None
    block_size : int
        Block size in use (``<=`` the drafter's trained block size).
    tokenizer : transformers tokenizer or None
        From the target directory, when it has tokenizer files.
    device, dtype : torch device and dtype
    target_dir, drafter_dir : Path
    """

    target: object
    drafter: DFlashDrafter | None
    spec: DrafterSpec | None
    block_size: int
    tokenizer: object | None
    device: object
    dtype: object
    target_dir: Path
    drafter_dir: Path | None

    @property
    def depth(self) -> int:
        """``L = block_size - 1``: drafted depths per round."""
        return self.block_size - 1

    @property
    def vocab_size(self) -> int:
        return int(self.target.config.vocab_size)

    @property
    def max_positions(self) -> int:
        return int(self.target.config.max_position_embeddings)


def _read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"{what} directory {path.parent} is missing {path.name}")
    data = read_json(path, what)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    return data


def _hub_snapshot(path: Path, what: str) -> Path:
    """The snapshot a Hugging Face cache folder (``models--org--name``) checks out.

    ``hf download`` / ``snapshot_download`` without ``local_dir`` write
    ``models--org--name/{blobs, refs/main, snapshots/<commit>/...}``; the files under
    ``snapshots/<commit>`` are symlinks into ``blobs/`` and ``refs/main`` holds the commit.
    """
    ref = path / "refs" / "main"
    if ref.is_file():
        snap = path / "snapshots" / ref.read_text().strip()
        if not snap.is_dir():
            raise FileNotFoundError(f"{what} directory {path}: refs/main names snapshot "
                                    f"{snap.name!r}, which is not under snapshots/")
        return snap
    found = sorted(p for p in (path / "snapshots").iterdir() if p.is_dir())
    if len(found) != 1:
        raise FileNotFoundError(f"{what} directory {path} is a Hugging Face cache folder with "
                                f"no refs/main and {len(found)} snapshots "
                                f"({', '.join(p.name for p in found) or 'none'}); pass "
                                f"{path / 'snapshots'}/<commit> itself")
    return found[0]


def _check_dir(path: Path, what: str) -> Path:
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{what} directory {path} does not exist")
    if not (path / "config.json").exists() and (path / "snapshots").is_dir():
        path = _hub_snapshot(path, what)
    if not any((path / f).is_file() for f in WEIGHT_FILES):
        raise FileNotFoundError(f"{what} directory {path} has no weights: expected one of "
                                f"{', '.join(WEIGHT_FILES)}")
    return path


def _available_devices() -> str:
    out = ["'cpu'"]
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n:
        out.append("'cuda'" + (f", 'cuda:0'..'cuda:{n - 1}'" if n > 1 else ", 'cuda:0'"))
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append("'mps'")
    return ", ".join(out)


def check_device(device) -> torch.device:
    """``device`` as a ``torch.device``, checked against what this machine has.

    Raises
    ------
    ValueError
        ``device`` is not ``'cpu'``, ``'cuda'``, ``'cuda:N'`` or ``'mps'`` (naming the value and
        the devices available here), or names CUDA or MPS where it is not available, or a CUDA
        index past ``torch.cuda.device_count()``.
    """
    what = ("device must be 'cpu', 'cuda', 'cuda:N' (N < torch.cuda.device_count()) or 'mps'; "
            f"got {(str(device) if isinstance(device, torch.device) else device)!r}")
    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str):
        try:
            dev = torch.device(device)
        except RuntimeError:
            raise ValueError(f"{what} (available here: {_available_devices()})") from None
    else:
        raise ValueError(f"{what} (available here: {_available_devices()})")
    if dev.type == "cpu":
        return dev
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {str(dev)!r}: CUDA is not available on this machine "
                             f"(torch.cuda.is_available() is False, torch {torch.__version__}); "
                             f"available here: {_available_devices()}")
        n = torch.cuda.device_count()
        if dev.index is not None and dev.index >= n:
            raise ValueError(f"device {str(dev)!r}: this machine has {n} CUDA device(s); "
                             f"available here: {_available_devices()}")
        return dev
    if dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError(f"device 'mps': MPS is not available on this machine "
                             f"(torch.backends.mps.is_available() is False); available here: "
                             f"{_available_devices()}")
        return dev
    raise ValueError(f"{what} (available here: {_available_devices()})")


def check_target_config(cfg: dict, where: str) -> None:
    """The target must be a Qwen3 causal LM with full attention in every layer.

    Raises
    ------
    ValueError
        Naming ``where`` and the key: another model type or architecture, a missing or
        non-integer size, or sliding-window attention
        (:func:`~real_models.drafter.check_full_attention`, the same rule as the drafter's).
    """
    arch = cfg.get("architectures") or []
    if cfg.get("model_type") != "qwen3" or (arch and "Qwen3ForCausalLM" not in arch):
        raise ValueError(f"{where}: the target must be a Qwen3ForCausalLM (model_type 'qwen3'); "
                         f"got model_type {cfg.get('model_type')!r}, architectures {arch}")
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "max_position_embeddings"):
        if not isinstance(cfg.get(key), int):
            raise ValueError(f"{where}: missing or non-integer {key!r}")
    check_full_attention(cfg, where)


def check_pair(target_cfg: dict, drafter_cfg: dict, spec: DrafterSpec, *,
               block_size: int | None = None) -> int:
    """Check a drafter config against a target config; return the block size to use.

    Raises
    ------
    ValueError
        Vocabulary or hidden-size mismatch, ``target_layer_ids`` outside the target,
        ``num_target_layers`` different from the target's layer count, a ``block_size`` that
        disagrees between the top level and ``dflash_config``, or a requested block size
        outside ``2 .. spec.block_size``.
    """
    tv, dv = target_cfg["vocab_size"], drafter_cfg["vocab_size"]
    if tv != dv:
        raise ValueError(f"vocabulary mismatch: target vocab_size {tv}, drafter vocab_size {dv} "
                         f"(the drafter uses the target's embedding and LM head)")
    th, dh = target_cfg["hidden_size"], drafter_cfg["hidden_size"]
    if th != dh:
        raise ValueError(f"hidden size mismatch: target hidden_size {th}, drafter hidden_size "
                         f"{dh} (the drafter reads the target's embedding and hidden states)")
    n_layers = target_cfg["num_hidden_layers"]
    if max(spec.target_layer_ids) >= n_layers:
        raise ValueError(f"drafter target_layer_ids {list(spec.target_layer_ids)} reach past the "
                         f"target's {n_layers} layers")
    if spec.num_target_layers is not None and spec.num_target_layers != n_layers:
        raise ValueError(f"drafter was trained for a target with num_target_layers = "
                         f"{spec.num_target_layers}, but the target has {n_layers} layers")
    sub = drafter_cfg.get("dflash_config") or {}
    if ("block_size" in sub and "block_size" in drafter_cfg
            and sub["block_size"] != drafter_cfg["block_size"]):
        raise ValueError(f"block size mismatch in the drafter config: block_size "
                         f"{drafter_cfg['block_size']} but dflash_config.block_size "
                         f"{sub['block_size']}")
    if block_size is None:
        return spec.block_size
    if not isinstance(block_size, int) or isinstance(block_size, bool) or not (
            2 <= block_size <= spec.block_size):
        raise ValueError(f"block size mismatch: block_size must be an integer in 2.."
                         f"{spec.block_size} (the drafter's trained block size); got "
                         f"{block_size!r}")
    return block_size


def load(target_dir=TINY_TARGET, drafter_dir=TINY_DRAFTER, *, device="cpu", dtype=None,
         block_size: int | None = None) -> Bundle:
    """Load a Qwen3 target and a DFlash drafter from local directories.

    Parameters
    ----------
    target_dir : path
        A Hugging Face ``Qwen3ForCausalLM`` directory (``config.json``, safetensors weights,
        optionally tokenizer files). Defaults to the shipped tiny target. A Hugging Face cache
        folder (``models--org--name``, as ``hf download`` writes it) stands for the snapshot
        its ``refs/main`` names (or its only snapshot).
    drafter_dir : path or None
        A DFlash drafter directory (``config.json`` with ``block_size``,
        ``dflash_config.target_layer_ids`` and ``dflash_config.mask_token_id``; safetensors
        weights), or its Hugging Face cache folder. None loads the target alone
        (autoregressive decoding only).
    device : str or torch.device
        ``'cpu'`` (default), ``'cuda'``, ``'cuda:N'`` or ``'mps'``; checked first (see
        :func:`check_device`).
    dtype : str or torch.dtype, optional
        Default: the checkpoint's own dtype.
    block_size : int, optional
        Use a smaller block than the drafter was trained with.

    Returns
    -------
    Bundle

    Raises
    ------
    FileNotFoundError
        A missing directory, ``config.json`` or weights, or a cache folder whose snapshot
        cannot be told.
    ValueError
        A config outside what is supported (naming the file and key: see
        :func:`check_target_config`, :func:`~real_models.drafter.parse_drafter_config` and
        :func:`check_pair`), or a bad ``device`` / ``dtype`` / ``block_size``.
    """
    transformers = require("transformers")
    device = check_device(device)
    tdir = _check_dir(target_dir, "target")
    tcfg = _read_json(tdir / "config.json", "target")
    check_target_config(tcfg, str(tdir / "config.json"))
    spec = dcfg = ddir = None
    bs = 1
    if drafter_dir is not None:
        ddir = _check_dir(drafter_dir, "drafter")
        dcfg = _read_json(ddir / "config.json", "drafter")
        spec = parse_drafter_config(dcfg, str(ddir / "config.json"))
        bs = check_pair(tcfg, dcfg, spec, block_size=block_size)
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}; got {dtype!r}")
        dtype = DTYPES[dtype]

    model = load_target_model(tdir, device=device, dtype=dtype)
    dtype = next(model.parameters()).dtype
    drafter = None
    if ddir is not None:
        drafter = DFlashDrafter.from_pretrained(ddir, device=device, dtype=dtype)
    tokenizer = None
    if any((tdir / f).is_file() for f in TOKENIZER_FILES):
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(tdir), local_files_only=True)
    backend = TargetBackend(model, spec.target_layer_ids if spec else ())
    return Bundle(backend, drafter, spec, bs, tokenizer, device, dtype, tdir, ddir)
