"""real_models.load on a model pair as it arrives from the Hub, and configs it must refuse.

A downloaded pair lives in the Hugging Face cache layout: ``models--org--name/blobs/<sha256>``
(the file contents), ``refs/main`` (the commit) and ``snapshots/<commit>/<file>``, each file a
relative symlink into ``blobs/``. The tiny checkpoints are copied into that layout here, found
again with huggingface_hub's own offline look-up, loaded, and decoded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
hub = pytest.importorskip("huggingface_hub")

import real_models  # noqa: E402
from real_models import bundle as bundle_mod  # noqa: E402
from real_models.drafter import qwen3_config  # noqa: E402
from real_models.validate import load_prompts  # noqa: E402

torch.set_num_threads(1)

COMMIT = "0123456789abcdef0123456789abcdef01234567"
#: Files of a checkpoint directory that a download brings (the training records stay behind).
SKIP = {"training.json"}


def _as_hub_cache(src: Path, cache: Path, repo_id: str, commit: str = COMMIT) -> Path:
    """Lay ``src`` out as ``hf download repo_id --cache-dir cache`` would; return its folder."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for f in sorted(src.iterdir()):
        if f.name in SKIP or not f.is_file():
            continue
        blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, blob)
        # relative, as huggingface_hub writes them: snapshots/<commit>/x -> ../../blobs/<sha>
        (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return repo


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    _as_hub_cache(bundle_mod.TINY_TARGET, root, "treespec/tiny-target")
    _as_hub_cache(bundle_mod.TINY_DRAFTER, root, "treespec/tiny-drafter")
    return root


@pytest.fixture(scope="module")
def shipped():
    return bundle_mod.load()


def _continuation(bundle, n: int = 12) -> list[int]:
    prompt = [int(t) for t in load_prompts(bundle, 1, 64)[0]]
    return real_models.generate(bundle, prompt, n, method="ddtree", budget=16,
                                temperature=0.0, seed=0)


def test_the_layout_is_what_huggingface_hub_reads(cache):
    """The stand-in is a real cache: huggingface_hub resolves it offline, files are symlinks."""
    snap = Path(hub.snapshot_download("treespec/tiny-target", cache_dir=cache,
                                      local_files_only=True))
    assert snap == cache / "models--treespec--tiny-target" / "snapshots" / COMMIT
    assert (snap / "config.json").is_symlink() and (snap / "model.safetensors").is_symlink()
    assert (snap / "model.safetensors").resolve().parent.name == "blobs"
    info = hub.scan_cache_dir(cache)
    assert {r.repo_id for r in info.repos} == {"treespec/tiny-target", "treespec/tiny-drafter"}
    assert not info.warnings


def test_a_downloaded_pair_loads_and_decodes_like_the_shipped_one(cache, shipped):
    target = hub.snapshot_download("treespec/tiny-target", cache_dir=cache, local_files_only=True)
    drafter = hub.snapshot_download("treespec/tiny-drafter", cache_dir=cache,
                                    local_files_only=True)
    b = real_models.load(target, drafter, device="cpu")
    assert b.target_dir == Path(target) and b.drafter_dir == Path(drafter)
    assert b.tokenizer is not None and b.block_size == shipped.block_size
    out = _continuation(b)
    assert len(out) == 12 and out == _continuation(shipped)


def test_the_cache_folder_stands_for_the_snapshot_refs_main_names(cache, shipped, tmp_path):
    b = real_models.load(cache / "models--treespec--tiny-target",
                         cache / "models--treespec--tiny-drafter")
    assert b.target_dir == cache / "models--treespec--tiny-target" / "snapshots" / COMMIT
    assert b.drafter_dir.name == COMMIT
    assert _continuation(b, 6) == _continuation(shipped, 6)
    # two snapshots: refs/main decides; without it the choice is refused, naming both
    repo = _as_hub_cache(bundle_mod.TINY_DRAFTER, tmp_path, "treespec/tiny-drafter")
    _as_hub_cache(bundle_mod.TINY_DRAFTER, tmp_path, "treespec/tiny-drafter", "f" * 40)
    (repo / "refs" / "main").write_text("f" * 40)
    assert real_models.load(drafter_dir=repo).drafter_dir.name == "f" * 40
    (repo / "refs" / "main").unlink()
    with pytest.raises(FileNotFoundError, match=rf"no refs/main and 2 snapshots \({COMMIT}, "
                                                r"f{40}\); pass .*snapshots/<commit> itself"):
        real_models.load(drafter_dir=repo)
    (repo / "refs" / "main").write_text("e" * 40)
    with pytest.raises(FileNotFoundError, match=r"refs/main names snapshot 'e{40}', which is "
                                                r"not under snapshots/"):
        real_models.load(drafter_dir=repo)


# ---------------------------------------------------------------- sliding-window attention
def _copy_with(src: Path, dst: Path, drop=(), **changes) -> Path:
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    for key in drop:
        cfg.pop(key, None)
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_a_sliding_window_drafter_config_is_refused(tmp_path):
    """``use_sliding_window`` and no ``layer_types``: transformers makes sliding layers of it."""
    d = _copy_with(bundle_mod.TINY_DRAFTER, tmp_path / "d", drop=["layer_types"],
                   use_sliding_window=True, sliding_window=16, max_window_layers=0)
    cfg = json.loads((d / "config.json").read_text())
    # the installed transformers would indeed build sliding-window draft layers from it
    assert "sliding_attention" in qwen3_config(cfg).layer_types
    with pytest.raises(ValueError, match=rf"^{d / 'config.json'}: use_sliding_window = True: "
                                         r"sliding-window attention is not supported"):
        real_models.load(bundle_mod.TINY_TARGET, d)


def test_a_sliding_window_target_config_is_refused(tmp_path):
    t = _copy_with(bundle_mod.TINY_TARGET, tmp_path / "t", drop=["layer_types"],
                   use_sliding_window=True, sliding_window=16, max_window_layers=2)
    with pytest.raises(ValueError, match=rf"^{t / 'config.json'}: use_sliding_window = True"):
        real_models.load(t, bundle_mod.TINY_DRAFTER)
    kinds = ["full_attention"] * 5 + ["sliding_attention"]
    t2 = _copy_with(bundle_mod.TINY_TARGET, tmp_path / "t2", layer_types=kinds,
                    sliding_window=16)
    with pytest.raises(ValueError, match=rf"^{t2 / 'config.json'}: layer_types\[5\] = "
                                         r"'sliding_attention': only 'full_attention' layers"):
        real_models.load(t2, bundle_mod.TINY_DRAFTER)


def test_the_rule_is_the_same_for_both_models(tmp_path):
    """One check: the same key gets the same words in the target's and the drafter's file."""
    kinds = ["sliding_attention", "full_attention"]
    d = _copy_with(bundle_mod.TINY_DRAFTER, tmp_path / "d", layer_types=kinds)
    t = _copy_with(bundle_mod.TINY_TARGET, tmp_path / "t", layer_types=kinds * 3)
    messages = []
    for pair in ((bundle_mod.TINY_TARGET, d), (t, bundle_mod.TINY_DRAFTER)):
        with pytest.raises(ValueError) as err:
            real_models.load(*pair)
        messages.append(str(err.value).split(": ", 1)[1])
    assert messages[0] == messages[1] == ("layer_types[0] = 'sliding_attention': only "
                                          "'full_attention' layers are supported (no sliding "
                                          "window)")


def test_full_attention_configs_still_load(tmp_path):
    """``use_sliding_window: false`` and an all-full ``layer_types`` (as Qwen3 ships) pass."""
    d = _copy_with(bundle_mod.TINY_DRAFTER, tmp_path / "d", use_sliding_window=False,
                   sliding_window=None, max_window_layers=28)
    assert real_models.load(bundle_mod.TINY_TARGET, d).drafter is not None
