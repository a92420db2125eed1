"""The public face: every name of the documented contract imports, the package re-exports what a
user needs first, and no module is shadowed by a same-named function."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

#: What ``treespec_sim`` re-exports, and the module each name lives in.
FACADE = {"run_round": "engine", "run_rounds": "engine", "decode": "engine", "Round": "engine",
          "make_world": "synth.world", "METHODS": "methods", "register": "methods",
          "get_cost_model": "cost", "DraftTree": "tree"}


def test_facade_names_are_their_modules_objects():
    import treespec_sim

    for name, module in FACADE.items():
        assert name in treespec_sim.__all__
        owner = importlib.import_module(f"treespec_sim.{module}")
        assert getattr(treespec_sim, name) is getattr(owner, name), name


def test_facade_imports_no_heavy_dependency():
    code = ("import sys, treespec_sim; heavy = [m for m in ('torch', 'cvxpy', 'matplotlib', "
            "'dask', 'real_models', 'proofs_check') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_documented_contract_imports():
    """Every name of the public contract (the design notes' "Public contract")."""
    from proofs_check.ot import optimal_acceptance
    from treespec_sim import DraftTree
    from treespec_sim.engine import run_round
    from treespec_sim.exits import coverage, exit_law, reach_probabilities
    from treespec_sim.policies import caddtree, ddtree
    from treespec_sim.verify import RULES, Outcome, expected_length, verify

    for fn in (optimal_acceptance, run_round, coverage, exit_law, reach_probabilities,
               caddtree, ddtree, expected_length, verify, DraftTree.from_parents,
               DraftTree.from_parents_multiset):
        assert inspect.isfunction(fn) or inspect.ismethod(fn), fn
    assert {"follow", "tev", "rrs", "rrsw", "traversal", "univer"} <= set(RULES)
    assert {"path", "bonus"} <= {f for f in Outcome.__dataclass_fields__}
    tree = DraftTree.from_parents(np.array([-1, 0, 0]), np.array([-1, 3, 4]))
    for attr in ("parent", "token", "depth", "size"):
        getattr(tree, attr)
    assert tree.paths() == [(3,), (4,)]
    for param in ("rule", "rng", "proposal"):
        assert param in inspect.signature(verify).parameters
    for param in ("draft_cost", "verify_cost", "max_budget", "root_token"):
        assert param in inspect.signature(caddtree).parameters
    import real_models

    assert {"load", "generate", "decode"} <= set(real_models.__all__)
    for cli in ("treespec_sim.sweep", "proofs_check", "real_models.validate"):
        assert importlib.util.find_spec(cli) is not None, cli


def test_real_models_names_resolve():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import real_models

    for name in real_models.__all__:
        assert getattr(real_models, name) is not None, name
    assert inspect.isfunction(real_models.decode) and inspect.isfunction(real_models.generate)


def _packages() -> list[Path]:
    return sorted(init.parent for pkg in ("treespec_sim", "real_models")
                  for init in (ROOT / pkg).rglob("__init__.py"))


@pytest.mark.parametrize("pkg_dir", _packages(), ids=lambda p: ".".join(p.relative_to(ROOT).parts))
def test_no_module_is_shadowed_by_a_function(pkg_dir):
    """No function of a package has the name of a submodule file of that package (importing
    the submodule would rebind the name, or the function hides the module)."""
    name = ".".join(pkg_dir.relative_to(ROOT).parts)
    if name.startswith("real_models"):
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    pkg = importlib.import_module(name)
    subs = {p.stem for p in pkg_dir.glob("*.py") if p.stem != "__init__"}
    subs |= {p.name for p in pkg_dir.iterdir() if (p / "__init__.py").is_file()}
    names = set(vars(pkg)) | set(getattr(pkg, "__all__", ()))
    shadowed = []
    for attr in sorted(names & subs):
        obj = getattr(pkg, attr)
        if not isinstance(obj, types.ModuleType):
            shadowed.append(f"{name}.{attr} is a {type(obj).__name__}, and {attr}.py a module")
    assert not shadowed, shadowed


def test_readme_first_example_runs():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## A first look\s+```python\n(.*?)```", text, re.S).group(1)
    assert "from treespec_sim import" in block
    exec(compile(block, "README.md", "exec"), {"print": lambda *a, **k: None})


def test_cpu_description_reads_the_first_processors_family_and_model(monkeypatch):
    from treespec_sim import machine, provenance

    text = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
            "model name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 26\nmodel\t\t: 2\n")
    monkeypatch.setattr(provenance, "_cpuinfo", lambda: provenance._first_processor(text))
    assert machine.cpu_name() == "AMD EPYC"
    assert machine.cpu_description() == "AMD EPYC (family 25, model 17)"
    monkeypatch.setattr(provenance, "_cpuinfo", dict)       # no /proc/cpuinfo: platform's name
    assert machine.cpu_description() == machine.cpu_name() != ""


@pytest.mark.parametrize(("name", "home"), [("MATCHING_RULES", "treespec_sim/verify/__init__.py"),
                                            ("check_temperature", "treespec_sim/validation.py")])
def test_a_shared_name_is_exported_from_one_module(name, home):
    import ast

    exporters = []
    for path in sorted((ROOT / "treespec_sim").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if (isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__"
                                                     for t in node.targets)
                    and name in ast.literal_eval(node.value)):
                exporters.append(str(path.relative_to(ROOT)))
    assert exporters == [home]
