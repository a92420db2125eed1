"""The documentation's worked examples run as written, and its tables name the commands that
produced them (commands that exist) and hold the numbers of the files they quote."""

import importlib.util
import json
import re
import shlex
from pathlib import Path

import numpy as np

from treespec_sim.methods import METHODS
from treespec_sim.sweep import load_config

DOCS = Path(__file__).resolve().parents[2] / "docs"


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
    try:
        for code in blocks:
            exec(compile(code, "usage.md", "exec"), namespace)
    finally:  # the page registers its method; the registry is left as the other tests see it
        METHODS.pop("wide-root", None)
    out = capsys.readouterr().out
    assert "wide-root" in out and "ddtree" in out
    # the user's world really ran through the loop: exact and lossless facts are consistent
    rnd = namespace["rnd"]
    assert rnd.tree.size == 8 and set(rnd.tree.depth[1:]) == {1}
    assert abs(rnd.expected_tau - (1 + rnd.coverage)) < 1e-12
    assert abs(sum(rnd.exits.by_cause.values()) - 1) < 1e-12
    assert rnd.exits.by_cause["uncovered"] > 0  # the root's 8 children miss some first tokens
    assert np.isclose(rnd.exits.by_cause["uncovered"] + rnd.exits.by_cause["budget"], 1)


def test_result_page_configs_load_and_match_their_runs():
    """The committed per-family configs are valid and are the ones their pages were run with."""
    for name, family in (("stochastic", "stochastic"), ("verifiers", "verifiers"),
                         ("verifiers_engines", "verifiers")):
        plan = load_config(DOCS / "results" / f"{name}.toml")
        assert [g.family for g in plan.grids] == [family]
        recorded = json.loads((DOCS / "results" / name / "run.json").read_text())["plan"]
        assert recorded[family] == plan.to_dict()[family]
        assert recorded[family]["worlds"] >= 3



def test_the_engines_preset_is_its_committed_config():
    """``--preset verifiers-engines`` runs the grid of docs/results/verifiers_engines.toml."""
    from treespec_sim.families.verifiers import engines_preset

    assert load_config(DOCS / "results" / "verifiers_engines.toml").grids == (engines_preset(),)

# ------------------------------------------------------------------ tables that a command produces
# Issue 22 item 8: every table in the docs that a command produces names that command, and the
# command exists. The convention: the paragraph right above such a table (or one of the two above
# a theory table) starts with "Produced by `python ...`" (or says where the numbers come from:
# "Computed ...", "Hand-copied ...", "Checked by `python ...`", "**No command produces ...").

ROOT = DOCS.parent
SOURCE_PREFIXES = ("Produced by", "Checked by", "Computed", "Hand-copied", "**No command produces")
#: Hand-written tables of the results pages (definitions, not numbers a command printed).
HAND_WRITTEN = {
    "calibration.md": ("| knob | what it sets at T = 1 |", "| knob | `math-code` | `chat` |"),
}
#: Theory tables and output blocks whose numbers a command (or a one-off computation) produced.
THEORY_PRODUCED = {
    "univer.md": ("| shape | traversal | univer-fixed |", "| claim | balanced | deep-first |",
                  "| regime | tree | Traversal |"),
    "caddtree.md": ("| B | N(B) | query tokens |",),
    "batch_caddtree.md": ("| N (nodes in all) | G*(N) |",),
    "verification.md": ("job                                          median s",),
}


def _result_pages() -> list[Path]:
    """Result pages with hand-kept text (sweep output folders record their command in run.json;
    docs/results/real_models/ is checked with the real-model docs)."""
    return sorted(p for p in (DOCS / "results").rglob("*.md")
                  if "real_models" not in p.relative_to(DOCS / "results").parts
                  and not (p.parent / "run.json").exists())


def _sweep_folders() -> list[Path]:
    return sorted(p.parent for p in (DOCS / "results").rglob("run.json")
                  if "real_models" not in p.relative_to(DOCS / "results").parts)


def _paragraph_before(lines: list[str], i: int, skip: int = 0) -> str:
    """The paragraph ending above line ``i`` (``skip`` paragraphs further up), lines joined."""
    j = i - 1
    for _ in range(skip + 1):
        while j >= 0 and not lines[j].strip():
            j -= 1
        end = j
        while j >= 0 and lines[j].strip():
            j -= 1
    return " ".join(s.strip() for s in lines[j + 1:end + 1])


def _tables(text: str) -> list[tuple[int, list[str]]]:
    """(line index of the header, the table's lines) of every Markdown table outside code."""
    lines, out, fenced, i = text.split("\n"), [], False, 0
    while i < len(lines):
        if lines[i].startswith("```"):
            fenced = not fenced
        elif (not fenced and lines[i].startswith("|") and i + 1 < len(lines)
              and lines[i + 1].startswith("|---")):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append((i, lines[i:j]))
            i = j
            continue
        i += 1
    return out


def _fenced(text: str) -> list[tuple[int, list[str]]]:
    """(line index of the opening fence, the block's lines) of every fenced code block."""
    lines, out, start = text.split("\n"), [], None
    for i, line in enumerate(lines):
        if line.startswith("```"):
            if start is None:
                start = i
            else:
                out.append((start, lines[start + 1:i]))
                start = None
    return out


def _blocks(text: str) -> list[tuple[int, str]]:
    """(line index, first line) of every table and every fenced block that is not code a
    reader runs (Python, or only command lines): the things a command may have printed."""
    out = [(i, t[0]) for i, t in _tables(text)]
    for i, body in _fenced(text):
        lang = text.split("\n")[i][3:].strip()
        output = [s for s in body if s.strip() and not s.startswith("python ")]
        if lang in ("", "text") and output:
            out.append((i, body[0]))
    return sorted(out)


def _is_source(paragraph: str) -> bool:
    return paragraph.startswith(SOURCE_PREFIXES) or " Produced by `" in paragraph


def _table(text: str, header: str) -> list[list[str]]:
    """The body rows of the table whose header starts with ``header``, cells stripped."""
    found = [t for _, t in _tables(text) if t[0].startswith(header)]
    assert len(found) == 1, f"expected one table starting {header!r}, found {len(found)}"
    return [[c.strip() for c in row.strip().strip("|").split("|")] for row in found[0][2:]]


def _commands(paragraph: str) -> list[str]:
    return [c for c in re.findall(r"`([^`]+)`", paragraph) if c.startswith("python ")]


def _paragraphs(text: str) -> list[str]:
    """Paragraphs outside fenced blocks, lines joined; each command line of a fenced block
    (``python ...``, a trailing ``# comment`` dropped) as a paragraph of its own."""
    out, prose = [], []
    for _, body in _fenced(text):
        out += ["`" + s.split("  #")[0].strip() + "`" for s in body if s.startswith("python ")]
    fenced = False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            prose.append(line)
    return out + [" ".join(p.split()) for p in re.split(r"\n\s*\n", "\n".join(prose))]


def _check_command(cmd: str, where: str) -> None:
    """``python -m MODULE ARGS`` or ``python FILE ARGS``: the module has a command line (a
    ``__main__``), the file exists, every ``--option`` is one its source defines, and every
    argument that names a file of the repository names one that exists."""
    argv = shlex.split(cmd)
    assert argv[0] == "python" and len(argv) > 1, f"{where}: not a command: {cmd!r}"
    if argv[1] == "-m":
        module, rest = argv[2], argv[3:]
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        assert spec is not None, f"{where}: `{cmd}`: no module {module!r}"
        if spec.submodule_search_locations:  # a package: python -m runs its __main__
            spec = importlib.util.find_spec(f"{module}.__main__")
            assert spec is not None, f"{where}: `{cmd}`: package {module!r} has no __main__"
        source = Path(spec.origin).read_text()
        assert re.search(r"""if __name__ == ["']__main__["']""", source), (
            f"{where}: `{cmd}`: {module} has no command line (no __main__ block)")
    else:
        path, rest = ROOT / argv[1], argv[2:]
        assert path.is_file(), f"{where}: `{cmd}`: no file {argv[1]}"
        source = path.read_text()
    for arg in rest:
        if arg.startswith("--"):
            flag = arg.split("=")[0]
            assert f'"{flag}"' in source or f"'{flag}'" in source, (
                f"{where}: `{cmd}`: {flag} is not an option of that command")
        elif "/" in arg and Path(arg).suffix in {".toml", ".json", ".csv", ".py", ".md"}:
            assert (ROOT / arg).exists(), f"{where}: `{cmd}`: no file {arg}"


def _source_paragraphs(path: Path) -> list[str]:
    return [p for p in _paragraphs(path.read_text()) if _is_source(p)]


def test_produced_by_names_commands_that_exist():
    """Every `python ...` these pages name exists (a "Produced by" paragraph must name one);
    only a paragraph saying the command "no longer exists" may name one that does not."""
    pages = sorted((DOCS / "theory").glob("*.md")) + _result_pages() + [DOCS / "architecture.md"]
    named = produced = 0
    for page in pages:
        for para in _paragraphs(page.read_text()):
            if para.startswith(("Produced by", "Checked by")) or " Produced by `" in para:
                assert _commands(para), f"{page.name}: names no `python ...`: {para[:120]!r}"
                produced += 1
            if "no longer exists" in para:
                continue
            for cmd in _commands(para):
                _check_command(cmd, page.name)
                named += 1
    assert produced >= 10 and named >= 20  # the convention is in use (not a vacuous pass)


def test_sweep_result_folders_record_an_existing_command():
    folders = _sweep_folders()
    assert {f.name for f in folders} >= {"paper", "stochastic", "verifiers"}
    for folder in folders:
        argv = json.loads((folder / "run.json").read_text())["command"]
        parts = Path(argv[0]).parts
        script = next((Path(*parts[i:]) for i in range(1, len(parts))
                       if (ROOT / Path(*parts[i:])).is_file()), None)
        assert script is not None, f"{folder.name}/run.json: {argv[0]} is not in the repository"
        module = ".".join(script.with_suffix("").parts)
        _check_command(shlex.join(["python", "-m", module, *argv[1:]]), f"{folder.name}/run.json")


def test_every_results_table_says_where_it_comes_from():
    pages = _result_pages()
    assert DOCS / "results" / "calibration.md" in pages
    for page in pages:
        text = page.read_text()
        lines = text.split("\n")
        assert _source_paragraphs(page), f"{page.name}: no 'Produced by `...`' paragraph"
        for i, first in _blocks(text):
            if first.startswith(HAND_WRITTEN.get(page.name, ())):
                continue
            assert _is_source(_paragraph_before(lines, i)), (
                f"{page.relative_to(DOCS)}: {first[:60]!r} has no source paragraph right above "
                f"it (start it with one of {SOURCE_PREFIXES})")


def test_theory_tables_that_a_command_produced_say_so():
    for name, headers in THEORY_PRODUCED.items():
        text = (DOCS / "theory" / name).read_text()
        lines = text.split("\n")
        for header in headers:
            (i, _), = [(i, first) for i, first in _blocks(text) if first.startswith(header)]
            above = [_paragraph_before(lines, i, skip) for skip in (0, 1)]
            assert any(_is_source(p) for p in above), (
                f"{name}: the table {header!r} does not say which command produced it")


def test_theory_pages_cite_proofs_check_rows_that_exist():
    from proofs_check.theorems import CHECKS

    names = {c.theorem for c in CHECKS}
    cited = 0
    for page in sorted((DOCS / "theory").glob("*.md")):
        for span in re.findall(r"`([a-z0-9_<>=+,\-]+\[[^`\]]+\])`", page.read_text()):
            if any(s in span for s in ("…", "...", "*", "|family", "R>=")):
                continue  # a pattern for a family of rows, not one row
            row = span[len("claim["):-1] if span.startswith("claim[") else span
            assert row in names, f"{page.name}: `{span}` is no row of python -m proofs_check"
            cited += 1
    assert cited >= 30


def test_budget_choice_configs_are_the_plans_of_their_runs():
    folders = sorted((DOCS / "results").glob("caddtree_*"))
    assert len(folders) == 3
    for folder in folders:
        plan = load_config(folder / "budget_choice.toml")
        recorded = json.loads((folder / "sweep" / "run.json").read_text())
        assert recorded["plan"] == plan.to_dict()
        config = f"{folder.relative_to(ROOT)}/budget_choice.toml"
        assert recorded["command"][1:3] == ["--config", config]


# --------------------------------------------- numbers that a file holds, as the pages quote them
def _minus(s: str) -> str:
    return s.replace("-", "−")


def test_calibration_tables_are_the_data_file():
    """docs/results/calibration.md quotes treespec_sim/data/calibration.json, PUBLISHED and
    derive_targets; a refit (or an edit by hand) that the page does not follow fails here."""
    from treespec_sim import calibrate

    text = (DOCS / "results" / "calibration.md").read_text()
    data = json.loads(calibrate.CALIBRATION_FILE.read_text())
    regimes = data["regimes"]
    quantities = ("chain", "ddtree64", "ddtree64_t1")
    rows = _table(text, "| regime | median (nats) |")
    assert [r[0] for r in rows] == list(regimes)
    for row in rows:
        e = regimes[row[0]]["achieved"]["entropy_t1"]
        assert row[1:] == [f"{e['median']:.3f}", f"{e['p80']:.3f}",
                           f"{e['share_below_0.05'] * 100:.0f}%",
                           f"{e['share_above_1'] * 100:.1f}%"], row[0]
    for row in _table(text, "| regime | family | chain τ target |"):
        g = regimes[row[0]]
        want = [row[0], g["family"]]
        for q in quantities:
            target, got = g["target"][q], g["achieved"][q]
            derived = not g["target"][f"{q}_derivation"].startswith("published")
            want += [f"{target:.3f}*" if derived else f"{target:g}",
                     f"{got['mean']:.3f} ± {got['se']:.3f}",
                     _minus(f"{(got['mean'] / target - 1) * 100:+.1f}%")]
        assert row == [*want, "yes" if g["within_tolerance"] else "no"], row[0]
    for row in _table(text, "| regime | chain τ per world |"):
        per = regimes[row[0]]["achieved"]["per_world"]
        assert row[1:] == [" / ".join(f"{x:.2f}" for x in per[q]) for q in quantities], row[0]
    for row in _table(text, "| regime | variant_noise | depth_sharpening |"):
        g = regimes[row[0]]
        f, fit = g["fitted"], g["fit"]
        assert row[1:] == [
            f"{f['variant_noise']:.4f}",
            f"{f['depth_sharpening']:.4f}" if "depth_sharpening" in f else "0 (fixed)",
            f"{f['calibration']:.4f}" if "calibration" in f else
            f"{g['knobs']['calibration']:g} (fixed)",
            f"{f['logit_scale']:.3f}",
            " / ".join(f"{fit[q]:.3f}" for q in quantities),
            str(len(fit["passes"])), str(fit["trials"]), f"{fit['seconds']:.0f}",
            f"{g['seconds']:.0f}"], row[0]
    common = {k: v for k, v in data["families"]["math-code"].items()
              if data["families"]["chat"].get(k) == v}
    shown = {}
    for row in _table(text, "| knob | value | knob | value |"):
        shown.update({row[0]: row[1], row[2]: row[3]})
    assert {k.removesuffix(" (L)"): v for k, v in shown.items()} == {
        k: str(v) for k, v in common.items()}
    published = _table(text, "| dataset | DFlash chain τ (T = 0) |")
    keys = ("chain", "ddtree64", "ddtree64_t1", "dflash_speedup", "ddtree_speedup")
    assert [[calibrate.PUBLISHED[r][k] for k in keys] for r in regimes] == [
        [None if c == "—" else float(c) for c in row[1:]] for row in published]
    ratios = _table(text, "| reference | DDTree@64 / chain |")
    pub = calibrate.PUBLISHED
    ref = [r for r in regimes if all(pub[r][k] is not None for k in keys)]
    g_ = np.mean([pub[r]["ddtree64"] / pub[r]["chain"] for r in ref])
    a_ = np.mean([pub[r]["ddtree64"] / pub[r]["chain"]
                  / (pub[r]["ddtree_speedup"] / pub[r]["dflash_speedup"]) for r in ref])
    m_ = np.mean([pub[r]["ddtree64"] / pub[r]["ddtree_speedup"] for r in ref])
    assert ratios[-1] == ["**mean**", f"**g = {g_:.4f}**", "", f"**a = {a_:.4f}**",
                          f"**m = {m_:.4f}**"]
    targets = calibrate.derive_targets()
    assert targets["aime25"].ddtree64 == round(pub["aime25"]["chain"] * a_ * pub["aime25"][
        "ddtree_speedup"] / pub["aime25"]["dflash_speedup"], 3)


def test_calibration_validation_table_is_the_paper_run():
    """The simulated columns of the validation table: the best-speedup DDTree row per regime
    and T in docs/results/paper/results.csv (recomputed; the table is printed on failure)."""
    import csv

    with open(DOCS / "results" / "paper" / "results.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["family"] == "ddtree"
                and r["method"] == "ddtree" and r["cost_model"] == "h200-qwen3-8b"]
    page = _table((DOCS / "results" / "calibration.md").read_text(),
                  "| regime | T = 0: simulated (best B) |")
    want = []
    for regime in [p[0] for p in page]:
        cells = []
        for t in ("0", "1"):
            best = max((r for r in rows if r["regime"] == regime and r["temperature"] == t),
                       key=lambda r: float(r["speedup_vs_ar"]))
            cells.append(f"{float(best['speedup_vs_ar']):.2f}× ({best['budget']})")
        want.append(cells)
    got = [[p[1], p[3]] for p in page]
    assert got == want, "\n".join(f"{p[0]}: {w}" for p, w in zip(page, want, strict=True))


def test_univer_gain_table_is_the_verifier_run():
    """docs/theory/univer.md §4: the T = 1 gains over RRSw of docs/results/verifiers/results.csv
    (recomputed; the expected rows are printed on failure)."""
    import csv

    with open(DOCS / "results" / "verifiers" / "results.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["temperature"] == "1"]

    def pct(x: str) -> str:
        return _minus(f"{(float(x) - 1) * 100:+.1f}")

    page = _table((DOCS / "theory" / "univer.md").read_text(), "| regime | tree | Traversal |")
    trees = {"binary depth 5": "sampled-tree[2x5]", "Tsubame B = 64": "tsubame-rrsw[B=64]"}
    want = []
    for regime, tree, *_ in page:
        arms = {(r["method"], r["verifier"]): r for r in rows if r["regime"] == regime}
        line = [regime, tree]
        for method, rule in [(trees[tree], v) for v in
                             ("traversal", "univer", "univer-guided", "univer-fixed")] + [
                (trees[tree] + "+greedy", "univer-fixed")]:
            r = arms.get((method, rule))
            line.append("—" if r is None else f"{pct(r['rel_to_baseline'])}% "
                        f"[{pct(r['rel_ci_low'])}, {pct(r['rel_ci_high'])}]")
        want.append(line)
    assert len(page) == 6 and page == want, "\n".join("| " + " | ".join(w) + " |" for w in want)


def test_pages_name_files_that_exist():
    """Every repository path these pages name in backticks exists (a moved module or a renamed
    result breaks this), except where the page says the file is in the git history."""
    pages = sorted((DOCS / "theory").glob("*.md")) + _result_pages() + [DOCS / "architecture.md"]
    named = 0
    for page in pages:
        for para in _paragraphs(page.read_text()):
            if "git history" in para:
                continue
            for span in re.findall(r"`([^`\s]+)`", para):
                if re.match(r"(treespec_sim|proofs_check|real_models|benchmarks|tests|docs)/",
                            span):
                    path = span.split("::")[0]
                    assert (ROOT / path).exists(), f"{page.name}: `{span}` does not exist"
                    named += 1
    assert named >= 40


def test_theory_pages_cite_tests_that_exist():
    """The theory pages' "checked by" tables name tests; a renamed test breaks this."""
    sources = {p: p.read_text() for p in (ROOT / "tests").rglob("*.py")}
    cited = 0
    for page in sorted((DOCS / "theory").glob("*.md")):
        for name, prefix in re.findall(r"`(?:tests/[\w/]+\.py::)?(test_\w+?)(…)?(?:\[[^`]*\])?`",
                                       page.read_text()):
            pattern = rf"def {name}" + ("" if prefix else r"\(")
            assert any(re.search(pattern, s) for s in sources.values()), (
                f"{page.name}: no test named {name}{prefix}")
            cited += 1
    assert cited >= 15


def test_the_engine_logs_page_commands_parse_and_name_files_that_exist():
    """docs/engine_logs.md (issue 45): each command line of its bash blocks parses with its
    module's own parser, every file it reads exists or is written by a command above it, and
    the issue's two examples (the vLLM line, the SGLang histogram) are there with DDTree at
    B = 64."""
    text = (DOCS / "engine_logs.md").read_text()
    bash = [line.strip() for i, body in _fenced(text)
            if text.split("\n")[i][3:].strip() == "bash" for line in body]
    cmds = [line for line in bash if line.startswith("python -m treespec_sim.")]
    assert len(cmds) >= 5
    made = {m.group(1) for line in bash if (m := re.match(r"cat > (\S+)", line))}
    for cmd in cmds:
        argv = shlex.split(cmd.split("  #")[0])
        module = importlib.import_module(argv[2])
        ns = module.build_parser().parse_args(argv[3:])
        for arg in argv[3:]:
            if arg.startswith(("tests/", "runs/")) and Path(arg).suffix:
                assert (ROOT / arg).exists() or arg in made, f"{cmd}: no file {arg}"
        out = getattr(ns, "out", None)
        if out is not None:
            made |= {f"{out}/{name}" for name in ("regime.json", "compare.png", "export.json")}
    predicts = [c for c in cmds if "--predict ddtree" in c and "--budget 64" in c]
    assert any("vllm_issue.log" in c for c in predicts)
    assert any("sglang_meta_info.json" in c for c in predicts)
