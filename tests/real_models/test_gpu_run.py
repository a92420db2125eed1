"""real_models/gpu_run.sh: its CPU rehearsal, its limits, and the docs that state them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "real_models" / "gpu_run.sh"
DOCS = ROOT / "docs" / "real_models.md"
#: What one device run may send back (the device tool's limit).
MAX_FILES = 8


def _run(*args, timeout=60, **env):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **env})


def _plan() -> tuple[dict[str, int], int, int]:
    res = _run("--plan")
    assert res.returncode == 0, res.stderr
    limits = {m[1]: int(m[2]) for m in re.finditer(r"^step (\S+)\s+limit\s+(\d+)s$",
                                                   res.stdout, re.M)}
    grace = re.search(r"^kill grace (\d+)s per step \((\d+)s for merge\)$", res.stdout, re.M)
    worst = re.search(r"^worst case (\d+)s \(budget (\d+)s\)$", res.stdout, re.M)
    assert grace and worst, res.stdout
    kill, merge_kill = int(grace[1]), int(grace[2])
    total = sum(limits.values()) + kill * (len(limits) - 1) + merge_kill
    assert int(worst[1]) == total
    return limits, total, int(worst[2])


def test_plan_fits_eight_minutes_and_matches_the_script_header_and_docs():
    limits, worst, budget = _plan()
    assert list(limits) == ["env", "validate", "bf16", "merge", "qwen3-8b", "qwen3-4b"]
    assert worst <= budget == 480
    header = SCRIPT.read_text()
    for name, limit in limits.items():
        assert re.search(rf"^#   {re.escape(name)}\s+{limit}s ", header, re.M), name
    assert re.search(rf"the limits \({sum(limits.values())} s\).*?=\s*#\s*{worst} s, under 8 "
                     r"minutes", header, re.S)
    docs = DOCS.read_text()
    section = docs[docs.index("## Running on a GPU"):docs.index("### 16-bit runs")]
    for name, limit in limits.items():
        assert re.search(rf"^\| {re.escape(name)} \| {limit} s \|", section, re.M), name
    assert f"{sum(limits.values())} s of limits" in section
    assert f"{worst} s ({worst // 60} min {worst % 60} s)" in section
    # the retired wrappers state their own worst case: a 15 s (+5 s) check, then gpu_run.sh
    for wrapper in ("gpu_validate.sh", "gpu_profile.sh"):
        text = (ROOT / "real_models" / wrapper).read_text()
        assert "timeout -k 5 15 " in text and f"Worst case {worst + 20} s" in text
        assert f"then gpu_run.sh ({worst} s)" in text


def test_bad_arguments_and_no_gpu(tmp_path):
    assert _run().returncode == 2
    assert _run("--quick").returncode == 2  # an option where OUTDIR belongs
    assert _run(str(tmp_path / "a"), str(tmp_path / "b")).returncode == 2
    assert _run("--plan", str(tmp_path)).returncode == 2
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the script would run for real")
    out = tmp_path / "out"
    res = _run(str(out), PYTHON=sys.executable, timeout=120)
    assert res.returncode == 3, res.stdout + res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["env.txt", "run.log"]
    assert "no CUDA GPU visible" in (out / "env.txt").read_text()


def test_transformers_range_includes_the_gpu_image():
    """The `models` extra admits the device image's transformers 5.17.0 and the one here."""
    packaging = pytest.importorskip("packaging.specifiers")
    transformers = pytest.importorskip("transformers")
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["models"]
    spec = next(s for s in extra if s.startswith("transformers"))
    allowed = packaging.SpecifierSet(spec.removeprefix("transformers"))
    assert "5.17.0" in allowed
    assert transformers.__version__ in allowed


def test_rehearsal_runs_every_step_on_cpu_with_cvxpy_blocked(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from treespec_sim.cost import TabulatedCost, get_cost_model

    _, worst, _ = _plan()
    out = tmp_path / "out"
    t0 = time.monotonic()
    res = _run("--rehearse", str(out), PYTHON=sys.executable, OMP_NUM_THREADS="1",
               timeout=worst + 30)
    wall = time.monotonic() - t0
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert wall < worst / 2  # well inside its own limits
    names = sorted(p.name for p in out.iterdir())
    assert len(names) <= MAX_FILES
    assert names == sorted(["env.txt", "run.log", "validate.md", "validate.json",
                            "cpu_qwen3_8b_small.json", "cpu_qwen3_8b_small.png",
                            "cpu_qwen3_4b_small.json", "cpu_qwen3_4b_small.png"])
    env = (out / "env.txt").read_text()
    assert re.search(r"^cvxpy: not importable \(ModuleNotFoundError: cvxpy is blocked", env, re.M)
    assert re.search(r"^clarabel: not importable", env, re.M)
    log = (out / "run.log").read_text()
    for step in ("env", "validate", "bf16", "merge", "qwen3-8b", "qwen3-4b"):
        assert re.search(rf"^=== {re.escape(step)}: ok after \d+s$", log, re.M), step
    # validation: float32 checks, the bfloat16 probe merged in, margins stated
    val = json.loads((out / "validate.json").read_text())
    assert val["complete"] is True and val["failures"] == [] and val["dtype"] == "torch.float32"
    assert val["tree_rows"]["margin"] > 1 and val["law"]["methods"]
    probe = val["bfloat16_probe"]
    assert probe["dtype"] == "torch.bfloat16" and probe["complete"] and probe["failures"] == []
    assert probe["checks"] == ["greedy", "tree-rows"] and "law" not in probe
    assert probe["greedy"]["tie_tolerance"] == 0.25 and probe["tree_rows"]["margin"] > 1
    md = (out / "validate.md").read_text()
    assert "# bfloat16 probe" in md and "margin" in md
    # latency files: loadable, fitted, complete, of the small shapes
    for arch, width in (("8b", 64), ("4b", 40)):
        path = out / f"cpu_qwen3_{arch}_small.json"
        data = json.loads(path.read_text())
        assert data["device"] == "cpu" and "fit" not in data and "partial" not in data
        assert data["target_arch"]["hidden_size"] == width
        assert data["target_arch"]["num_hidden_layers"] == 36
        assert data["dtype"] == "torch.bfloat16" and len(data["context_lengths"]) == 3
        model = get_cost_model(str(path))
        assert isinstance(model, TabulatedCost) and model.is_convex
        assert model.verify_cost(64, 128) >= model.verify_cost(1, 128) > 0
        assert (out / f"cpu_qwen3_{arch}_small.png").stat().st_size > 10_000


# ---------------------------------------------------------------- the interpreter it chooses
# Each case runs `--plan` of a copy of the script in a scratch repository whose .venv and whose
# python3 on PATH are wrappers of this interpreter: full (every package), bare (`-S`: no
# site-packages, so no torch) or with a stand-in torch (a package with only version.py, the
# file the script reads to tell a CPU-only build from a GPU one).

def _wrapper(path: Path, *flags: str, pythonpath: Path | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    env = f"PYTHONPATH={pythonpath} " if pythonpath else ""
    path.write_text(f'#!/bin/sh\n{env}exec {sys.executable} {" ".join(flags)} "$@"\n')
    path.chmod(0o755)
    return path


def _stand_in_torch(root: Path, cuda: str | None) -> Path:
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text("")
    (root / "torch" / "version.py").write_text(
        "from typing import Optional\n\n__all__ = ['__version__', 'cuda', 'hip']\n"
        f"__version__ = '9.9.9'\ncuda: Optional[str] = {cuda!r}\nhip: Optional[str] = None\n")
    return root


def _scratch_script(repo: Path) -> Path:
    script = repo / "real_models" / "gpu_run.sh"
    if not script.exists():
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(SCRIPT.read_text())
    return script


def _chosen(repo: Path, path_dir: Path, *args: str, **env) -> str:
    script = _scratch_script(repo)
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "PYTHONPATH")}
    res = subprocess.run(["bash", str(script), "--plan", *args], capture_output=True, text=True,
                         timeout=60, env={**clean, "PATH": f"{path_dir}:/usr/bin:/bin", **env})
    assert res.returncode == 0, res.stderr
    line = re.search(r"^python: (.*)$", res.stdout, re.M)
    assert line, res.stdout
    return line[1]


def test_rehearsal_uses_the_repository_venv_over_a_bare_python3(tmp_path):
    """The README's `gpu_run.sh --rehearse DIR` after `make test`: python3 lacks torch."""
    repo, bin_ = tmp_path / "repo", tmp_path / "bin"
    venv = _wrapper(repo / ".venv" / "bin" / "python")
    _wrapper(bin_ / "python3", "-S")
    assert _chosen(repo, bin_, "--rehearse") == f"{venv} (has the packages)"


def test_gpu_run_passes_over_a_cpu_only_venv_for_a_gpu_environment(tmp_path):
    """On a GPU machine whose own environment has CUDA torch, a CPU-only .venv does not win."""
    repo, bin_ = tmp_path / "repo", tmp_path / "bin"
    venv = _wrapper(repo / ".venv" / "bin" / "python",
                    pythonpath=_stand_in_torch(tmp_path / "cpu", None))
    _wrapper(bin_ / "python3", pythonpath=_stand_in_torch(tmp_path / "gpu", "12.4"))
    assert _chosen(repo, bin_) == (f"python3 (has the packages; passed over: {venv}: has a "
                                   f"CPU-only torch)")
    # the same CPU-only venv is what a rehearsal wants
    assert _chosen(repo, bin_, "--rehearse") == f"{venv} (has the packages)"


def test_gpu_run_prefers_a_venv_with_gpu_torch(tmp_path):
    repo, bin_ = tmp_path / "repo", tmp_path / "bin"
    gpu_torch = _stand_in_torch(tmp_path / "gpu", "13.0")
    venv = _wrapper(repo / ".venv" / "bin" / "python", pythonpath=gpu_torch)
    _wrapper(bin_ / "python3", pythonpath=gpu_torch)
    assert _chosen(repo, bin_) == f"{venv} (has the packages)"


def test_without_a_venv_python3_runs_and_an_unfit_one_is_named(tmp_path):
    repo, bin_ = tmp_path / "repo", tmp_path / "bin"
    _wrapper(bin_ / "python3")
    assert _chosen(repo, bin_, "--rehearse") == (f"python3 (has the packages; passed over: "
                                                 f"{repo}/.venv/bin/python: not found)")
    _wrapper(bin_ / "python3", "-S")
    chosen = _chosen(repo, bin_, "--rehearse")
    assert chosen.startswith("python3 (none qualifies: ")
    assert "python3: lacks torch, transformers" in chosen
    assert chosen.endswith("PYTHON=... chooses one)")


def test_an_explicit_python_wins_without_probing(tmp_path):
    repo, bin_ = tmp_path / "repo", tmp_path / "bin"
    _wrapper(repo / ".venv" / "bin" / "python")
    _wrapper(bin_ / "python3")
    assert _chosen(repo, bin_, PYTHON="/no/such/python") == "/no/such/python (PYTHON)"


def test_this_checkouts_rehearsal_finds_its_venv():
    """After `make test` the checkout's own .venv runs the rehearsal, whatever python3 is."""
    venv = ROOT / ".venv" / "bin" / "python"
    if not venv.exists() or Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        pytest.skip("the tests do not run from this checkout's .venv")
    pytest.importorskip("torch")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "PYTHONPATH")}
    res = subprocess.run(["bash", str(SCRIPT), "--plan", "--rehearse"], capture_output=True,
                         text=True, timeout=60, env={**clean, "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert re.search(rf"^python: {re.escape(str(venv))} \(has the packages", res.stdout, re.M)


def test_the_steps_run_the_chosen_interpreter(tmp_path):
    """Not only `--plan`: the env step runs the venv's interpreter, not the bare python3."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the script would run for real")
    repo, bin_ = tmp_path / "repo", tmp_path / "bin"
    venv = _wrapper(repo / ".venv" / "bin" / "python")
    _wrapper(bin_ / "python3", "-S")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "PYTHONPATH")}
    out = tmp_path / "out"
    res = subprocess.run(["bash", str(_scratch_script(repo)), str(out)],
                         capture_output=True, text=True, timeout=120,
                         env={**clean, "PATH": f"{bin_}:/usr/bin:/bin"})
    assert res.returncode == 3, res.stdout + res.stderr  # this CPU torch sees no GPU
    log = (out / "run.log").read_text()
    assert re.search(rf"^=== env \(limit \d+s\): {re.escape(str(venv))} - ", log, re.M), log
    env = (out / "env.txt").read_text()
    assert re.search(r"^torch: \d", env, re.M), env  # the venv's torch, found and imported
    assert f"no CUDA GPU visible to {venv}" in log


def test_the_real_model_page_names_only_files_that_exist_or_that_it_writes():
    """Every file a code block of docs/real_models.md names is in the repository, or is written
    by a command of the page (`--out`, `--out-dir`), or is an output of the GPU run (OUTDIR/).
    The page once loaded an H200 profile from real_models/profiles/ that no run had written."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", DOCS.read_text(), re.S)
    written = {m[1] for b in blocks for m in re.finditer(r"--out(?:-dir)?\s+(\S+)", b)}
    named = {m[1] for b in blocks for m in re.finditer(
        r"(?<![\w/.~$-])((?:[\w.-]+/)+[\w.-]+\.(?:json|py|sh|npz|md|png|toml))\b", b)}
    assert len(named) >= 5  # the pattern finds the page's files (not a vacuous pass)
    for name in sorted(named):
        if name.startswith("OUTDIR/"):
            continue
        made = any(name == w or name.startswith(w.rstrip("/") + "/") for w in written)
        tracked = not name.startswith("runs/") and (ROOT / name).exists()
        assert made or tracked, f"docs/real_models.md names {name}, which nothing provides"
