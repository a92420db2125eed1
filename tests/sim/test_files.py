"""treespec_sim.files: a write either replaces the file whole or leaves the old one."""

import os
import stat

import pytest

from treespec_sim.files import atomic_path, atomic_write_text, default_file_mode


def test_atomic_write_replaces_and_uses_normal_permissions(tmp_path):
    target = tmp_path / "sub" / "out.json"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two")
    assert target.read_text() == "two"
    assert stat.S_IMODE(os.stat(target).st_mode) == default_file_mode()
    assert [p.name for p in target.parent.iterdir()] == ["out.json"]  # no temporary left


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "fig.png"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="writer failed"), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("writer failed")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["fig.png"]


def test_atomic_path_is_beside_its_target(tmp_path):
    with atomic_path(tmp_path / "a.csv") as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".a.csv.")
        tmp.write_text("x")
    assert (tmp_path / "a.csv").read_text() == "x"
