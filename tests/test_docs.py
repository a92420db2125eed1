"""The documentation's worked examples run as written."""

import json
import re
from pathlib import Path

import numpy as np

from treespec_sim.sweep import load_config

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _section_code(path: Path, heading: str) -> list[str]:
    text = path.read_text()
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    section = text[start: end if end > 0 else len(text)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_bring_your_own_drafter_and_target_runs_as_written(capsys):
    blocks = _section_code(DOCS / "usage.md", "Bring your own drafter and target")
    assert len(blocks) == 3
    namespace: dict = {}
    for code in blocks:
        exec(compile(code, "usage.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert "wide_root" in out and "ddtree" in out
    # the user's world really ran through the loop: exact and lossless facts are consistent
    rnd = namespace["rnd"]
    assert rnd.tree.size == 8 and set(rnd.tree.depth[1:]) == {1}
    assert abs(rnd.expected_tau - (1 + rnd.coverage)) < 1e-12
    assert abs(sum(rnd.exits.by_cause.values()) - 1) < 1e-12
    assert rnd.exits.by_cause["uncovered"] > 0  # the root's 8 children miss some first tokens
    assert np.isclose(rnd.exits.by_cause["uncovered"] + rnd.exits.by_cause["budget"], 1)


def test_result_page_configs_load_and_match_their_runs():
    """The committed per-family configs are valid and are the ones their pages were run with."""
    for name, family in (("stochastic", "stochastic"), ("verifiers", "verifiers")):
        plan = load_config(DOCS / "results" / f"{name}.toml")
        assert [g.family for g in plan.grids] == [family]
        recorded = json.loads((DOCS / "results" / name / "run.json").read_text())["plan"]
        assert recorded[family] == plan.to_dict()[family]
        assert recorded[family]["worlds"] >= 3
