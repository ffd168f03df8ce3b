"""A studio's texture library baked as it is: each naming convention's folder through
``material = "lib/*"`` alone, packed maps, both normal conventions, non-square sizes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bakery.cli import main
from bakery.errors import UsageError
from bakery.formats.images import encode_png
from bakery.formats.reader import read_bundle
from bakery.imaging import to_uint8
from bakery.materials import load_material, load_textures
from bakery.naming import detect_roles
from bakery.pipeline.config import load_pipeline

from tests.studio_sets import CONVENTIONS, ROLES_OF, reference_maps, write_set

MIPS = 'type = "mipmap"\ninputs = ["lib"]\nparams = { steps = 2, pairs = 2, eval_pairs = 2, format = "uncompressed" }'


def _project(root: Path, stages: str, conventions=CONVENTIONS, maps=None) -> Path:
    maps = maps or reference_maps()
    for c in conventions:
        write_set(root / "lib" / c, c, maps)
    (root / "pipeline.toml").write_text(f'[project]\nname = "lib"\n\n[assets.lib]\nmaterial = "lib/*"\n\n{stages}\n')
    return root / "pipeline.toml"


def _bake(toml: Path, *extra):
    return CliRunner().invoke(main, ["bake", str(toml), *extra], catch_exceptions=False)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    root = tmp_path_factory.mktemp("lib")
    return load_pipeline(_project(root, f"[stages.mips]\n{MIPS}"))


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_each_convention_puts_every_role_in_its_channel(library, convention):
    (asset,) = [a for a in library.assets["lib"] if a.name == f"lib/{convention}"]
    textures = load_textures(asset.files)
    want = reference_maps()
    assert sorted(textures) == sorted(ROLES_OF[convention])
    for role in textures:  # exact: 8-bit packs, DirectX flips and smoothness are exact on the grid
        np.testing.assert_array_equal(textures[role], want[role], err_msg=f"{convention}: {role}")
    assert textures.renormalised == 0


def test_the_library_bakes_through_material_glob_alone(tmp_path):
    """Every convention bakes through mipmap; the bundle's level 0 is the generating maps
    (roles in the right channels, DirectX normals equal to their OpenGL twins)."""
    toml = _project(tmp_path, f"[stages.mips]\n{MIPS}", conventions=("substance", "unreal", "unity-hdrp"))
    r = _bake(toml)
    assert r.exit_code == 0, r.output
    want = reference_maps()
    normals = {}
    for c in ("substance", "unreal", "unity-hdrp"):
        b = read_bundle(tmp_path / "out" / "mips" / "lib" / c)
        h, w = want["normal"].shape[:2]
        normal = np.frombuffer(b.textures["normal.dds"].levels[0][0], np.uint8).reshape(h, w, 4)
        rough = np.frombuffer(b.textures["roughness.dds"].levels[0][0], np.uint8).reshape(h, w, 1)
        assert np.abs(normal[..., :3] / 255.0 - want["normal"]).max() <= 1.5 / 255, c
        np.testing.assert_array_equal(rough, to_uint8(want["roughness"]), err_msg=c)
        normals[c] = (tmp_path / "out" / "mips" / "lib" / c / "normal.dds").read_bytes()
    assert normals["unreal"] == normals["substance"] == normals["unity-hdrp"]   # DirectX in, the same chain out


def test_packed_orm_equals_the_same_maps_given_separately_byte_for_byte(tmp_path):
    stages = ('[stages.ntc]\ntype = "ntc"\ninputs = ["lib"]\n'
              'params = { bpp = 16.0, steps = 8, batch = 1024 }')
    maps = {r: a for r, a in reference_maps(128, 128).items() if r not in ("height", "opacity")}  # as Unreal
    bundles = {}
    for convention in ("separate", "unreal"):   # unreal: ORM and a DirectX normal
        root = tmp_path / convention
        write_set(root / "lib" / "rock", convention, maps)
        (root / "pipeline.toml").write_text(f'[assets.lib]\nmaterial = "lib/*"\n\n{stages}\n')
        r = _bake(root / "pipeline.toml")
        assert r.exit_code == 0, r.output
        bundles[convention] = root / "out" / "ntc" / "lib" / "rock"
    a, b = bundles["separate"], bundles["unreal"]
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir()) and "weights.bin" in names
    for name in names:
        if name != "manifest.json":
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    assert ma["ntc"] == mb["ntc"] and ma["metrics"] == mb["metrics"]
    # decompressed in an engine layout, the set reads back as the same roles
    runner = CliRunner()
    sep, orm = tmp_path / "sep", tmp_path / "orm"
    assert runner.invoke(main, ["decompress", str(a), "-o", str(sep), "--no-mips"]).exit_code == 0
    r = runner.invoke(main, ["decompress", str(b), "-o", str(orm), "--no-mips", "--layout", "unreal"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in orm.iterdir() if p.name != ".bakery-decompress.json") == ["D.png", "N.png", "ORM.png"]
    back, separate = load_textures({k: v.path for k, v in ((x.key(), x) for x in detect_roles(orm).values())}), \
        load_textures({r: sep / f"{r}.png" for r in maps})
    for role in maps:
        np.testing.assert_array_equal(back[role], separate[role], err_msg=role)


def test_explicit_channels_win_over_detection(tmp_path):
    maps = reference_maps()
    folder = write_set(tmp_path / "lib" / "m", "unreal", maps)
    swapped = np.concatenate([maps["metalness"], maps["roughness"], maps["ao"]], -1)  # a studio's own MRA
    (folder / "T_Barrel_ORM.png").write_bytes(encode_png(swapped))
    found = detect_roles(folder, explicit={"metalness": "orm.r", "ao": "ORM.b"})
    assert (found["metalness"].channels, found["ao"].channels, found["roughness"].channels) == ("r", "b", "g")
    files = {b.key(): b.path for b in found.values()}
    t = load_textures(files)
    for role in ("metalness", "roughness", "ao"):
        np.testing.assert_array_equal(t[role], maps[role])
    (tmp_path / "pipeline.toml").write_text('[assets.m]\nmaterial = "lib/*"\n'
                                            'channels = { metalness = "orm.r", ao = "orm.b" }\n'
                                            '[stages.s]\ntype = "ntc"\ninputs = ["m"]\n')
    (asset,) = load_pipeline(tmp_path / "pipeline.toml").assets["m"]
    assert set(asset.files) == {"albedo", "normal.dx", "metalness.r", "roughness.g", "ao.b"}


def test_off_unit_normals_are_renormalised_and_counted_zero_length_refused(tmp_path):
    maps = reference_maps(16, 16)
    n = maps["normal"].copy()
    n[2, 3] = 0.5 + 0.5 * (n[2, 3] * 2 - 1) * 0.7            # a JPEG-like short texel
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "normal.png").write_bytes(encode_png(n))
    t = load_textures({"normal": folder / "normal.png"})
    assert t.renormalised == 1
    assert abs(np.linalg.norm(t["normal"][2, 3] * 2 - 1) - 1) < 0.02
    n[5, 7] = 0.5
    (folder / "normal.png").write_bytes(encode_png(n))
    with pytest.raises(UsageError, match=r"1 texel\(s\) have no direction \(first at x=7, y=5"):
        load_textures({"normal": folder / "normal.png"})


def test_two_channel_normals_get_z_and_albedo_alpha_becomes_opacity(tmp_path):
    maps = reference_maps(16, 16)
    (tmp_path / "n.png").write_bytes(encode_png(np.concatenate([maps["normal"][..., :2], maps["opacity"]], -1)[..., :2]))
    (tmp_path / "a.png").write_bytes(encode_png(np.concatenate([maps["albedo"], maps["opacity"]], -1)))
    t = load_textures({"normal.rg": tmp_path / "n.png", "albedo": tmp_path / "a.png"})
    assert np.abs(t["normal"] - maps["normal"]).max() < 0.02
    np.testing.assert_array_equal(t["albedo"], maps["albedo"])
    np.testing.assert_array_equal(t["opacity"], maps["opacity"])
    assert load_material({"albedo": tmp_path / "a.png"}).roles == ("albedo", "opacity")


def test_non_square_npot_set_bakes_through_every_material_stage(tmp_path):
    maps = reference_maps(600, 1000)   # 1000x600: 1000 = 125 x 2^3, 600 = 75 x 2^3
    stages = "\n".join([
        f"[stages.mips]\n{MIPS}",
        '[stages.ntc]\ntype = "ntc"\ninputs = ["lib"]\nparams = { bpp = 2.0, steps = 4, batch = 512, baseline = false, weighting = "uniform" }',
        '[stages.nm]\ntype = "neural_material"\ninputs = ["lib"]\n'
        'params = { steps = 2, batch = 128, eval_directions = 2, finetune_steps = 0 }',
    ])
    toml = _project(tmp_path, stages, conventions=("gltf",), maps=maps)
    r = _bake(toml)
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    mips = json.loads((out / "mips" / "lib" / "gltf" / "manifest.json").read_text())
    assert [(row["width"], row["height"]) for row in mips["metrics"]["levels"]] == [(500, 300), (250, 150), (125, 75)]
    ntc = json.loads((out / "ntc" / "lib" / "gltf" / "manifest.json").read_text())
    mips_ntc = [(m["width"], m["height"]) for m in ntc["ntc"]["latents"]["color_mips"]]
    assert mips_ntc[:5] == [(1000, 600), (500, 300), (250, 150), (125, 75), (62, 37)]   # max(1, n >> k)
    assert mips_ntc[-1] == (1, 1)
    assert ntc["ntc"]["material"]["roles"][-1] == "opacity"    # the base colour's alpha
    nm = json.loads((out / "nm" / "lib" / "gltf" / "manifest.json").read_text())
    assert (nm["neural_material"]["material"]["width"], nm["neural_material"]["material"]["height"]) == (1000, 600)


def test_an_undetectable_folder_is_one_line_listing_files_suffixes_and_syntax(tmp_path):
    (tmp_path / "lib" / "m").mkdir(parents=True)
    for name in ("rock_colour.png", "rock_bump.png"):
        (tmp_path / "lib" / "m" / name).write_bytes(encode_png(np.zeros((8, 8, 3))))
    (tmp_path / "pipeline.toml").write_text('[assets.m]\nmaterial = "lib/*"\n[stages.s]\ntype = "ntc"\ninputs = ["m"]\n')
    r = _bake(tmp_path / "pipeline.toml")
    assert r.exit_code == 2
    (line,) = [ln for ln in r.output.splitlines() if "error" in ln]
    for part in ("rock_bump.png", "rock_colour.png", "_basecolor", "_nor_gl", "channels = {"):
        assert part in line, part


def test_inspect_inputs_prints_role_file_channel_and_convention(tmp_path):
    write_set(tmp_path / "lib" / "ph", "polyhaven", reference_maps(8, 8))
    r = CliRunner().invoke(main, ["inspect-inputs", str(tmp_path / "lib")])
    assert r.exit_code == 0, r.output
    assert "roughness  <- rock_wall_arm_1k.png.g" in r.output
    assert "normal     <- rock_wall_nor_dx_1k.png  (normal DirectX -Y" in r.output
    assert "height     <- rock_wall_disp_1k.exr" in r.output


@pytest.mark.parametrize("layout", ["unreal", "unity-hdrp"])
def test_mipmap_writes_its_chains_in_an_engine_layout(tmp_path, layout):
    maps = reference_maps(32, 32)
    folder = write_set(tmp_path / "m", "gltf", maps)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["run", "mipmap", str(folder), "-o", str(out), "--param", "steps=2",
                                  "--param", "pairs=2", "--param", "eval_pairs=2", "--param", "format=uncompressed",
                                  "--param", f"layout={layout}"])
    assert r.exit_code == 0, r.output
    b = read_bundle(out)
    level0 = {n.split(".")[0]: np.frombuffer(t.levels[0][0], np.uint8).reshape(32, 32, -1)
              for n, t in b.textures.items() if n.endswith(".dds") and not n.startswith("toksvig_")}
    normal, packed = (level0["N"], level0["ORM"]) if layout == "unreal" else (level0["NormalMap"], level0["MaskMap"])
    flip = layout == "unreal"                                   # Unreal reads DirectX normals
    want_g = 1.0 - maps["normal"][..., 1] if flip else maps["normal"][..., 1]
    assert np.abs(normal[..., 1] / 255.0 - want_g).max() <= 1.5 / 255
    if layout == "unreal":
        for i, role in enumerate(("ao", "roughness", "metalness")):
            np.testing.assert_array_equal(packed[..., i], to_uint8(maps[role])[..., 0], err_msg=role)
    else:   # R metal, G AO, B detail mask, A smoothness
        np.testing.assert_array_equal(packed[..., 0], to_uint8(maps["metalness"])[..., 0])
        np.testing.assert_array_equal(packed[..., 1], to_uint8(maps["ao"])[..., 0])
        np.testing.assert_array_equal(packed[..., 3], 255 - to_uint8(maps["roughness"])[..., 0])
    names = {"unreal": {"D", "N", "ORM"}, "unity-hdrp": {"BaseColorMap", "NormalMap", "MaskMap"}}[layout]
    assert set(level0) == names
    baseline = {f["name"] for f in b.manifest["files"] if f["role"] == "baseline"}   # Toksvig, laid out alike
    assert baseline == {f"toksvig_{n}.dds" for n in names if n not in ("D", "BaseColorMap")}


def test_normal_convention_declared_per_asset_or_project_beats_the_name(tmp_path):
    write_set(tmp_path / "lib" / "m", "substance", reference_maps(8, 8))     # _Normal: OpenGL by name
    body = '[assets.m]\nmaterial = "lib/*"\n{asset}[stages.s]\ntype = "ntc"\ninputs = ["m"]\n'
    toml = tmp_path / "pipeline.toml"
    for project, asset, want in (("", "", "normal"), ("", 'normal_convention = "dx"\n', "normal.dx"),
                                 ('[project]\nnormal_convention = "dx"\n', "", "normal.dx")):
        toml.write_text(project + body.format(asset=asset))
        (a,) = load_pipeline(toml).assets["m"]
        assert want in a.files and ({"normal", "normal.dx"} - {want}).isdisjoint(a.files)
    toml.write_text(body.format(asset='normal_convention = "directx"\n'))
    with pytest.raises(UsageError, match="normal_convention: expected one of gl, dx"):
        load_pipeline(toml)


def test_a_jpeg_normal_map_off_unit_length_bakes_in_mipmap(tmp_path):
    """JPEG and resized normal maps are not unit length: mipmap renormalises them (as
    ntc and neural_material do) and the task log says how many texels it fixed."""
    from PIL import Image

    maps = reference_maps(32, 32)
    short = 0.5 + (maps["normal"] * 2 - 1) * 0.85             # every texel 15 % short, as a resize leaves them
    folder = tmp_path / "lib" / "rock"
    folder.mkdir(parents=True)
    Image.fromarray(to_uint8(short)).save(folder / "Rock_Normal.jpg", quality=80)
    t = load_textures({"normal": folder / "Rock_Normal.jpg"})
    assert t.renormalised > 32 * 32 // 2
    (tmp_path / "pipeline.toml").write_text(f'[assets.lib]\nmaterial = "lib/*"\n\n[stages.mips]\n{MIPS}\n')
    r = _bake(tmp_path / "pipeline.toml")
    assert r.exit_code == 0, r.output
    log = (tmp_path / "out" / "logs" / "mips" / "lib" / "rock.log").read_text()
    assert f"{t.renormalised} normal texel(s) off unit length, renormalised" in log


def test_a_plugin_stages_own_role_still_matches_its_plain_file_name(tmp_path):
    write_set(tmp_path, "unreal", reference_maps(8, 8))
    (tmp_path / "heightfield.png").write_bytes(encode_png(np.zeros((8, 8, 1))))
    found = detect_roles(tmp_path, plain_roles=("heightfield", "albedo"))
    assert found["heightfield"].path.name == "heightfield.png" and found["albedo"].path.name == "T_Barrel_D.png"
    assert "heightfield" not in detect_roles(tmp_path)


def test_a_single_channel_role_from_a_colour_file_says_which_channel_it_kept(tmp_path):
    """A roughness map saved as RGB with differing channels keeps its red channel and the
    task log says so, naming the declaration that picks another; a grey map saved as RGB
    (equal channels) is not ambiguous and says nothing."""
    maps = reference_maps(16, 16)
    folder = tmp_path / "lib" / "rock"
    folder.mkdir(parents=True)
    (folder / "albedo.png").write_bytes(encode_png(maps["albedo"]))
    rgb = np.concatenate([maps["roughness"], 1 - maps["roughness"], maps["roughness"] * 0.5], -1)
    (folder / "roughness.png").write_bytes(encode_png(rgb))
    (folder / "metalness.png").write_bytes(encode_png(np.repeat(maps["roughness"], 3, -1)))
    t = load_textures({"albedo": folder / "albedo.png", "roughness": folder / "roughness.png",
                       "metalness": folder / "metalness.png"})
    np.testing.assert_array_equal(t["roughness"], load_textures({"roughness": folder / "roughness.png"})["roughness"])
    assert len(t.notes) == 1 and t.notes[0].startswith("roughness: kept channel r of ")
    assert 'channels = { roughness = "roughness.g" }' in t.notes[0]
    nm = ('type = "neural_material"\ninputs = ["lib"]\n'
          'params = { steps = 1, batch = 64, hidden = 8, encoder_hidden = 8, eval_directions = 2 }')
    (tmp_path / "pipeline.toml").write_text(f'[assets.lib]\nmaterial = "lib/*"\n\n[stages.nm]\n{nm}\n')
    r = _bake(tmp_path / "pipeline.toml")
    assert r.exit_code == 0, r.output
    log = (tmp_path / "out" / "logs" / "nm" / "lib" / "rock.log").read_text()
    assert t.notes[0] in log and "channels = { metalness" not in log


def test_files_read_together_still_fail_on_the_first_unreadable_one_by_name(tmp_path):
    # a material's files decode on threads (materials._read_files); an unreadable one is
    # still one clear error naming that file and the role that asked for it
    rng = np.random.default_rng(2)
    for name in ("albedo", "normal", "roughness"):
        (tmp_path / f"{name}.png").write_bytes(encode_png(rng.random((16, 16, 3), np.float32)))
    (tmp_path / "metalness.png").write_bytes(b"not a png")
    files = {r: tmp_path / f"{r}.png" for r in ("albedo", "normal", "roughness", "metalness")}
    with pytest.raises(UsageError) as err:
        load_textures(files)
    assert "metalness.png" in str(err.value) and err.value.key == "metalness"
    files.pop("metalness")
    assert sorted(load_textures(files).maps) == ["albedo", "normal", "roughness"]
