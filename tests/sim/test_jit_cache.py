"""numba's on-disk cache follows the sources (treespec_sim/jit.py): a cached function that calls
a compiled function from another file runs that file's current code after it is edited."""

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import treespec_sim
from treespec_sim.jit import COMPILED_MODULES

PACKAGE = Path(treespec_sim.__file__).parent

CALLEE = """
from numba import njit

@njit(cache=True)
def value():
    return {}
"""
CALLER = """
from numba import njit
from .callee import value

@njit(cache=True)
def twice():
    return 2 * value()
"""
RUN = """
import sys
from pathlib import Path
sys.path.insert(0, {root!r})
removed = 0
if {drop}:
    from treespec_sim.jit import drop_stale_caches
    removed = drop_stale_caches(Path({root!r}) / "pkg", ("callee.py", "caller.py"))
from pkg.caller import twice
print(removed, twice())
"""


def _imports_numba(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(node, ast.ImportFrom) and node.module is not None
               and (node.module == "numba" or node.module.endswith("jit"))
               and any(alias.name == "njit" for alias in node.names)
               for node in ast.walk(tree))


def test_compiled_modules_lists_every_module_that_compiles():
    found = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                   if p.name != "jit.py" and _imports_numba(p))
    assert found == sorted(COMPILED_MODULES)


def test_every_compiled_module_takes_njit_from_the_guard():
    for name in COMPILED_MODULES:
        source = (PACKAGE / name).read_text()
        assert "from numba import njit" not in source, name


def _run(root: Path, drop: bool) -> tuple[int, int]:
    """``(cache files the guard removed, the caller's value)`` from a fresh process."""
    env = {**os.environ}
    env.pop("NUMBA_DISABLE_JIT", None)
    env.pop("NUMBA_CACHE_DIR", None)          # numba's default: next to the sources
    out = subprocess.run([sys.executable, "-c", RUN.format(root=str(root), drop=drop)],
                         env=env, capture_output=True, text=True, timeout=300, check=True)
    removed, value = out.stdout.split()[-2:]
    return int(removed), int(value)


def _edit_callee(pkg: Path, value: int) -> None:
    path = pkg / "callee.py"
    stat = path.stat()
    path.write_text(textwrap.dedent(CALLEE.format(value)))
    # a later time stamp, as an edit has (the file system's clock may be coarse)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))


def test_an_edit_of_a_callee_reaches_its_cached_caller(tmp_path):
    for name, drop in (("guarded", True), ("unguarded", False)):
        pkg = tmp_path / name / "pkg"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "caller.py").write_text(textwrap.dedent(CALLER))
        (pkg / "callee.py").write_text(textwrap.dedent(CALLEE.format(1)))
        assert _run(pkg.parent, drop) == (0, 2)              # compiled and cached
        _edit_callee(pkg, 5)
        if drop:
            removed, value = _run(pkg.parent, drop)
            assert removed > 0 and value == 10               # the guard dropped the cache
            assert _run(pkg.parent, drop) == (0, 10)         # and keeps the new one
        else:
            # numba alone serves the caller's stale cache: the reason for the guard
            assert _run(pkg.parent, drop) == (0, 2)
