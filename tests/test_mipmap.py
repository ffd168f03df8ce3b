"""Stage ``mipmap``: chain geometry, classical filters, the rendered reference, training
on a map box filtering is known to fail on, outputs read back level by level,
determinism, and bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bakery.cli import main
from bakery.errors import UsageError
from bakery.formats.images import encode_png
from bakery.nn.optimizers import Adam
from bakery.nn.trainer import TrainConfig, Trainer
from bakery.shading import brdf
from bakery.stages.mipmap.chain import MipChain, check_size
from bakery.stages.mipmap.filters import filter_level
from bakery.imaging import srgb_to_linear
from bakery.stages.mipmap.material import MipMaterial, load_mip_material
from bakery.stages.mipmap.objective import MipFit, tonemap

SMALL = ["--param", "steps=40", "--param", "pairs=2", "--param", "eval_pairs=8"]


def alternating_slopes(size: int, angle: float = 0.5) -> np.ndarray:
    """Columns tilted +angle, -angle, ... about y: every 2x2 box averages to flat."""
    sign = np.where(np.arange(size) % 2 == 0, 1.0, -1.0)[None, :].repeat(size, 0)
    n = np.stack([sign * np.sin(angle), np.zeros_like(sign), np.full_like(sign, np.cos(angle))], -1)
    return n.astype(np.float32)


def _material(normal: np.ndarray, roughness: float = 0.25, albedo: float = 0.5) -> MipMaterial:
    h, w = normal.shape[:2]
    return MipMaterial(normal=normal, roughness=np.full((h, w, 1), roughness, np.float32),
                       albedo=np.full((h, w, 3), albedo, np.float32), metalness=np.zeros((h, w, 1), np.float32),
                       roughness_given=False)


def _write_material(folder: Path, normal: np.ndarray, *, roughness=True, albedo=True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "normal.png").write_bytes(encode_png(normal * 0.5 + 0.5))
    h, w = normal.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    if roughness:
        (folder / "roughness.png").write_bytes(encode_png((0.3 + 0.4 * xx)[..., None]))
    if albedo:
        (folder / "albedo.png").write_bytes(encode_png(np.stack([0.6 + 0.2 * yy, 0.4 + 0 * yy, 0.3 + 0.2 * xx], -1)))
    return folder


def _bumpy(size: int) -> np.ndarray:
    y, x = np.mgrid[0:size, 0:size] * (2 * np.pi / size)
    n = np.stack([0.6 * np.sin(5 * x) * np.cos(3 * y), 0.5 * np.cos(7 * y), np.ones_like(x)], -1)
    return (n / np.linalg.norm(n, axis=-1, keepdims=True)).astype(np.float32)


def _run(args):
    return CliRunner().invoke(main, [str(a) for a in args])


# -- geometry, filters ----------------------------------------------------------------
def test_chain_geometry_packs_levels_one_after_another():
    c = MipChain.for_size(64, 32)
    assert c.deepest == 3                              # 32 -> 16 -> 8 -> 4
    assert [c.shape(l) for l in range(4)] == [(32, 64), (16, 32), (8, 16), (4, 8)]
    assert c.offsets == [0, 2048, 2560, 2688, 2720]
    assert c.mip_texels == 2720 - 2048
    levels = [np.full(c.shape(l) + (2,), l, np.float32) for l in range(1, 4)]
    back = c.unpack(c.pack(levels), 2)
    assert all(np.array_equal(a, b) for a, b in zip(levels, back))
    assert MipChain.for_size(64, 64, levels=2).deepest == 2


@pytest.mark.parametrize("w,h", [(49, 48), (64, 39), (4, 4)])
def test_size_policy_refuses_what_cannot_halve_exactly(w, h):
    with pytest.raises(UsageError, match="normal") as e:
        check_size(w, h, where="m/normal.png", key="normal")
    assert "m/normal.png" in e.value.one_line()


def test_non_power_of_two_sizes_train_the_levels_that_halve_exactly():
    c = MipChain.for_size(1000, 600)                   # 1000 = 125 * 2^3, 600 = 75 * 2^3
    assert c.deepest == 3 and c.shape(3) == (75, 125)
    assert MipChain.for_size(48, 40).deepest == 3      # 48x40 -> 24x20 -> 12x10 -> 6x5
    assert MipChain.for_size(96, 96).deepest == 4      # ends at a smaller side of 6 (>= 4)


def test_filters_widen_the_lobe_only_where_normals_spread():
    flat = np.zeros((8, 8, 3), np.float32)
    flat[..., 2] = 1
    rough = np.full((8, 8, 1), 0.3, np.float32)
    for kind in ("box", "toksvig", "vmf"):
        n, r = filter_level(flat, rough, 2, kind)
        np.testing.assert_allclose(r, 0.3, atol=1e-5)
        np.testing.assert_allclose(n[..., 2], 1.0, atol=1e-6)
    n, r_box = filter_level(alternating_slopes(8), rough, 1, "box")
    np.testing.assert_allclose(n[..., 2], 1.0, atol=1e-6)   # the slopes cancel: box sees a flat surface
    for kind in ("toksvig", "vmf"):
        _, r = filter_level(alternating_slopes(8), rough, 1, kind)
        assert np.all(r > r_box + 0.1)


# -- the rendered reference ----------------------------------------------------------
def test_reference_is_the_area_average_of_the_level0_render(device):
    normal = _bumpy(32)
    mat = _material(normal)
    chain = MipChain.for_size(32, 32)
    fit = MipFit(device, mat, chain, pairs=2, light=3.0, lr=0.01, roughness_lr=0.01)
    wi, wo = np.array([0.3, -0.2, 0.93]), np.array([-0.25, 0.1, 0.96])
    reference, renders = fit.render({"box": fit.baseline("box")}, pair=(wi, wo))
    wi, wo = wi / np.linalg.norm(wi), wo / np.linalg.norm(wo)
    level0 = 3.0 * brdf.brdf_cos(mat.albedo, mat.normal, mat.roughness[..., 0], mat.metalness[..., 0], wi, wo)
    for level in range(1, chain.deepest + 1):
        f = 1 << level
        want = tonemap(level0.reshape(32 // f, f, 32 // f, f, 3).mean(axis=(1, 3)))
        np.testing.assert_allclose(reference[level - 1], want, atol=2e-5)
        n, r = filter_level(mat.normal, mat.roughness, level, "box")
        box = tonemap(3.0 * brdf.brdf_cos(_block(mat.albedo, level), n, r[..., 0], 0.0, wi, wo))
        np.testing.assert_allclose(renders["box"][level - 1], box, atol=2e-5)


def _block(a, level):
    f = 1 << level
    h, w, c = a.shape
    return a.reshape(h // f, f, w // f, f, c).mean(axis=(1, 3))


# -- training ---------------------------------------------------------------------------
def test_train_step_gradient_matches_finite_differences_of_the_numpy_loss(device):
    from bakery.shading.directions import draw_directions

    mat = _material(_bumpy(8), roughness=0.45, albedo=0.3)
    chain = MipChain.for_size(8, 8)                              # one trained level, 4x4
    fit = MipFit(device, mat, chain, pairs=3, light=3.0, lr=0.01, roughness_lr=0.01, init="box")
    trainer = Trainer(device, None, fit, TrainConfig(steps=1, batch=fit.batch, seed=11))
    grads = trainer.accumulate_gradients()   # normal offsets (48), then roughness log-factors (16)
    wi = draw_directions(11, 3, step=0, stream=0, min_cos=0.05)[:, None, None, :]
    wo = draw_directions(11, 3, step=0, stream=1, min_cos=0.05)[:, None, None, :]
    level0 = 3.0 * brdf.brdf_cos(mat.albedo, mat.normal, mat.roughness[..., 0], 0.0, wi, wo)
    target = tonemap(level0.reshape(3, 4, 2, 4, 2, 3).mean(axis=(2, 4)))
    n0, r0 = filter_level(mat.normal, mat.roughness, 1, "box")
    albedo = _block(mat.albedo, 1)

    scale = np.maximum(r0 ** 2, 0.02)                           # offsets are in units of the start alpha

    def loss(x):
        n = n0 + scale * x[:48].reshape(4, 4, 3)
        r = np.clip(r0[..., 0] * np.exp(x[48:].reshape(4, 4)), 0.02, 1.0)
        render = tonemap(3.0 * brdf.brdf_cos(albedo, n, r, 0.0, wi, wo))
        return ((render - target) ** 2).sum(axis=-1).mean(axis=0).sum()  # mean over pairs, per texel summed

    x = np.zeros(64)
    fd = np.zeros_like(x)
    for k in range(x.size):
        e = np.zeros_like(x)
        e[k] = 1e-6
        fd[k] = (loss(x + e) - loss(x - e)) / 2e-6
    np.testing.assert_allclose(grads, fd, atol=2e-4 * np.abs(fd).max())
    assert np.abs(fd).max() > 1e-3


def test_training_beats_box_on_alternating_slopes_on_held_out_directions(device):
    mat = _material(alternating_slopes(16, angle=0.5), roughness=0.3, albedo=0.1)  # glossy: highlights dominate
    chain = MipChain.for_size(16, 16)
    fit = MipFit(device, mat, chain, pairs=4, light=3.0, lr=0.01, roughness_lr=0.01)
    Trainer(device, None, fit, TrainConfig(steps=150, batch=fit.batch, optimizer=Adam(lr=0.01),
                                           schedule="cosine", seed=3)).train()
    mse = fit.held_out_mse({"trained": fit.trained(), "box": fit.baseline("box"),
                            "toksvig": fit.baseline("toksvig")}, 256)
    for level in range(chain.deepest):
        t, b, k = mse["trained"][level], mse["box"][level], mse["toksvig"][level]
        assert t < 0.6 * b and t < 0.85 * k, f"level {level + 1}: trained {t:.3g}, box {b:.3g}, toksvig {k:.3g}"
    normals, rough, _ = fit.trained()
    np.testing.assert_allclose(np.linalg.norm(normals, axis=1), 1.0, atol=1e-5)
    assert rough.mean() > 0.75  # the lobe widened to stand in for the slopes the box lost


# -- the stage end to end -----------------------------------------------------------------
@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    root = tmp_path_factory.mktemp("mip")
    folder = _write_material(root / "bumpy", _bumpy(32))
    out = root / "out"
    r = _run(["run", "mipmap", folder, "-o", out, *SMALL])
    assert r.exit_code == 0, r.output
    return folder, out


def test_report_section_shows_levels_against_box_and_toksvig(bundle):
    from report_check import assert_section

    _, out = bundle
    html = assert_section(out, images=4)  # the RMSE-per-level plot and a render per level
    assert "RMSE vs Toksvig, levels 1\u20134" in html and "box/Toksvig" in html


def test_stage_reports_every_level_against_every_baseline(bundle):
    _, out = bundle
    m = json.loads((out / "manifest.json").read_text())
    levels = m["metrics"]["levels"]
    assert [row["level"] for row in levels] == [1, 2, 3]
    for row in levels:
        for key in ("trained_rmse", "box_rmse", "toksvig_rmse", "vmf_rmse", "trained_flip", "box_flip"):
            assert np.isfinite(row[key]) and row[key] >= 0
    assert m["mipmap"]["settings"] == {"steps": 40, "pairs": 2, "eval_pairs": 8}
    assert m["mipmap"]["source"]["roughness_map"] is True
    for level in (1, 2, 3):
        assert (out / f"preview_level{level}.png").is_file()


def test_dds_and_ktx2_mip_chains_read_back_level_by_level(bundle):
    from bakery.baselines import bcn
    from bakery.formats.dds import read_dds
    from bakery.formats.ktx2 import read_ktx2

    folder, out = bundle
    normal0 = np.asarray(__import__("PIL.Image", fromlist=["Image"]).open(folder / "normal.png"), np.float32) / 255
    for name, reader in (("normal.dds", read_dds), ("normal.ktx2", read_ktx2)):
        tex = reader((out / name).read_bytes())
        assert tex.format.name == "bc5_unorm" and tex.level_count == 4 and (tex.width, tex.height) == (32, 32)
        for level in range(4):
            h, w = tex.level_shape(level)
            xy = bcn.decode(tex.levels[level][0], "bc5", w, h) * 2 - 1
            assert xy.shape == (h, w, 2)
            assert np.all(np.sum(xy ** 2, -1) <= 1.05)        # z = sqrt(1 - x^2 - y^2) is real
            if level == 0:                 # level 0 is the source map, within BC5's block error
                err = np.abs(xy - (normal0[..., :2] * 2 - 1))
                assert err.mean() < 0.03 and err.max() < 0.1
    rough = read_dds((out / "roughness.dds").read_bytes())
    assert rough.format.name == "bc4_unorm" and rough.level_count == 4
    albedo = read_dds((out / "albedo.dds").read_bytes())
    assert albedo.format.name == "bc7_srgb" and albedo.level_count == 4


def test_uncompressed_chain_holds_the_trained_texels(tmp_path, device):
    from bakery.formats.dds import read_dds

    folder = _write_material(tmp_path / "m", _bumpy(16), roughness=False, albedo=False)
    out = tmp_path / "out"
    r = _run(["run", "mipmap", folder, "-o", out, *SMALL, "--param", "format=uncompressed",
              "--param", "roughness=0.7"])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    assert m["mipmap"]["source"]["roughness_map"] is False
    tex = read_dds((out / "normal.dds").read_bytes())
    assert tex.format.name == "rgba8_unorm" and tex.level_count == 3
    for level in range(3):
        n = tex.array(level).astype(np.float32)[..., :3] / 255 * 2 - 1
        np.testing.assert_allclose(np.linalg.norm(n, axis=-1), 1.0, atol=0.02)
    rough = read_dds((out / "roughness.dds").read_bytes())
    assert abs(rough.array(0).mean() / 255 - 0.7) < 0.01      # the constant stood in for the map

    # the baseline ships beside it: the Toksvig chain, each level as filters.py computes it
    assert {f["name"]: f["role"] for f in m["files"] if f["name"].startswith("toksvig_")} == {
        "toksvig_normal.dds": "baseline", "toksvig_roughness.dds": "baseline"}
    material = load_mip_material({"normal": folder / "normal.png"}, roughness=0.7, albedo=0.5)
    toksvig = read_dds((out / "toksvig_roughness.dds").read_bytes())
    assert toksvig.format.name == "r8_unorm" and toksvig.level_count == 3
    for level in (1, 2):
        want = filter_level(material.normal, material.roughness, level, "toksvig")[1]
        box = filter_level(material.normal, material.roughness, level, "box")[1]
        got = toksvig.array(level).astype(np.float32)[..., :1] / 255
        assert np.abs(got - want).max() <= 0.6 / 255 and np.abs(want - box).max() > 0.02, level


def test_rectangular_power_of_two_maps_are_accepted(tmp_path):
    from bakery.formats.ktx2 import read_ktx2

    folder = _write_material(tmp_path / "wide", np.ascontiguousarray(_bumpy(32)[:16]))
    out = tmp_path / "out"
    r = _run(["run", "mipmap", folder, "-o", out, *SMALL])
    assert r.exit_code == 0, r.output
    tex = read_ktx2((out / "roughness.ktx2").read_bytes())
    assert (tex.width, tex.height, tex.level_count) == (32, 16, 3)   # 32x16, 16x8, 8x4
    m = json.loads((out / "manifest.json").read_text())
    assert [(l["width"], l["height"]) for l in m["metrics"]["levels"]] == [(16, 8), (8, 4)]


# -- bad input ------------------------------------------------------------------------------
def _no_direction(size):
    n = _bumpy(size)
    n[3, 5] = 0.0
    return n


@pytest.mark.parametrize("case,normal,message", [
    ("odd", _bumpy(25), "has an odd side"),
    ("rect_odd", np.ascontiguousarray(_bumpy(32)[:21]), "has an odd side"),
    ("tiny", _bumpy(4), "too small"),
    ("no_direction", _no_direction(16), r"1 texel\(s\) have no direction \(first at x=5, y=3"),
])
def test_bad_normal_maps_fail_with_one_line_and_write_nothing(tmp_path, case, normal, message):
    folder = _write_material(tmp_path / case, normal, roughness=False, albedo=False)
    out = tmp_path / "out"
    r = _run(["run", "mipmap", folder, "-o", out, *SMALL])
    assert r.exit_code == 2, r.output
    line = r.output.strip().splitlines()[-1]
    assert "normal.png" in line and "normal" in line
    assert __import__("re").search(message, line), line
    assert not out.exists()


def test_mismatched_roughness_size_names_the_file(tmp_path):
    folder = _write_material(tmp_path / "m", _bumpy(16), roughness=False, albedo=False)
    (folder / "roughness.png").write_bytes(encode_png(np.full((8, 8, 1), 0.5)))
    r = _run(["run", "mipmap", folder, "-o", tmp_path / "out", *SMALL])
    assert r.exit_code == 2 and "roughness.png" in r.output and "differs" in r.output


def test_missing_normal_map_and_unknown_param_are_usage_errors(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "roughness.png").write_bytes(encode_png(np.full((16, 16, 1), 0.5)))
    with pytest.raises(UsageError, match="normal map is required"):
        load_mip_material({"roughness": folder / "roughness.png"}, roughness=0.5, albedo=0.5)
    folder2 = _write_material(tmp_path / "m2", _bumpy(16))
    r = _run(["run", "mipmap", folder2, "-o", tmp_path / "out", "--param", "sharpness=2"])
    assert r.exit_code == 2 and "sharpness" in r.output


def test_albedo_is_decoded_from_srgb():
    np.testing.assert_allclose(srgb_to_linear(np.array([0.0, 0.5, 1.0])), [0.0, 0.21404, 1.0], atol=1e-4)


def test_progress_shows_the_training_loss(tmp_path):
    """Progress lines carry the loss of the chain trained so far, not only a step count."""
    folder = _write_material(tmp_path / "bumpy", _bumpy(16))
    r = _run(["run", "mipmap", folder, "-o", tmp_path / "out", "--param", "steps=8", "--param", "pairs=2",
              "--param", "eval_pairs=2"])
    assert r.exit_code == 0, r.output
    losses = [float(v) for v in re.findall(r"mipmap bumpy: 8/8 loss=(\S+)", r.output)]
    assert losses and all(0.0 < v < 1.0 for v in losses), r.output


def test_level_filters_share_block_means_and_match_filter_level():
    from bakery.stages.mipmap.filters import FILTERS, LevelFilters

    rng = np.random.default_rng(7)
    normal = rng.normal(size=(32, 32, 3)).astype(np.float32)
    normal /= np.linalg.norm(normal, axis=-1, keepdims=True)
    rough = rng.random((32, 32, 1)).astype(np.float32)
    filters = LevelFilters(normal, rough)
    for level in (1, 2, 4):
        for kind in FILTERS:
            got, want = filters(level, kind), filter_level(normal, rough, level, kind)
            assert all(np.array_equal(g, w) and g.dtype == w.dtype for g, w in zip(got, want))
    assert filters(1, "box") is filters(1, "box")   # filtered once
    with pytest.raises(ValueError, match="unknown mip filter"):
        filters(1, "gauss")
