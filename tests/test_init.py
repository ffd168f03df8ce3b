"""``bakery init``: a commented pipeline.toml for the folders it finds, which loads and
plans as written (issue 41, item 6)."""

from __future__ import annotations

from click.testing import CliRunner
from pipeline_helpers import write_image

from bakery.cli import main
from bakery.pipeline.config import load_pipeline


def test_init_writes_a_pipeline_for_the_folders_it_finds(tmp_path):
    for mat in ("Bricks", "stone wall"):
        for role in ("Albedo", "normal", "roughness"):
            write_image(tmp_path / "art" / "materials" / mat / f"{role}.png")
    for suffix in ("BaseColor", "Normal", "Roughness"):  # a studio's names, detected by the loader
        write_image(tmp_path / "art" / "materials" / "rock" / f"Rock_{suffix}.png")
    write_image(tmp_path / "art" / "decals" / "rust.png")
    write_image(tmp_path / "art" / "decals" / "moss.png")
    write_image(tmp_path / "out" / "old" / "albedo.png")   # an output folder is never an input
    r = CliRunner().invoke(main, ["init", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "3 material(s), 2 single texture(s)" in r.output
    text = (tmp_path / "pipeline.toml").read_text()
    assert text.count("\n# ") > 10  # commented: the file explains itself
    pipe = load_pipeline(tmp_path / "pipeline.toml")
    assert {a.name for a in pipe.assets["materials"]} == {"materials/Bricks", "materials/rock", "materials/stone wall"}
    assert {a.name for a in pipe.assets["decals"]} == {"decals/moss", "decals/rust"}
    assert {d.stage_cls.type_name for d in pipe.stages.values()} == {"ntc", "mipmap", "neural_material",
                                                                     "neural_texture", "procedural"}
    rock = next(a for a in pipe.assets["materials"] if a.name == "materials/rock")
    assert {k.split(".")[0] for k in rock.files} == {"albedo", "normal", "roughness"}
    again = CliRunner().invoke(main, ["init", str(tmp_path)])
    assert again.exit_code == 2 and "never replaces" in again.output
    assert CliRunner().invoke(main, ["init", str(tmp_path), "--force"]).exit_code == 0


def test_init_without_normals_leaves_out_the_mip_stage(tmp_path):
    for role in ("albedo", "roughness"):
        write_image(tmp_path / "mats" / "plain" / f"{role}.png")
    assert CliRunner().invoke(main, ["init", str(tmp_path)]).exit_code == 0
    types = {d.stage_cls.type_name for d in load_pipeline(tmp_path / "pipeline.toml").stages.values()}
    assert types == {"ntc", "neural_material"}


def test_init_in_a_folder_without_textures_says_so(tmp_path):
    r = CliRunner().invoke(main, ["init", str(tmp_path)])
    assert r.exit_code == 2 and "no textures found" in r.output
    assert not (tmp_path / "pipeline.toml").exists()
