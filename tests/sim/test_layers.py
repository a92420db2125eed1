"""The layer map as a contract: treespec_sim's imports flow down the layers of
``docs/architecture.md`` ("Layers"), and nowhere else without a named reason.

The import graph is read with :mod:`ast` from the source (every ``import`` statement, also
those inside functions), so the contract holds without importing anything. A module may import
modules of its own layer and of the layers below it; an import of a layer above is an upward
import and fails here unless :data:`EXCEPTIONS` names it with its reason. :data:`FORBIDDEN`
adds the imports that the layers alone would allow but the design does not.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "treespec_sim"

#: The layers, top first: names relative to ``treespec_sim`` (a package covers its modules);
#: ``__init__`` is the package's façade. ``docs/architecture.md`` states the same list.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__",),
    ("sweep",),
    ("sweep_store",),
    ("sweep_plan", "sweep_lock"),
    ("report",),
    ("families",),
    ("plot",),
    ("calibrate", "calibration_data", "acceptance", "export", "prediction", "regime_laws",
     "warmup"),
    ("synth", "trace"),
    ("engine",),
    ("methods",),
    ("policies",),
    ("verify",),
    ("tree", "rows", "marginals", "paths", "exits", "cost", "surrogate", "proposal",
     "acceptance_readers", "torch_save"),
    ("validation", "files", "stats", "verdicts", "numerics", "rowmass", "jit", "_sampling", "cli",
     "machine", "provenance", "seeds"),
)

#: Upward imports allowed, ``(importer, imported) -> reason``. Empty: there are none.
EXCEPTIONS: dict[tuple[str, str], str] = {}

#: Imports the layers would allow that the design forbids, ``(importer, imported) -> reason``
#: (a name covers its modules).
FORBIDDEN: dict[tuple[str, str], str] = {
    ("report", "calibrate"): "the report reads the published data (calibration_data), "
                             "never the fitter",
    ("acceptance_readers", "engine"): "a file reader does not run rounds",
    ("acceptance_readers", "synth"): "a file reader does not build worlds",
    ("verify", "policies"): "the verifiers take a tree and rows, never a builder",
}

#: Packages treespec_sim never imports (they import it).
OUTSIDE = ("real_models", "proofs_check")


def module_name(path: Path, root: Path) -> str:
    """``treespec_sim.a.b`` of ``root/treespec_sim/a/b.py`` (a package's ``__init__.py``:
    the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def import_graph(root: Path, package: str = PACKAGE) -> dict[str, set[str]]:
    """Every module of ``root/package`` -> the dotted names it imports (absolute; ``from a
    import b`` with ``b`` a module records ``a.b`` alone)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((root / package).rglob("*.py")):
        mod = module_name(path, root)
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                subs = [f"{target}.{a.name}" for a in node.names
                        if _is_module(root, f"{target}.{a.name}")]
                if len(subs) < len(node.names):
                    out.add(target)
                out.update(subs)
        graph[mod] = out
    return graph


def _is_module(root: Path, dotted: str) -> bool:
    rel = Path(*dotted.split("."))
    return (root / rel).with_suffix(".py").exists() or (root / rel / "__init__.py").exists()


def layer_of(mod: str, layers=LAYERS, package: str = PACKAGE) -> int | None:
    """The index (0 = top) of the layer ``mod`` belongs to, ``None`` if none."""
    if mod == package:
        name = "__init__"
    elif mod.startswith(package + "."):
        name = mod[len(package) + 1:]
    else:
        return None
    for i, layer in enumerate(layers):
        for entry in layer:
            if name == entry or name.startswith(entry + "."):
                return i
    return None


def _covers(entry: str, mod: str) -> bool:
    name = mod[len(PACKAGE) + 1:] if mod.startswith(PACKAGE + ".") else mod
    return name == entry or name.startswith(entry + ".")


def violations(graph: dict[str, set[str]], layers=LAYERS, exceptions=EXCEPTIONS,
               forbidden=FORBIDDEN) -> list[str]:
    """One line per import that breaks the contract."""
    bad = []
    for mod, targets in sorted(graph.items()):
        here = layer_of(mod, layers)
        for t in sorted(targets):
            if t.split(".")[0] in OUTSIDE:
                bad.append(f"{mod} imports {t}: treespec_sim never imports {t.split('.')[0]}")
                continue
            there = layer_of(t, layers)
            if here is None or there is None:
                continue
            short = (mod.removeprefix(PACKAGE + "."), t.removeprefix(PACKAGE + "."))
            if there < here and not any(_covers(a, mod) and _covers(b, t)
                                        for a, b in exceptions):
                bad.append(f"{mod} (layer {here}) imports {t} (layer {there}): upward")
            for (a, b), why in forbidden.items():
                if _covers(a, mod) and _covers(b, t):
                    bad.append(f"{short[0]} imports {short[1]}: forbidden ({why})")
    return bad


def test_every_module_has_a_layer():
    graph = import_graph(ROOT)
    assert [m for m in graph if layer_of(m) is None] == []


def test_imports_flow_down_the_layers():
    assert violations(import_graph(ROOT)) == []


@pytest.mark.parametrize(("module", "line"), [
    ("tree.py", "from .engine import run_round\n"),           # values -> round loop
    ("verify/__init__.py", "from ..methods import METHODS\n"),  # verifiers -> registry
    ("engine.py", "import treespec_sim.families\n"),          # round loop -> sweep families
    ("report.py", "from .calibrate import fit\n"),            # forbidden, though downward
    ("stats.py", "from real_models import decode\n"),         # outside the package
])
def test_a_planted_upward_import_fails(tmp_path, module, line):
    shutil.copytree(ROOT / PACKAGE, tmp_path / PACKAGE,
                    ignore=shutil.ignore_patterns("__pycache__", "data"))
    assert violations(import_graph(tmp_path)) == []
    target = tmp_path / PACKAGE / module
    target.write_text(target.read_text() + line)
    found = violations(import_graph(tmp_path))
    assert len(found) == 1, found


#: Inside ``families``, the presenting modules: each family's ``<name>_report`` and the shared
#: ``render``. Every other module there computes (grids, runners, row schemas, ``base``) or is
#: the registry (``__init__``, which puts each family's two modules together).
PRESENTING = re.compile(rf"^{PACKAGE}\.families\.(\w+_report|render)$")


def presenting_imports(graph: dict[str, set[str]]) -> list[str]:
    """One line per import of a family's presenting module (or of matplotlib) by a computing
    module of ``families``: a family computes apart from presenting."""
    bad = []
    for mod, targets in sorted(graph.items()):
        if (not mod.startswith(f"{PACKAGE}.families.") or PRESENTING.match(mod)):
            continue
        for t in sorted(targets):
            if PRESENTING.match(t) or t.split(".")[0] == "matplotlib":
                bad.append(f"{mod} imports {t}: computing imports presenting")
    return bad


def test_families_compute_apart_from_presenting():
    graph = import_graph(ROOT)
    reports = [m for m in graph if PRESENTING.match(m) and m.endswith("_report")]
    assert len(reports) >= 5  # one presenting module per family
    assert presenting_imports(graph) == []


@pytest.mark.parametrize("line", ["from .ddtree_report import tables\n",
                                  "from .render import pct\n", "import matplotlib\n"])
def test_a_planted_presenting_import_in_computing_fails(tmp_path, line):
    shutil.copytree(ROOT / PACKAGE, tmp_path / PACKAGE,
                    ignore=shutil.ignore_patterns("__pycache__", "data"))
    target = tmp_path / PACKAGE / "families" / "caddtree.py"
    target.write_text(target.read_text() + line)
    assert len(presenting_imports(import_graph(tmp_path))) == 1


def test_the_architecture_page_states_the_same_layers():
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"## Layers\n.*?```text\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no '## Layers' section with a ```text block"
    stated = tuple(tuple(line.split("#")[0].split()) for line in block.group(1).splitlines()
                   if line.split("#")[0].strip())
    assert stated == LAYERS
    for (a, b), _ in {**EXCEPTIONS, **FORBIDDEN}.items():
        assert f"`{a}` → `{b}`" in text, (a, b)
