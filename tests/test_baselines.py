"""Classical BCn baselines: real encoder round trips, byte sizes, cropping, same-bytes sizing."""

from __future__ import annotations

import math

import numpy as np
import pytest


from bakery.baselines import bcn  # noqa: E402
from bakery.baselines.material import (baseline_report, format_for, mean_psnr, reconstruct_normal,  # noqa: E402
                                       round_trip, same_bytes_size)
from bakery.baselines.resample import downsample_area, upsample_bilinear  # noqa: E402
from bakery.baselines.transcode import transcode_to_bcn  # noqa: E402
from bakery.imaging import psnr  # noqa: E402
from tests.images import photo_like  # noqa: E402


def smooth(h: int, w: int, c: int, seed: int = 0) -> np.ndarray:
    """Low-frequency image whose channels differ (so a channel swap would show)."""
    rng = np.random.default_rng(seed)
    y, x = np.meshgrid((np.arange(h) + 0.5) / h, (np.arange(w) + 0.5) / w, indexing="ij")
    chans = []
    for _ in range(c):
        fx, fy, px, py = rng.uniform(0.5, 2.0, 2).tolist() + rng.uniform(0, 6.28, 2).tolist()
        chans.append(0.5 + 0.4 * np.sin(2 * np.pi * fx * x + px) * np.cos(2 * np.pi * fy * y + py))
    return np.stack(chans, -1).astype(np.float32)


def normal_map(size: int, seed: int = 1) -> np.ndarray:
    """Storage-space normal map of a smooth height field (unit normals, z > 0)."""
    hgt = smooth(size, size, 1, seed)[:, :, 0] * 6.0
    gy, gx = np.gradient(hgt)
    n = np.stack([-gx, -gy, np.ones_like(hgt)], -1)
    n /= np.linalg.norm(n, axis=-1, keepdims=True)
    return (n * 0.5 + 0.5).astype(np.float32)



def material(size: int = 64) -> dict[str, np.ndarray]:
    img = photo_like(size, seed=3)
    return {"albedo": img, "normal": normal_map(size), "roughness": smooth(size, size, 1, 2),
            "metalness": (smooth(size, size, 1, 3) > 0.5).astype(np.float32),
            "ao": smooth(size, size, 1, 4), "height": smooth(size, size, 1, 5)}


@pytest.mark.parametrize("fmt,channels,bound", [("bc7", 3, 40.0), ("bc7", 4, 38.0), ("bc5", 2, 40.0),
                                                ("bc4", 1, 40.0), ("bc1", 3, 32.0)])
def test_round_trip_is_close_but_lossy(fmt, channels, bound):
    img = smooth(64, 96, channels, seed=channels)
    img[10:30, 40:60] = 0.9 - img[10:30, 40:60]             # a hard edge, so no format is lossless
    out = bcn.decode(bcn.encode(img, fmt), fmt, 96, 64, channels=channels)
    assert out.shape == (64, 96, channels) and out.dtype == np.float32
    p = psnr(img, out)
    assert bound < p < math.inf, f"{fmt} {channels}ch: {p:.2f} dB"


@pytest.mark.parametrize("fmt,channels", [("bc7", 3), ("bc5", 2), ("bc4", 1), ("bc1", 3)])
def test_deterministic_and_block_sizes(fmt, channels):
    img = smooth(64, 64, channels, seed=7)
    a, b = bcn.encode(img, fmt), bcn.encode(img.copy(), fmt)
    assert a == b
    per_block = {"bc7": 16, "bc5": 16, "bc4": 8, "bc1": 8}[fmt]
    assert len(a) == 16 * 16 * per_block == bcn.encoded_size(fmt, 64, 64)
    assert bcn.bc_format(fmt).bpp == per_block // 2


@pytest.mark.parametrize("fmt,channels", [("bc7", 3), ("bc5", 2), ("bc4", 1)])
def test_non_multiple_of_four_pads_and_crops(fmt, channels):
    h, w = 29, 37
    img = smooth(h, w, channels, seed=11) * 0.5 + 0.4        # mid-grey: black padding would cost precision
    blocks = bcn.encode(img, fmt)
    assert len(blocks) == 8 * 10 * bcn.bc_format(fmt).block_bytes
    out = bcn.decode(blocks, fmt, w, h)
    assert out.shape == (h, w, channels)
    assert psnr(img, out) > 40.0
    # the partial blocks (last column, last row) are as good as the rest: padding replicated the edge
    assert psnr(img[:, -1:], out[:, -1:]) > 40.0 and psnr(img[-1:], out[-1:]) > 40.0
    with pytest.raises(ValueError, match="needs"):
        bcn.decode(blocks[:-1], fmt, w, h)


def test_encode_checks_channels_and_format():
    with pytest.raises(ValueError, match="bc5 encodes 2"):
        bcn.encode(np.zeros((8, 8, 3), np.float32), "bc5")
    with pytest.raises(ValueError, match="unknown BCn"):
        bcn.encode(np.zeros((8, 8, 3), np.float32), "bc6h")


def test_bc5_normal_reconstructs_unit_normals():
    n = normal_map(64)
    blocks, out = round_trip("normal", n, "bc5")
    assert len(blocks) == 16 * 16 * 16 and out.shape == (64, 64, 3)
    v = out * 2.0 - 1.0
    assert np.abs(np.linalg.norm(v, axis=-1) - 1.0).max() < 1e-5
    assert (v[:, :, 2] > 0).all()
    assert 35.0 < psnr(n, out) < math.inf
    # reconstruction alone is exact up to 8-bit storage
    assert psnr(n, reconstruct_normal(n[:, :, :2])) > 45.0


def test_resample_filters():
    ramp = np.tile(((np.arange(64) + 0.5) / 64)[None, :, None], (8, 1, 1)).astype(np.float32)
    down = downsample_area(ramp, 16, 2)
    np.testing.assert_allclose(down[0, :, 0], ramp[0, :, 0].reshape(16, 4).mean(1), atol=1e-6)
    np.testing.assert_allclose(downsample_area(ramp, 13, 3).mean(), ramp.mean(), atol=1e-6)   # area keeps the mean
    # fractional ratios: each output texel is the overlap-weighted mean of the source span it covers
    a = np.random.default_rng(0).random((7, 10, 1))
    got = downsample_area(a, 4, 3)
    wy = np.array([2 / 3, 1.0, 2 / 3])                      # output row 1 spans source rows [2.33, 4.67]
    wx = np.array([1.0, 1.0, 0.5])                          # output column 2 spans source columns [5, 7.5]
    want = (wy[:, None] * wx[None, :] * a[2:5, 5:8, 0]).sum() / (wy.sum() * wx.sum())
    assert got[1, 2, 0] == pytest.approx(want, abs=1e-6)
    up = upsample_bilinear(down, 64, 8)[0, :, 0]
    np.testing.assert_allclose(up[2:-2], ramp[0, 2:-2, 0], atol=1e-6)    # linear data: exact away from the clamped edges
    assert up[0] == pytest.approx(down[0, 0, 0])


def test_report_full_resolution():
    tex = material(64)
    rep, images = baseline_report(tex, return_images=True)
    fmts = {r: t["format"] for r, t in rep["textures"].items()}
    assert fmts == {"albedo": "bc7", "normal": "bc5", "roughness": "bc4", "metalness": "bc4", "ao": "bc4", "height": "bc4"}
    assert rep["total"]["bpp"] == 32 and rep["total"]["bytes"] == 32 * 64 * 64 // 8
    for role, t in rep["textures"].items():
        assert t["psnr"] > 30.0, (role, t)
        assert images[role].shape[:2] == (64, 64)
    assert images["normal"].shape[2] == 3
    assert "same_bytes" not in rep


def test_same_bytes_smaller_for_lower_bpp_and_on_budget():
    tex = material(128)
    set_block_bytes = 16 + 16 + 4 * 8
    reps = {b: baseline_report(tex, b) for b in (2.0, 8.0)}
    lo, hi = reps[2.0]["same_bytes"], reps[8.0]["same_bytes"]
    assert lo["width"] * lo["height"] < hi["width"] * hi["height"] < 128 * 128
    for b, sb in ((2.0, lo), (8.0, hi)):
        budget = b * 128 * 128 / 8
        assert sb["budget_bytes"] == budget
        assert sb["width"] % 4 == 0 and sb["height"] % 4 == 0
        assert abs(sb["bytes"] - budget) <= (sb["width"] // 4) * set_block_bytes     # within one block row
    for role in tex:
        assert reps[2.0]["textures"][role]["same_bytes_psnr"] <= reps[8.0]["textures"][role]["same_bytes_psnr"] + 0.5
        assert reps[8.0]["textures"][role]["same_bytes_psnr"] < reps[8.0]["textures"][role]["psnr"]


def test_same_bytes_size_limits():
    assert same_bytes_size(256, 256, 64, 1.0) == (4, 4)               # never below one block
    assert same_bytes_size(256, 256, 64, 1e9) == (256, 256)           # never above full resolution
    w, h = same_bytes_size(1024, 256, 64, 64 * 64 * 16)               # aspect ratio kept
    assert (w, h) == (256, 64)


def test_same_bytes_at_full_budget_matches_full_resolution():
    tex = {"albedo": photo_like(64, seed=5), "roughness": smooth(64, 64, 1, 9)}
    rep = baseline_report(tex, 12.0)
    assert (rep["same_bytes"]["width"], rep["same_bytes"]["height"]) == (64, 64)
    for t in rep["textures"].values():
        assert t["same_bytes_psnr"] == t["psnr"]


def test_roles_and_mean():
    assert format_for("albedo", 3) == "bc7" and format_for("height", 1) == "bc4"
    assert format_for("emissive", 3) == "bc7" and format_for("mask", 1) == "bc4" and format_for("flow", 2) == "bc5"
    with pytest.raises(ValueError):
        format_for("weird", 5)
    # the PSNR of the mean MSE (1e-3, 0, 1e-4), not the mean of the dB values (35)
    assert mean_psnr([30.0, math.inf, 40.0]) == pytest.approx(-10 * math.log10(1.1e-3 / 3))
    assert mean_psnr([math.inf]) == math.inf and mean_psnr([9.0, 87.0]) < 12.1
    with pytest.raises(ValueError, match="differ in size"):
        baseline_report({"albedo": np.zeros((8, 8, 3), np.float32), "ao": np.zeros((4, 8, 1), np.float32)})


def test_transcode_writes_dds(tmp_path):
    from bakery.formats.bundle import BundleWriter
    from bakery.formats.dds import read_dds

    tex = material(64)
    tex["height"] = tex["height"][:62, :62]                   # any size; blocks cover the padding
    out = transcode_to_bcn(tex)
    assert out["albedo"][0] == "bc7_srgb" and out["normal"][0] == "bc5_unorm" and out["ao"][0] == "bc4_unorm"
    assert out["height"][2:] == (62, 62) and len(out["height"][1]) == 16 * 16 * 8
    writer = BundleWriter(tmp_path)
    for role, (fmt, blocks, w, h) in out.items():
        path = writer.write_texture(f"{role}.dds", fmt, [blocks], width=w, height=h)
        back = read_dds(path.read_bytes())
        assert back.format.name == fmt and back.levels[0][0] == blocks
    dec = bcn.decode(out["normal"][1], "bc5", 64, 64)
    assert psnr(tex["normal"][:, :, :2], dec) > 35.0


@pytest.mark.parametrize("fmt,channels", [("bc7", 3), ("bc7", 4), ("bc1", 3)])
def test_bands_on_threads_give_the_bytes_of_one_encode(fmt, channels, monkeypatch):
    """A large BC7/BC1 surface encodes in bands of block rows on several threads; every
    block encodes on its own, so the bytes are those of one call (odd sizes padded alike)."""
    image = np.random.default_rng(7).random((61, 37, channels)).astype(np.float32)
    whole = bcn.encode(image, fmt)
    monkeypatch.setattr(bcn, "PARALLEL_FROM", 0)
    monkeypatch.setattr(bcn.os, "cpu_count", lambda: 4)
    assert len(bcn._band_rows(fmt, 40, 64)) == 3
    assert bcn.encode(image, fmt) == whole
