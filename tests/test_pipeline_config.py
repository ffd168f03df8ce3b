"""Validation before any work: one `file:line: key: message` line per problem, exit code 2."""

import pytest
from click.testing import CliRunner

from pipeline_helpers import BASIC_TOML, make_project

from bakery.pipeline.cli import bake_cmd
from bakery.pipeline.config import ConfigError, load_pipeline
from bakery.pipeline.sourcemap import SourceMap


def _bake_errors(tmp_path, monkeypatch, toml):
    """Runs `bake` on a pipeline; returns the error lines, asserting exit 2 and no output."""
    monkeypatch.chdir(tmp_path)
    make_project(tmp_path, toml)
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml"])
    assert r.exit_code == 2, r.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()
    return [line for line in r.output.splitlines() if line.startswith("error: ")]


def _line_of(toml, needle):
    return next(i for i, line in enumerate(toml.splitlines(), 1) if needle in line)


def test_toml_syntax_error_has_line_and_column(tmp_path, monkeypatch):
    toml = BASIC_TOML.replace('type = "test_blur"', 'type = "test_blur')
    errs = _bake_errors(tmp_path, monkeypatch, toml)
    line = _line_of(toml, 'type = "test_blur')
    assert len(errs) == 1 and errs[0].startswith(f"error: pipeline.toml:{line}:")
    assert ": toml: " in errs[0]


def test_unknown_stage_type_lists_known(tmp_path, monkeypatch):
    toml = BASIC_TOML.replace('type = "test_blur"', 'type = "test_blurr"')
    (err,) = _bake_errors(tmp_path, monkeypatch, toml)
    line = _line_of(toml, "test_blurr")
    assert err.startswith(f"error: pipeline.toml:{line}: stages.blur.type: unknown stage type 'test_blurr'")
    assert "known:" in err and "test_blur," in err and "test_summary" in err


def test_unknown_parameter_names_key_path(tmp_path, monkeypatch):
    toml = BASIC_TOML.replace("params = { radius = 1 }", "params = { raduis = 1 }")
    (err,) = _bake_errors(tmp_path, monkeypatch, toml)
    line = _line_of(toml, "raduis")
    assert err == f"error: pipeline.toml:{line}: stages.blur.params.raduis: unknown parameter (did you mean 'radius'?) (known: gain, radius)"


def test_out_of_range_parameter_gives_range_and_default(tmp_path, monkeypatch):
    toml = BASIC_TOML.replace("params = { radius = 1 }", "\n[stages.blur.params]\ngain = 1.0\nradius = 99\n")
    (err,) = _bake_errors(tmp_path, monkeypatch, toml)
    line = _line_of(toml, "radius = 99")
    assert err == (f"error: pipeline.toml:{line}: stages.blur.params.radius: 99 is out of range "
                   "(allowed int in [0, 8], default 1)")


def test_wrong_parameter_type(tmp_path, monkeypatch):
    toml = BASIC_TOML.replace("radius = 1", 'radius = "big"')
    (err,) = _bake_errors(tmp_path, monkeypatch, toml)
    assert "stages.blur.params.radius: expected int, got 'big'" in err


def test_missing_input_file(tmp_path, monkeypatch):
    toml = BASIC_TOML.replace('image = "src/*.png"', 'image = "src/nothere.png"')
    (err,) = _bake_errors(tmp_path, monkeypatch, toml)
    line = _line_of(toml, "nothere")
    assert err == f"error: pipeline.toml:{line}: assets.photos.image: input file not found: src/nothere.png"


def test_glob_matching_nothing(tmp_path, monkeypatch):
    toml = BASIC_TOML.replace('image = "src/*.png"', 'image = "src/*.exr"')
    (err,) = _bake_errors(tmp_path, monkeypatch, toml)
    assert "assets.photos.image: no file matches 'src/*.exr'" in err


def test_dependency_cycle_is_named(tmp_path, monkeypatch):
    toml = BASIC_TOML.replace('type = "test_blur"\ninputs = ["photos"]\nparams = { radius = 1 }',
                              'type = "test_summary"\ninputs = ["stage:summary"]')
    (err,) = _bake_errors(tmp_path, monkeypatch, toml)
    line = _line_of(toml, 'inputs = ["stage:summary"]')
    assert err == f"error: pipeline.toml:{line}: stages.blur.inputs: dependency cycle: blur -> summary -> blur"


def test_paths_may_not_escape_the_pipeline_folder(tmp_path, monkeypatch):
    toml = BASIC_TOML.replace('out = "out"', 'out = "../elsewhere"')
    (err,) = _bake_errors(tmp_path, monkeypatch, toml)
    assert err.startswith(f"error: pipeline.toml:{_line_of(toml, 'elsewhere')}: project.out: path '../elsewhere' escapes")


def test_unknown_input_reference_and_all_errors_listed(tmp_path, monkeypatch):
    toml = (BASIC_TOML.replace('inputs = ["photos"]', 'inputs = ["fotos"]')
            .replace('inputs = ["stage:blur"]', 'inputs = ["stage:blurr"]')
            .replace('seed = 7', 'seed = 7\ncolour = "red"'))
    errs = _bake_errors(tmp_path, monkeypatch, toml)
    assert len(errs) == 3
    assert any("project.colour: unknown key" in e for e in errs)
    assert any(f":{_line_of(toml, 'fotos')}: stages.blur.inputs: unknown asset 'fotos' (did you mean 'photos'?) (assets: photos)" in e
               for e in errs)
    assert any("stages.summary.inputs: unknown stage 'blurr'" in e for e in errs)


def test_asset_roles_must_fit_the_stage(tmp_path, monkeypatch):
    toml = BASIC_TOML.replace('image = "src/*.png"', 'albedo = "src/a.png"')
    (err,) = _bake_errors(tmp_path, monkeypatch, toml)
    assert "stages.blur.inputs: asset 'photos' has roles albedo but stage type 'test_blur' accepts image" in err


def test_bad_plugin_is_a_config_error(tmp_path, monkeypatch):
    toml = BASIC_TOML.replace('plugins = ["pipeline_helpers"]', 'plugins = ["pipeline_helpers", "no_such_mod"]')
    errs = _bake_errors(tmp_path, monkeypatch, toml)
    assert any("project.plugins: cannot import plugin 'no_such_mod'" in e for e in errs)


def test_missing_pipeline_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(bake_cmd, ["nope.toml"])
    assert r.exit_code == 2 and "nope.toml:1: pipeline: file not found" in r.output


def test_material_folders_and_globs_expand_to_assets(tmp_path):
    from pipeline_helpers import write_image

    for mat in ("bricks", "stones"):
        for role in ("albedo", "normal", "roughness"):
            write_image(tmp_path / "mats" / mat / f"{role}.png")
        (tmp_path / "mats" / mat / "notes.txt").write_text("ignored")
    toml = BASIC_TOML + '\n[assets.mats]\nmaterial = "mats/*"\n\n[stages.mat]\ntype = "test_material"\ninputs = ["mats"]\n'
    p = make_project(tmp_path, toml)
    pipe = load_pipeline(p)
    assert [a.name for a in pipe.assets["photos"]] == ["photos/a", "photos/b", "photos/c"]
    (bricks, stones) = pipe.assets["mats"]
    assert bricks.name == "mats/bricks" and sorted(bricks.files) == ["albedo", "normal", "roughness"]
    assert pipe.stages["blur"].params == {"radius": 1, "gain": 1.0} and pipe.stages["blur"].seed == 7


def test_sourcemap_finds_keys_in_headers_and_inline_tables():
    text = '[project]\nname = "x"  # c\n\n[stages.a.params]\nsteps = 3\n[assets."odd.name"]\nimage = "p"\nx = { y = 1, z = 2 }\n'
    sm = SourceMap(text)
    assert sm.line_of("project.name") == 2
    assert sm.line_of(("stages", "a")) == 4 and sm.line_of("stages.a.params.steps") == 5
    assert sm.line_of(("assets", "odd.name", "image")) == 7
    assert sm.line_of(("assets", "odd.name", "x", "z")) == 8
    assert sm.line_of(("assets", "odd.name", "nope")) == 6


def test_config_error_raised_by_loader(tmp_path):
    p = make_project(tmp_path, BASIC_TOML.replace("radius = 1", "radius = -1"))
    with pytest.raises(ConfigError) as e:
        load_pipeline(p)
    assert e.value.exit_code == 2 and "stages.blur.params.radius: -1 is out of range" in e.value.lines[0]
