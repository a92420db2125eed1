"""``python -m proofs_check``: every theorem passes, every buggy variant is caught."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from proofs_check.__main__ import main
from proofs_check.theorems import CHECKS, run_checks


def test_all_theorems_pass_and_all_bugs_caught():
    results = run_checks(size=1, seed=7)
    assert len(results) == len(CHECKS)
    bad = [r.theorem for r in results if r.kind != "claim" and not r.passed]
    assert not bad, bad
    caught = [r for r in results if r.kind == "caught"]
    assert len(caught) >= 11
    assert all(r.max_violation > 1e-3 for r in caught)


def test_json_output_is_only_the_table():
    out = subprocess.run([sys.executable, "-m", "proofs_check", "--json", "--size", "1",
                          "--only", "lossless[rrsw]"], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["theorem"] for r in rows] == ["lossless[rrsw]"]
    assert {"theorem", "instances", "max_violation", "passed"} <= set(rows[0])
    assert rows[0]["passed"] is True and rows[0]["instances"] > 0


def test_bad_arguments(capsys):
    assert main(["--size", "0"]) == 2
    assert capsys.readouterr().err == "python -m proofs_check: error: --size must be >= 1; got 0\n"
    assert main(["--only", "no-such-theorem"]) == 2
    assert "no check matches --only 'no-such-theorem'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="size"):
        run_checks(size=0)
