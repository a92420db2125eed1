"""docs/usage.md's sweep example runs as written (issue 22 item 8): the latency file its config
names is written by the docs' own snippet, and every file a code block names exists or is made
by the docs."""

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from treespec_sim.cost import get_cost_model, record_extrapolation
from treespec_sim.sweep import load_config, main

ROOT = Path(__file__).resolve().parents[2]
USAGE = ROOT / "docs" / "usage.md"
#: A file name in a code block (with one of the extensions the docs use).
FILE = re.compile(r"(?<![\w/.-])([\w-][\w./-]*\.(?:json|toml|py|png|md|csv|txt))\b")


def _fenced(text: str) -> list[tuple[str, str]]:
    """``(language, code)`` of every fenced code block of a Markdown text, in order."""
    blocks, lang, code = [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if lang is None:
                lang, code = line[3:].strip(), []
            else:
                blocks.append((lang, "\n".join(code) + "\n"))
                lang = None
        elif lang is not None:
            code.append(line)
    assert lang is None, "an unclosed code block"
    return blocks


def _blocks(lang: str, text: str | None = None) -> list[str]:
    return [code for got, code in _fenced(USAGE.read_text() if text is None else text)
            if got == lang]


def _section(heading: str) -> str:
    text = USAGE.read_text()
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start: end if end > 0 else len(text)]


def _latency_snippet() -> str:
    """The Python block of "Latency files" that writes the config example's latency file."""
    found = [b for b in _blocks("python", _section("### Latency files"))
             if "save_cost_model(" in b]
    assert len(found) == 1, "Latency files: expected one block that writes a latency file"
    return found[0]


def _grid_toml() -> str:
    found = _blocks("toml", _section("## The sweep"))
    assert len(found) == 1
    return found[0]


def _made_by_the_docs() -> set[str]:
    """Files the docs write: by a Python block's ``save_cost_model(..., "name")``, or a block
    the prose says to save (``Save the example below as `name` ``)."""
    made = {m for code in _blocks("python")
            for m in re.findall(r'save_cost_model\([^)]*?"([^"]+)"\)', code)}
    return made | set(re.findall(r"[Ss]ave\s+the\s+example\s+below\s+as\s+`([^`]+)`",
                                 USAGE.read_text()))


def test_the_sweep_config_example_runs_with_the_latency_file_the_docs_write(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    toml = _grid_toml()
    assert '"my_gpu.json"' in toml and "my_grid.toml" in _made_by_the_docs()
    Path("my_grid.toml").write_text(toml)
    with pytest.raises(ValueError, match=r"my_gpu\.json"):  # the example needs that file
        load_config("my_grid.toml")
    exec(compile(_latency_snippet(), "docs/usage.md (Latency files)", "exec"), {})
    assert "TabulatedCost(name='my-gpu'" in capsys.readouterr().out
    plan = load_config("my_grid.toml")  # the example as written: valid
    assert [g.family for g in plan.grids] == ["ddtree", "caddtree", "stochastic", "verifiers"]
    cad = next(g for g in plan.grids if g.family == "caddtree")
    assert "my_gpu.json" in cad.cost_models
    # the file covers every cost the example asks of it: no extrapolation
    with record_extrapolation() as log:
        get_cost_model("my_gpu.json").verify_cost(np.arange(1, cad.max_budget + 2),
                                                 cad.context_length)
    assert log.records() == []
    # the command the docs give, with fewer rounds and one world to stay quick
    command = "python -m treespec_sim.sweep --config my_grid.toml --out runs/mine"
    assert command in USAGE.read_text()
    assert main([*command.split()[3:], "--rounds", "3", "--worlds", "1", "--quiet",
                 "--no-plot"]) == 0
    with open("runs/mine/results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    mine = [r for r in rows if r["family"] == "caddtree" and r["cost_model"] == "my-gpu"]
    assert {r["method"] for r in mine} >= {"caddtree", "ddtree-oracle", "longrun"}
    assert all(float(r["throughput_tok_s"]) > 0 for r in mine)
    assert {r["family"] for r in rows} == {"ddtree", "caddtree", "stochastic", "verifiers"}
    record = json.loads(Path("runs/mine/run.json").read_text())
    assert "my-gpu" not in {e["model"] for e in record["extrapolated"]}


def test_every_file_a_code_block_names_exists_or_is_made_by_the_docs():
    made = _made_by_the_docs()
    blocks = _fenced(USAGE.read_text())
    assert {"python", "bash", "toml"} <= {lang for lang, _ in blocks}
    named = {name for _, code in blocks for name in FILE.findall(code)}
    assert "my_gpu.json" in named and "my_grid.toml" in named
    missing = sorted(n for n in named if n not in made and not (ROOT / n).exists())
    assert missing == [], f"docs/usage.md code blocks name files nothing makes: {missing}"
