"""``docs/check_your_verifier.md`` runs as written: the biased sibling-order rule is found lossy
with the TV the page prints, sample-and-match passes, Hugging Face's ``_speculative_sampling``
passes without an ensemble weight and with one its first-token TV intervals hold the exact
``(1 - w) TV(q, p)``, and a registered rule becomes a method's rule. The CLI's three exit
codes on a user's ``.py`` file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "check_your_verifier.md"


def _section(heading: str) -> tuple[list[str], list[str]]:
    """The python blocks of a section, and its other fenced blocks (printed output)."""
    text = PAGE.read_text()
    start = text.index(f"## {heading}")
    end = text.find("\n## ", start + 1)
    section = text[start: end if end > 0 else len(text)]
    code: list[str] = []
    other: list[str] = []
    block: list[str] | None = None
    for line in section.splitlines(keepends=True):
        if line.startswith("```"):
            if block is None:                   # an opening fence: its language decides the list
                block, lang = [], line[3:].strip()
            else:
                (code if lang == "python" else other).append("".join(block))
                block = None
        elif block is not None:
            block.append(line)
    return code, other


def _first_lines(text: str) -> str:
    return re.sub(r", [\d.]+ s$", "", text.splitlines()[0])


def test_worked_example_finds_the_sibling_order_rule_lossy(capsys):
    code, printed = _section("Worked example: the sibling-order ratio rule is lossy")
    ns: dict = {}
    exec(compile(code[0], "check_your_verifier.md", "exec"), ns)
    report = ns["report"]
    assert not report.lossless
    out = capsys.readouterr().out
    # the page shows what the code prints (timings aside)
    strip = lambda s: re.sub(r"[\d.]+ s\b", "", s)  # noqa: E731
    assert strip(out.strip()) == strip(printed[0].strip())
    assert min(c.tv_low for c in report.cases) > 0.2


def test_a_correct_rule_passes(capsys):
    code, printed = _section("A correct rule passes")
    ns: dict = {}
    exec(compile(code[0], "check_your_verifier.md", "exec"), ns)
    assert ns["report"].lossless
    out = capsys.readouterr().out.strip().splitlines()
    assert _first_lines(out[0]) == _first_lines(printed[0])
    assert out[1] == printed[0].strip().splitlines()[1]


def test_hugging_face_speculative_sampling_through_the_adapter(capsys):
    pytest.importorskip("transformers")
    code, printed = _section("A chain verifier that takes logits")
    ns: dict = {"np": np}
    exec(compile(code[0], "check_your_verifier.md", "exec"), ns)
    assert ns["plain"].lossless and not ns["ensemble"].lossless
    w = 0.5
    for c in ns["ensemble"].cases:
        exact = (1 - w) * 0.5 * float(np.abs(c.proposal_root - c.target_root).sum())
        assert c.tv_low <= exact <= c.tv_high, (c.index, c.tv_low, exact, c.tv_high)
    assert capsys.readouterr().out.strip() == printed[0].strip()


def test_the_shipped_adapter_is_the_pages_and_its_exact_law_is_the_catalogues():
    """``proofs_check.adapters.hf_speculative_sampling`` draws the law of the catalogue's
    ``hf_ensemble_weight_0.5`` (exact first-token TV (1 - w) TV(q, p)), and the same report
    as the page's adapter."""
    pytest.importorskip("transformers")
    from proofs_check import check_verifier
    from proofs_check.adapters import hf_speculative_sampling
    from proofs_check.buggy import BUGGY_VARIANTS

    exact = check_verifier(law=BUGGY_VARIANTS["hf_ensemble_weight_0.5"].law, scheme="chain")
    for c in exact.cases:
        tv_qp = 0.5 * float(np.abs(c.proposal_root - c.target_root).sum())
        assert abs(c.tv - 0.5 * tv_qp) < 1e-12
    rep = check_verifier(hf_speculative_sampling(0.5), scheme="chain", rounds=400, cases=2)
    assert [round(c.tv, 12) for c in rep.cases] == [round(c.tv, 12) for c in
                                                    check_verifier(hf_speculative_sampling(0.5),
                                                                   scheme="chain", rounds=400,
                                                                   cases=2).cases]


def test_registering_a_rule_as_the_page_shows():
    from treespec_sim.methods import METHODS
    from treespec_sim.verify import RULES, register_rule

    code, _ = _section("Register your rule so the sweep runs it")
    ns: dict = {}
    try:
        exec(compile(code[0], "check_your_verifier.md", "exec"), ns)
        assert all(r.lossless for r in ns["reports"].values())
        assert "my-rrsw" in METHODS["sampled-ddtree"].rules
        from treespec_sim.families.verifiers import arms_for, parse_tree
        assert "my-rrsw" in [a.rule for a in arms_for(parse_tree("ddtree8"))]
    finally:
        RULES.pop("my-rrsw", None)
        register_rule(RULES["rrsw"], replace=True)  # re-derive the maps and the methods
    assert "my-rrsw" not in METHODS["sampled-ddtree"].rules


# ------------------------------------------------------------------------------------ the CLI
USER_FILE = '''
import numpy as np


def follow(tree, target_rows, proposal, rng):
    """Predraw-and-follow, written by a user: lossless."""
    out, v = [], 0
    while True:
        y = int(rng.choice(target_rows.shape[1], p=target_rows[v]))
        kids = tree.children(v)
        hit = kids[tree.token[kids] == y]
        if hit.size == 0:
            return out + [y]
        out.append(y)
        v = int(hit[0])


def greedy_first_child(tree, target_rows, proposal, rng):
    """Always accepts the first child: lossy."""
    kids = tree.children(0)
    return [int(tree.token[kids[0]]), int(rng.choice(target_rows.shape[1], p=target_rows[1]))]


def wrong_signature(tree, target_rows):
    return [0]


not_a_function = 3
'''


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "my_verifier.py").write_text(USER_FILE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "proofs_check", "verifier", *args],
                          capture_output=True, text=True, cwd=tmp_path, env=env, check=False)


def test_cli_exit_0_when_no_loss_is_found(tmp_path):
    out = _cli(tmp_path, "my_verifier.py:follow", "--scheme", "deterministic", "--rounds", "800")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("no evidence of loss")


def test_cli_exit_1_when_a_loss_is_found_printing_the_worst_case(tmp_path):
    out = _cli(tmp_path, "my_verifier.py:greedy_first_child", "--scheme", "deterministic",
               "--rounds", "300", "--seed", "2")
    assert out.returncode == 1, out.stderr
    assert out.stdout.startswith("LOSS FOUND")
    assert "worst case" in out.stdout and "target root row" in out.stdout


def test_cli_json_and_exact_mode(tmp_path):
    import json

    out = _cli(tmp_path, "my_verifier.py:follow", "--scheme", "iid", "--rounds", "200",
               "--cases", "2", "--json")
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["lossless"] and len(rep["cases"]) == 2 and rep["worst"]["most_off_prefixes"]
    out = _cli(tmp_path, "--rule", "block", "--scheme", "chain", "--exact")
    assert out.returncode == 0 and "exact check" in out.stdout


@pytest.mark.parametrize("args, message", [
    (("my_verifier.py:nope", "--scheme", "iid"), "has no 'nope'"),
    (("my_verifier.py:not_a_function", "--scheme", "iid"), "is not callable"),
    (("missing.py:follow", "--scheme", "iid"), "no such file"),
    (("no_such_module_xyz:follow", "--scheme", "iid"), "no module named"),
    (("my_verifier.py", "--scheme", "iid"), "expected MODULE:FUNCTION"),
    (("my_verifier.py:follow", "--scheme", "greedy"), "invalid choice"),
    (("my_verifier.py:follow", "--scheme", "iid", "--rounds", "0"), "positive integer"),
    (("my_verifier.py:wrong_signature", "--scheme", "iid", "--rounds", "5"),
     "raised TypeError"),
])
def test_cli_exit_2_on_bad_input(tmp_path, args, message):
    out = _cli(tmp_path, *args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1
