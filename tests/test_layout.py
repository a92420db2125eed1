"""The house's layout rules that a reader relies on, checked.

Tests mirror the packages (``tests/sim`` for ``treespec_sim``'s core, ``tests/sweep`` for the
sweep, its families, report and command lines, ``tests/real_models``, ``tests/proofs``);
hypothesis budgets come only from the profiles in ``tests/conftest.py``; and the packages'
comments and docstrings point into ``docs/``, never to notes outside the repository.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("sim", "sweep", "real_models", "proofs")
PACKAGES = ("treespec_sim", "real_models", "proofs_check", "benchmarks")


def test_every_test_lies_in_the_folder_of_its_package():
    stray = [p.name for p in (ROOT / "tests").glob("test_*.py") if p.name != "test_layout.py"]
    assert not stray, f"move {stray} into tests/{{{','.join(FOLDERS)}}}/"
    other = {p.parent.name for p in (ROOT / "tests").glob("*/test_*.py")} - set(FOLDERS)
    assert not other, other
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert len(names) == len(set(names)), "test modules need unique names (no __init__.py)"


def test_no_test_sets_its_own_hypothesis_budget():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py")
                 if p.name != "conftest.py" and "max_examples" in p.read_text()
                 and p.name != "test_layout.py"]
    assert not offenders, f"use a profile of tests/conftest.py instead: {offenders}"


#: What a pointer outside the repository looks like (the shared notes, issue numbers).
OUTSIDE = re.compile(r"research note|THEORY(\.md)? ?§|\.\./shared|shared/research|"
                     r"\bissue \d+\b", re.IGNORECASE)


@pytest.mark.parametrize("package", PACKAGES)
def test_comments_point_into_docs_not_outside_the_repository(package):
    hits = []
    for path in sorted((ROOT / package).rglob("*")):
        if path.suffix not in (".py", ".c", ".h", ".sh") or not path.is_file():
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()[:80]}")
    assert not hits, "\n".join(hits)
