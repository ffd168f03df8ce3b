"""Errors finish the job (issue 41, item 5): a misspelling gets "did you mean", a gate on
a metric the stage never reports fails validation (so --dry-run), ``--force
pipeline.toml`` is understood, and a missing input folder says "not found"."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from pipeline_helpers import BASIC_TOML, make_project

from bakery.errors import UsageError, did_you_mean
from bakery.pipeline.cli import bake_cmd
from bakery.pipeline.config import load_pipeline

TEXTURE = """
[assets.textures]
image = "textures/*.png"

[stages.texture]
type = "neural_texture"
inputs = ["textures"]
"""


def _errors(tmp_path, toml: str) -> str:
    (tmp_path / "pipeline.toml").write_text(toml)
    with pytest.raises(UsageError) as e:
        load_pipeline(tmp_path / "pipeline.toml")
    return "\n".join(e.value.lines)


def test_did_you_mean():
    assert did_you_mean("psnr_dbb", ["psnr_db", "bpp"]) == " (did you mean 'psnr_db'?)"
    assert did_you_mean("zzz", ["psnr_db", "bpp"]) == ""


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('type = "test_blur"', 'type = "test_blurr"'), "did you mean 'test_blur'?"),
    (lambda t: t.replace("params = { radius = 1 }", "params = { radios = 1 }"), "did you mean 'radius'?"),
    (lambda t: t.replace('inputs = ["photos"]', 'inputs = ["photo"]'), "did you mean 'photos'?"),
    (lambda t: t.replace('seed = 7', 'seed = 7\ndevcie = "auto"'), "did you mean 'device'?"),
    (lambda t: t.replace('image = "src/*.png"', 'imag = "src/*.png"'), "did you mean 'image'?"),
    (lambda t: t.replace("[stages.blur]", "[stages.blur]\nrequires = { mean = 1 }"), "did you mean 'require'?"),
])
def test_unknown_names_get_a_suggestion(tmp_path, edit, message):
    make_project(tmp_path)
    assert message in _errors(tmp_path, edit(BASIC_TOML))


def test_a_gate_on_a_metric_the_stage_never_reports_fails_the_dry_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_project(tmp_path)
    (tmp_path / "textures").mkdir()
    (tmp_path / "src" / "a.png").rename(tmp_path / "textures" / "a.png")
    (tmp_path / "pipeline.toml").write_text(BASIC_TOML + TEXTURE + "require = { psnr_dbb = 20 }\n")
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml", "--dry-run"])
    assert r.exit_code == 2 and "stages.texture.require.psnr_dbb" in r.output
    assert "did you mean 'psnr_db'?" in r.output
    (tmp_path / "pipeline.toml").write_text(BASIC_TOML + TEXTURE + "require = { margin_db = 0 }\n")
    assert load_pipeline(tmp_path / "pipeline.toml").stages["texture"].require[0].min == 0


def test_a_missing_input_folder_is_not_found(tmp_path):
    make_project(tmp_path)
    text = _errors(tmp_path, BASIC_TOML.replace('image = "src/*.png"', 'image = "textures/*.png"'))
    assert "assets.photos.image: textures not found" in text


def test_force_with_the_pipeline_file_forces_every_stage(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_project(tmp_path, images=("a",))
    assert CliRunner().invoke(bake_cmd, ["pipeline.toml"]).exit_code == 0
    r = CliRunner().invoke(bake_cmd, ["--force", "pipeline.toml"])
    assert r.exit_code == 0, r.output
    assert "2 built, 0 cached" in r.output
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml", "--force", "blurr"])
    assert r.exit_code == 2 and "did you mean 'blur'?" in r.output
