"""A fitted regime is a regime everywhere (issue 45): ``--regimes FILE`` and ``regimes =
["FILE"]`` in a sweep config run it by the name its file holds, its cells depend on its knobs
(a changed file redoes them), worker processes know it, and a name clash is refused."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from treespec_sim import acceptance, synth
from treespec_sim.sweep import load_config, main

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


@pytest.fixture
def fitted(tmp_path, monkeypatch) -> Path:
    """A regime fitted to a log, written as ``fit`` writes it (a small world, one knob)."""
    monkeypatch.setattr(synth, "REGIMES", dict(synth.REGIMES))  # registrations stay here
    monkeypatch.setattr(synth.regimes, "REGIMES", synth.REGIMES)
    log = acceptance.read_log(FIX / "ddtree_benchmark.pt", "dflash")
    fit = acceptance.fit_log(log, base="small", temperature=0.0, knobs=("mismatch",),
                             contexts=8, max_evals=3, depth=15, name="fit-dflash-small")
    return acceptance.write_fit(tmp_path / "fit.json", fit)


def _rows(out: Path) -> list[dict]:
    import csv

    with open(out / "results.csv") as f:
        return list(csv.DictReader(f))


def test_a_sweep_config_and_the_command_line_run_a_fitted_regime_file(fitted, tmp_path):
    config = tmp_path / "grid.toml"
    config.write_text(f'[ddtree]\nregimes = ["small", "{fitted}"]\nbudgets = [4]\n'
                      'temperatures = [0.0]\nrounds = 4\nworlds = 2\n')
    plan = load_config(config)
    assert plan.grids[0].regimes == ("small", "fit-dflash-small")
    record = plan.to_dict()["regime_files"]["fit-dflash-small"]
    assert record["path"] == str(fitted)
    assert record["knobs"] == synth.regime_file(fitted).knobs()
    out = tmp_path / "run"
    assert main(["--config", str(config), "--out", str(out), "--quiet", "--no-plot",
                 "--workers", "2"]) == 0
    assert {r["regime"] for r in _rows(out)} == {"small", "fit-dflash-small"}
    run = json.loads((out / "run.json").read_text())
    assert "fit-dflash-small" in json.dumps(run)
    # the command line's --regimes takes the file too
    out2 = tmp_path / "run2"
    assert main(["--config", str(config), "--regimes", str(fitted), "--out", str(out2),
                 "--quiet", "--no-plot"]) == 0
    assert {r["regime"] for r in _rows(out2)} == {"fit-dflash-small"}


def test_a_changed_file_changes_its_cells_fingerprint(fitted, tmp_path):
    from treespec_sim.sweep_store import cell_path as _cell_path

    config = tmp_path / "grid.toml"
    config.write_text(f'[ddtree]\nregimes = ["{fitted}"]\nbudgets = [4]\nrounds = 4\n')
    plan = load_config(config)
    (cell,) = [c for c in plan.cells() if c.temperature == plan.grids[0].temperatures[0]][:1]
    before = _cell_path(tmp_path, cell, plan.settings())
    data = json.loads(fitted.read_text())
    entry = data["regimes"]["fit-dflash-small"]
    entry["knobs"]["mismatch"] = 0.5
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    synth.REGIMES.pop("fit-dflash-small")
    config.write_text(f'[ddtree]\nregimes = ["{other}"]\nbudgets = [4]\nrounds = 4\n')
    plan2 = load_config(config)
    assert _cell_path(tmp_path, cell, plan2.settings()) != before


def test_a_file_regime_that_would_replace_another_is_refused(fitted, tmp_path):
    data = json.loads(fitted.read_text())
    entry = data["regimes"].pop("fit-dflash-small")
    entry["knobs"] = dataclasses.asdict(dataclasses.replace(synth.REGIMES["small"],
                                                            mismatch=0.9))
    data["regimes"]["small"] = entry
    clash = tmp_path / "clash.json"
    clash.write_text(json.dumps(data))
    assert main(["--preset", "quick", "--regimes", str(clash), "--out",
                 str(tmp_path / "x"), "--quiet"]) == 2
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="regime 'small' is already a different regime"):
        synth.register_regime(synth.regime_file(clash))
    assert main(["--preset", "quick", "--regimes", str(tmp_path / "none.json"), "--out",
                 str(tmp_path / "y"), "--quiet"]) == 2
