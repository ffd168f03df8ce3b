"""Every result against its baseline (issue 41): a loss is a console warning and a red
report row with its reason, ``require = { margin_db = 0 }`` gates on it, an untrained
neural material does not beat the uniform material, every registered stage draws a
section of its own, and the report says what out/ holds after a partial bake."""

from __future__ import annotations

import json
import math
from html import escape
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from pipeline_helpers import BASIC_TOML, make_project

from bakery.formats.images import encode_png, load_image
from bakery.pipeline.cli import bake_cmd
from bakery.verdict import Verdict, budget_reason, error_verdict, margin_of_psnr, psnr_verdict

ROOT = Path(__file__).resolve().parent.parent


def _material(folder: Path, size: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for f in sorted((ROOT / "assets" / "materials" / "bricks").glob("*.png")):
        (folder / f.name).write_bytes(encode_png(load_image(f)[:size, :size]))
    return folder


def _bake(*args, code=0):
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml", *args])
    assert r.exit_code == code, r.output
    return r


# -- the records -------------------------------------------------------------------------
def test_margins_are_db_everywhere():
    assert psnr_verdict("b", 30.0, 28.5).margin_db == 1.5
    assert error_verdict("b", 0.01, 0.02, metric="RMSE").margin_db == pytest.approx(20 * math.log10(2), abs=1e-3)
    assert error_verdict("b", 0.01, 0.02, metric="MSE", power=True).margin_db == pytest.approx(3.010, abs=1e-3)
    assert margin_of_psnr(78.0, math.inf) == 0.0  # both past 8-bit rounding noise: a tie, not -inf
    v = psnr_verdict("BCn", 22.0, 24.5, reason="why", parts=[{"name": "a", "result": 1, "baseline": 2, "margin_db": -1}])
    assert not v.wins and "-2.50 dB under BCn" in v.summary()
    again = Verdict.from_dict(json.loads(json.dumps({**v.to_dict(), "baseline_value": "inf"})))
    assert again.baseline_value == math.inf and again.parts[0]["margin_db"] == -1.0


def test_a_budget_loss_names_what_would_win():
    from bakery.stages.ntc.stage import PRESETS

    from bakery.stages.params import Settings

    auto = budget_reason(PRESETS, Settings({"steps": 300, "quality": "production"}, {"steps": "auto"}, "cpu"))
    assert auto == 'CPU budget: 300 steps (quality = production); quality = "final" runs 1000, a GPU 6000'
    assert "set in params" in budget_reason(PRESETS, Settings({"steps": 9, "quality": "final"}, {"steps": 9}, "cpu"))
    assert budget_reason(PRESETS, Settings({"steps": 20000, "quality": "final"}, {"steps": "auto"}, "gpu")) == ""


# -- the stages --------------------------------------------------------------------------
NTC_TOML = """\
[project]
out = "out"
cache = "cache"
seed = 3

[assets.materials]
material = "mats/*"

[stages.compress]
type = "ntc"
inputs = ["materials"]
params = { steps = 8, batch = 1024, hidden = 16, layers = 1, bpp = 18, features = 16, latent_bits = 4 }
"""


def test_ntc_losing_to_bcn_warns_and_marks_the_row(tmp_path, monkeypatch, device):
    """Eight steps cannot beat BCn at equal bytes: the console warns with the reason, the
    report row is red, and a margin gate fails the bake."""
    monkeypatch.chdir(tmp_path)
    _material(tmp_path / "mats" / "bricks", 64)
    (tmp_path / "pipeline.toml").write_text(NTC_TOML)
    r = _bake()
    warning = [line for line in r.stderr.splitlines() if "loses to its baseline" in line]
    assert len(warning) == 1 and "bake: compress/materials/bricks loses to its baseline" in warning[0]
    assert "under BCn at equal bytes" in warning[0] and "steps = 8 set in params" in warning[0]
    assert "LOSES" in r.stdout
    rep = json.loads((tmp_path / "out" / "bake-report.json").read_text())
    (task,) = rep["tasks"]
    assert task["verdict"]["wins"] is False and task["metrics"]["margin_db"] < 0
    assert {p["name"] for p in task["verdict"]["parts"]} == {"albedo", "normal", "roughness", "metalness", "ao",
                                                           "height"}
    page = (tmp_path / "out" / "report.html").read_text()
    row = next(line for line in page.splitlines() if "href='#task-compress-materials-bricks'" in line)
    assert row.startswith("<tr class='loses'>") and "steps = 8 set in params" in row
    (tmp_path / "pipeline.toml").write_text(NTC_TOML + "require = { margin_db = 0 }\n")
    r = _bake(code=1)  # the gate is re-checked on the cached bundle
    assert "margin_db" in r.output and "below the required 0" in r.output


def test_an_untrained_neural_material_does_not_beat_the_uniform_material(tmp_path, device):
    from bakery.cli import main

    mat = _material(tmp_path / "bricks", 32)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["run", "neural_material", str(mat), "-o", str(out), "--param", "steps=1",
                                  "--param", "batch=256", "--param", "hidden=8", "--param", "encoder_hidden=8",
                                  "--param", "eval_directions=2"])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    assert m["verdict"]["wins"] is False and m["metrics"]["margin_db"] < 0
    assert m["metrics"]["psnr_db"] < m["metrics"]["uniform_psnr_db"]
    assert "uniform material" in m["verdict"]["baseline"]


def test_uniform_material_is_the_mean_with_a_unit_normal():
    from bakery.stages.neural_material.stage import uniform_material

    rng = np.random.default_rng(0)
    p = rng.random((4, 6, 8)).astype(np.float32)
    u = uniform_material(p)
    assert u.shape == p.shape and np.allclose(u[0, 0, [0, 1, 2, 6, 7]], p.reshape(-1, 8).mean(0)[[0, 1, 2, 6, 7]])
    assert np.allclose(np.linalg.norm(u[..., 3:6], axis=-1), 1.0, atol=1e-5) and np.ptp(u, axis=(0, 1)).max() == 0


# -- the report --------------------------------------------------------------------------
def _stages():
    from bakery.stages import known_stages

    return [s for s in known_stages() if not s.startswith("test_")]


@pytest.mark.parametrize("type_name", _stages())
def test_every_stage_judges_and_draws_its_own_section(type_name, tmp_path):
    """A stage declares its baseline and names its metrics; its hook draws a section with
    the verdict in it from a bundle's manifest."""
    from bakery.reporting import BundleView, describe_metric
    from bakery.stages import get_stage

    stage = get_stage(type_name)
    assert stage.baseline and "margin_db" in stage.metric_docs
    assert all(label and what for label, what in stage.metric_docs.values())
    v = psnr_verdict(stage.baseline, 20.0, 21.0, reason="a reason")
    manifest = {"files": [], "metrics": {"margin_db": -1.0}, "verdict": v.to_dict()}
    view = BundleView(type_name, "a", tmp_path, manifest, {}, tmp_path, stage.judge(manifest), stage.metric_docs)
    html = stage.report_section(view)
    assert f"loses to {escape(stage.baseline)}" in html and "a reason" in html
    assert describe_metric("margin_db", stage.metric_docs)[0] in html


def test_readable_metric_names():
    from bakery.reporting import describe_metric
    from bakery.stages import get_stage

    assert describe_metric("reduction_vs_toksvig_1_4", get_stage("mipmap").metric_docs)[0] == \
        "RMSE vs Toksvig, levels 1\u20134"
    assert describe_metric("psnr_db.normal", get_stage("ntc").metric_docs)[0] == "PSNR normal (dB)"
    assert describe_metric("set_psnr_db", {})[0] == "set PSNR (dB)"


def test_the_report_lists_every_task_after_an_only_bake(tmp_path, monkeypatch):
    """The report is the state of out/: ``--only`` rebuilds its stage and keeps the others,
    cached ones with the time their bundle took to build."""
    monkeypatch.chdir(tmp_path)
    make_project(tmp_path, images=("a", "b"))
    first = json.loads(_bake("--json").stdout)
    built = {(t["stage"], t["asset"]): t["seconds"] for t in first["tasks"]}
    (tmp_path / "pipeline.toml").write_text(BASIC_TOML.replace("radius = 1", "radius = 2"))
    rep = json.loads(_bake("--only", "blur", "--json").stdout)
    got = {(t["stage"], t["asset"]): t for t in rep["tasks"]}
    assert set(got) == set(built)  # the summary tasks too
    assert {got[k]["status"] for k in got if k[0] == "blur"} == {"built"}
    for k in (k for k in got if k[0] == "summary"):  # its input changed, and it did not run: out/ is older
        assert got[k]["status"] == "skipped" and "older bundle" in got[k]["reason"]
    page = (tmp_path / "out" / "report.html").read_text()
    assert page.count("<section class='task'") == 4
    (tmp_path / "pipeline.toml").write_text(BASIC_TOML)
    again = json.loads(_bake("--only", "summary", "--json").stdout)
    cached = {(t["stage"], t["asset"]): t for t in again["tasks"] if t["stage"] == "summary"}
    for k, t in cached.items():  # cached: the first bake's build time, not the check's
        assert t["status"] == "cached" and t["seconds"] == pytest.approx(built[k], abs=1e-3)
