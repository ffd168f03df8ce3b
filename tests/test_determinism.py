"""``bakery bake --verify-determinism``: every task baked again in a fresh process, every
byte compared; a stage that is not deterministic fails the bake by name."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bakery.pipeline.cli import bake_cmd
from bakery.pipeline.determinism import first_difference

from pipeline_helpers import BASIC_TOML, make_project, tree_snapshot


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_project(tmp_path, BASIC_TOML, images=("a", "b"))
    return tmp_path


def _report(root):
    return json.loads((root / "out" / "bake-report.json").read_text())


def test_a_deterministic_pipeline_passes_built_and_cached(project):
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml", "--verify-determinism"])
    assert r.exit_code == 0, r.output
    assert "deterministic: 4 tasks baked again in a fresh process, every byte the same" in r.output
    assert _report(project)["determinism"] == {"tasks": 4, "difference": None}
    # a cached re-bake is checked too, and the second bakes leave the outputs and cache alone
    before = tree_snapshot(project / "cache")
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml", "--verify-determinism"])
    assert r.exit_code == 0 and "4 cached" in r.output and _report(project)["determinism"]["tasks"] == 4
    assert tree_snapshot(project / "cache") == before


def test_a_nondeterministic_stage_exits_1_naming_task_and_file(project):
    (project / "pipeline.toml").write_text(BASIC_TOML + '\n[stages.noisy]\ntype = "test_noisy"\ninputs = ["photos"]\n')
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml", "--verify-determinism"])
    assert r.exit_code == 1, r.output
    assert ("error: noisy/photos/a: not deterministic: noise.bin: bytes differ (a second bake in a fresh process)"
            in r.stderr)
    found = _report(project)["determinism"]
    assert found["difference"] == {"task": "noisy/photos/a", "file": "noise.bin", "detail": "bytes differ"}
    assert found["tasks"] == 5  # blur a, b and summary a, b were the same; noisy/a is the first to differ
    # without the flag the same bake succeeds: nothing else checks
    assert CliRunner().invoke(bake_cmd, ["pipeline.toml", "--force"]).exit_code == 0


def test_a_second_bake_whose_process_dies_fails_in_one_line(project):
    (project / "pipeline.toml").write_text(BASIC_TOML + '\n[stages.dies]\ntype = "test_dies_again"\n'
                                                        'inputs = ["photos"]\n')
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml", "--verify-determinism", "--only", "dies"])
    assert r.exit_code == 1, r.output
    assert "dies/photos/a: the second bake's process died" in r.stderr and "Traceback" not in r.output


def test_a_dry_run_cannot_verify(project):
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml", "--verify-determinism", "--dry-run"])
    assert r.exit_code == 2 and "--verify-determinism: bakes every task a second time" in r.stderr, r.output
    assert not (project / "out").exists()


def test_first_difference_names_missing_and_extra_files():
    a = {"x.bin": [1, "aa"], "y.bin": [1, "bb"]}
    assert first_difference(a, dict(a)) is None
    assert first_difference(a, {"x.bin": [1, "aa"]}) == ("y.bin", "missing in the second bake")
    assert first_difference(a, {**a, "z.bin": [1, "cc"]}) == ("z.bin", "only in the second bake")
    assert first_difference(a, {**a, "x.bin": [1, "ab"]}) == ("x.bin", "bytes differ")
    both = {"manifest.json": [1, "m"], **a}
    assert first_difference(both, {"manifest.json": [1, "n"], "x.bin": [1, "ab"], "y.bin": [1, "bc"]})[0] == "x.bin"
