"""Stage ``ntc`` on a small material: rate accounting, quality over a trivial bound,
random access through the generated per-texel shader, and bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bakery.cli import main
from bakery.formats.images import encode_png, load_image, psnr
from bakery.formats.reader import read_bundle
from bakery.stages.ntc.objective import LatentGridSpec
from bakery.stages.ntc.decode import decode_image
from bakery.materials import ROLES

ROOT = Path(__file__).resolve().parent.parent
SIZE = 64
SMALL = ["--param", "bpp=18", "--param", "steps=200", "--param", "batch=4096", "--param", "hidden=16",
         "--param", "layers=1", "--param", "latent_lr=0.05", "--param", "lr=0.01"]


def _material(folder: Path, size: int = SIZE) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for f in sorted((ROOT / "assets" / "materials" / "bricks").glob("*.png")):
        img = load_image(f)[:size, :size]
        (folder / f.name).write_bytes(encode_png(img))
    return folder


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, device):
    root = tmp_path_factory.mktemp("ntc")
    mat = _material(root / "bricks")
    out = root / "out"
    r = _run("run", "ntc", mat, "-o", out, "--seed", 2, *SMALL)
    assert r.exit_code == 0, r.output
    return mat, out


def test_rate_is_counted_exactly(bundle):
    _, out = bundle
    m = json.loads((out / "manifest.json").read_text())
    rate, lat = m["ntc"]["rate"], m["ntc"]["latents"]
    latent_bits = sum(l["width"] * l["height"] * l["features"] for l in lat["levels"]) * lat["bits"]
    assert rate["latent_bits"] == latent_bits
    assert rate["decoder_bits"] == m["networks"]["decoder"]["param_count"] * 16
    assert m["metrics"]["bpp"] == pytest.approx((latent_bits + rate["decoder_bits"]) / SIZE**2, abs=1e-4)
    assert m["metrics"]["bpp"] <= 18


def test_baseline_is_reported_at_full_and_equal_bytes(bundle):
    _, out = bundle
    m = json.loads((out / "manifest.json").read_text())
    base = m["ntc"]["baseline"]
    assert {t["format"] for t in base["textures"].values()} == {"bc7", "bc5", "bc4"}
    assert base["total"]["bpp"] == 32
    assert base["same_bytes"]["neural_bpp"] == pytest.approx(m["metrics"]["bpp"], abs=1e-4)
    assert abs(base["same_bytes"]["bpp"] - m["metrics"]["bpp"]) / m["metrics"]["bpp"] < 0.15
    assert base["textures"]["albedo"]["same_bytes_psnr"] < base["textures"]["albedo"]["psnr"]


def test_quality_beats_a_trivial_bound(bundle):
    """Every texture decodes better than its own mean colour would (the trivial codec),
    and the set as a whole clearly so - after only 200 CPU steps of a tiny decoder."""
    mat, out = bundle
    m = json.loads((out / "manifest.json").read_text())
    gains = []
    for role, score in m["metrics"]["psnr_db"].items():
        ref = load_image(mat / f"{role}.png")
        if ref.std() < 1e-3:  # flat map (metalness of bricks): must be near exact
            assert score > 35, role
            continue
        trivial = psnr(np.broadcast_to(ref.mean((0, 1)), ref.shape), ref)
        assert score > trivial + 1.0, (role, score, trivial)
        gains.append(score - trivial)
    assert np.mean(gains) > 5.0, gains


def test_cpu_reference_decoder_matches_the_trainer(bundle):
    mat, out = bundle
    b = read_bundle(out)
    m = b.manifest["ntc"]
    grid = LatentGridSpec(**{k: m["latents"][k] for k in
                             ("width", "height", "scale", "features0", "features1", "bits", "pe_octaves")})
    top = (1 << grid.bits) - 1
    levels = []
    for k in range(2):
        t = b.textures[f"latents_{k}.dds"]
        arr = np.stack([t.array(0, i) for i in range(t.layer_count)], 2)  # [H, W, layers, 4]
        levels.append(np.round(arr.reshape(arr.shape[0], arr.shape[1], -1).astype(np.float64) * top / 255).astype(np.uint8))
    decoded = decode_image(grid, levels, b.network, b.params)
    preview = load_image(out / "preview_albedo.png")
    a, n = m["material"]["channels"]["albedo"]
    # fp16 weights vs the trainer's fp32: the previews are 8-bit, allow a couple of steps
    assert np.abs(np.clip(decoded[..., a:a + n], 0, 1) - preview).max() < 3.5 / 255


def test_random_texels_through_generated_shader_equal_full_decode(bundle, device):
    import slangpy as spy

    _, out = bundle
    b = read_bundle(out)
    m = b.manifest["ntc"]
    grid = LatentGridSpec(**{k: m["latents"][k] for k in
                             ("width", "height", "scale", "features0", "features1", "bits", "pe_octaves")})
    textures = []
    levels = []
    top = (1 << grid.bits) - 1
    for k in range(2):
        t = b.textures[f"latents_{k}.dds"]
        layers = np.stack([t.array(0, i) for i in range(t.layer_count)])  # [L, H, W, 4] uint8
        tex = device.spy.create_texture(
            type=spy.TextureType.texture_2d_array, format=spy.Format.rgba8_unorm, width=t.width, height=t.height,
            array_length=t.layer_count, usage=spy.TextureUsage.shader_resource | spy.TextureUsage.copy_destination)
        for i in range(t.layer_count):
            tex.copy_from_numpy(np.ascontiguousarray(layers[i]), layer=i)
        textures.append(tex)
        levels.append(np.round(layers.transpose(1, 2, 0, 3).reshape(t.height, t.width, -1).astype(np.float64)
                               * top / 255).astype(np.uint8))
    full = decode_image(grid, levels, b.network, b.params)

    rng = np.random.default_rng(0)
    n = 200
    px = rng.integers(0, grid.width, n).astype(np.uint32)
    py = rng.integers(0, grid.height, n).astype(np.uint32)
    c = b.network.n_outputs
    src = (out / "ntc_decode.slang").read_text() + f"""
StructuredBuffer<uint> g_weights; Texture2DArray<float4> g_l0; Texture2DArray<float4> g_l1;
StructuredBuffer<uint> g_px; StructuredBuffer<uint> g_py; RWStructuredBuffer<float> g_out;
[shader("compute")][numthreads(32, 1, 1)]
void main(uint3 tid: SV_DispatchThreadID) {{
    if (tid.x >= {n}u) return;
    float o[NTC_MLP_N_OUTPUTS];
    ntc_decode_texel(g_weights, g_l0, g_l1, g_px[tid.x], g_py[tid.x], o);
    for (uint k = 0u; k < NTC_MLP_N_OUTPUTS; k++) g_out[tid.x * NTC_MLP_N_OUTPUTS + k] = o[k];
}}
"""
    from bakery.nn.parameters import make_buffer

    kernel = device.kernel(src, "main")
    wbytes = (out / "weights.bin").read_bytes()
    wbuf = make_buffer(device, np.frombuffer(wbytes + b"\0" * (-len(wbytes) % 4), np.uint32))
    obuf = make_buffer(device, np.zeros(n * c, np.float32))
    device.submit(lambda enc: kernel.dispatch([n, 1, 1], vars={
        "g_weights": wbuf, "g_l0": textures[0], "g_l1": textures[1], "g_px": make_buffer(device, px),
        "g_py": make_buffer(device, py), "g_out": obuf}, command_encoder=enc))
    device.wait()
    got = obuf.to_numpy().view(np.float32)[: n * c].reshape(n, c)
    np.testing.assert_allclose(got, full[py, px], atol=2e-4)


@pytest.mark.parametrize("case", ["sizes", "bpp_range", "too_low_bpp", "unknown_role", "unreadable"])
def test_bad_material_input(case, tmp_path):
    mat = _material(tmp_path / "m", 16)
    args = ["run", "ntc", mat, "-o", tmp_path / "out", "--param", "steps=1", "--param", "baseline=false"]
    expect = {"sizes": "must share a size", "bpp_range": "bpp", "too_low_bpp": "too low",
              "unknown_role": "", "unreadable": "albedo"}[case]
    if case == "sizes":
        (mat / "ao.png").write_bytes(encode_png(np.zeros((8, 8, 1), np.float32)))
    elif case == "bpp_range":
        args += ["--param", "bpp=40"]
    elif case == "too_low_bpp":
        args += ["--param", "bpp=0.5"]
    elif case == "unknown_role":
        shutil.copy(mat / "ao.png", mat / "sheen.png")
        args = ["run", "ntc", mat / "albedo.png", mat / "sheen.png", "-o", tmp_path / "out"]
    else:
        (mat / "albedo.png").write_bytes(b"\x89PNG broken")
    r = _run(*args)
    assert r.exit_code == 2, r.output
    lines = [l for l in r.output.splitlines() if l.strip()]
    assert len(lines) == 1 and expect in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_roles_are_known():
    assert list(ROLES)[:6] == ["albedo", "normal", "roughness", "metalness", "ao", "height"]


def test_target_psnr_picks_the_cheapest_rate_that_reaches_it(tmp_path):
    mat = _material(tmp_path / "m")
    out = tmp_path / "out"
    target = 22.0
    r = _run("run", "ntc", mat, "-o", out, "--param", "target_psnr=22", "--param", "steps=100",
             "--param", "batch=4096", "--param", "hidden=16", "--param", "layers=1", "--param", "latent_lr=0.05",
             "--param", "lr=0.01", "--param", "baseline=false")
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    tried = m["ntc"]["rate"]["tried"]
    assert len(tried) >= 2
    chosen = m["metrics"]["bpp"]
    reached = [t for t in tried if t["mean_psnr_db"] >= target]
    if reached:
        assert m["metrics"]["mean_psnr_db"] >= target
        assert chosen == pytest.approx(min(t["bpp"] for t in reached), abs=1e-3)
    else:
        assert chosen == pytest.approx(max(t["bpp"] for t in tried), abs=1e-3)


def test_transcode_writes_bcn_textures(tmp_path):
    from bakery.formats.dds import read_dds

    mat = _material(tmp_path / "m")
    out = tmp_path / "out"
    r = _run("run", "ntc", mat, "-o", out, "--param", "transcode=bcn", "--param", "steps=20", "--param",
             "bpp=18", "--param", "hidden=16", "--param", "layers=1", "--param", "baseline=false")
    assert r.exit_code == 0, r.output
    formats = {p.stem: read_dds((p).read_bytes()).format.name for p in out.glob("transcoded_*.dds")}
    assert formats == {"transcoded_albedo": "bc7_srgb", "transcoded_normal": "bc5_unorm",
                       "transcoded_roughness": "bc4_unorm", "transcoded_metalness": "bc4_unorm",
                       "transcoded_ao": "bc4_unorm", "transcoded_height": "bc4_unorm"}
