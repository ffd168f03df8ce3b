"""Engine interop of the bundles (issue 16, item 5): ONNX opset, per-bundle shader
symbols, GLSL/HLSL that an independent compiler accepts, DDS an independent reader opens."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from bakery.formats.bundle import BundleWriter, symbol_prefix
from bakery.formats.dds import read_dds, uses_legacy_header, write_dds
from bakery.formats.texture import make_texture
from bakery.nn.encodings import FrequencyEncoding
from bakery.nn.network import NetworkSpec

SPEC = NetworkSpec(FrequencyEncoding(2, 3), (16, 8), 3, "relu", "sigmoid")
GLSLANG = shutil.which("glslangValidator")
needs_glslang = pytest.mark.skipif(GLSLANG is None, reason="needs glslangValidator (Debian glslang-tools)")


def _bundle(tmp_path, name, prefix, **kw):
    w = BundleWriter(tmp_path / name, symbol_prefix=prefix)
    params = SPEC.init_params(1)
    w.write_weights("weights.bin", SPEC, params)
    w.write_decoder_artifacts(SPEC, params=params, **kw)
    return w


def test_symbol_prefix_comes_from_stage_and_asset_and_is_unique():
    import re

    assert re.fullmatch(r"bk_neural_texture_textures_rust_[0-9a-f]{6}", symbol_prefix("neural_texture", "textures/rust"))
    assert symbol_prefix("ntc", "materials/brick-01").startswith("bk_ntc_materials_brick_01_")
    assert "__" not in symbol_prefix("a__b", "--c")
    # the same words from other names, or the same asset under other params: other prefixes
    assert symbol_prefix("ntc", "a_b") != symbol_prefix("ntc", "a b") != symbol_prefix("ntc_a", "b")
    assert symbol_prefix("ntc", "bricks", {"bpp": 4.0}) != symbol_prefix("ntc", "bricks", {"bpp": 8.0})
    assert symbol_prefix("ntc", "bricks", {"bpp": 4.0}) == symbol_prefix("ntc", "bricks", {"bpp": 4.0})


def test_onnx_opset_defaults_to_13_and_is_selectable(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    for opset, ir in ((None, 7), (15, 8), (17, 8)):
        w = _bundle(tmp_path, f"o{opset}", "bk_t", **({"onnx_opset": opset} if opset else {}))
        model = onnx.load(str(w.dir / "decoder.onnx"))
        assert [o.version for o in model.opset_import if o.domain == ""] == [opset or 13] and model.ir_version == ir
        x = np.random.default_rng(0).random((5, 2)).astype(np.float32)
        stored = SPEC.init_params(1).astype(np.float16).astype(np.float32)
        (y,) = ReferenceEvaluator(model).run(None, {"inputs": x})
        np.testing.assert_allclose(y, SPEC.forward(stored, x), atol=1e-5)
    with pytest.raises(ValueError, match="opset 12"):
        _bundle(tmp_path, "bad", "bk_t", onnx_opset=12)


@needs_glslang
def test_generated_glsl_wrapper_compiles_and_two_bundles_share_a_shader(tmp_path):
    a = _bundle(tmp_path, "a", "bk_texture_rust", shaders=("glsl", "hlsl"), onnx=False)
    b = _bundle(tmp_path, "b", "bk_texture_wood", shaders=("glsl", "hlsl"), onnx=False)
    glsl = (a.dir / "decoder.glsl").read_text()
    assert not any(l.startswith("#version") for l in glsl.splitlines()) and "bk_texture_rust_decode" in glsl and "bakery_" not in glsl
    r = subprocess.run([GLSLANG, "-V", "-o", str(tmp_path / "a.spv"), str(a.dir / "decoder.comp")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    # Both includes in one program: distinct names, distinct weight bindings.
    shared = tmp_path / "shared.comp"
    shared.write_text(f"""#version 450
#extension GL_GOOGLE_include_directive : require
#define BK_TEXTURE_RUST_WEIGHTS_BINDING 0
#define BK_TEXTURE_WOOD_WEIGHTS_BINDING 1
#include "a/decoder.glsl"
#include "b/decoder.glsl"
#include "a/decoder.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 2) writeonly buffer Out {{ float result[]; }};
void main() {{
    float x[2] = float[2](0.25, 0.75);
    float ya[3]; float yb[3];
    bk_texture_rust_decode(x, ya);
    bk_texture_wood_decode(x, yb);
    result[gl_GlobalInvocationID.x] = ya[0] + yb[2];
}}
""")
    r = subprocess.run([GLSLANG, "-V", "-o", str(tmp_path / "s.spv"), str(shared)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    hlsl = tmp_path / "shared.hlsl"
    hlsl.write_text((a.dir / "decoder.hlsl").read_text() + (b.dir / "decoder.hlsl").read_text() + """
StructuredBuffer<uint> rust_weights : register(t0);
StructuredBuffer<uint> wood_weights : register(t1);
RWStructuredBuffer<float> result : register(u0);
[numthreads(64, 1, 1)]
void main(uint3 id : SV_DispatchThreadID)
{
    float x[2] = { 0.25, 0.75 };
    float ya[3]; float yb[3];
    bk_texture_rust_decode(rust_weights, x, ya);
    bk_texture_wood_decode(wood_weights, x, yb);
    result[id.x] = ya[0] + yb[2];
}
""")
    r = subprocess.run([GLSLANG, "-D", "-V", "-S", "comp", "-e", "main", "-o", str(tmp_path / "h.spv"), str(hlsl)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _textures():
    rng = np.random.default_rng(3)
    rgba = rng.random((8, 8, 4)).astype(np.float32)
    from bakery.baselines import bcn

    out = {"rgba8_unorm": make_texture("rgba8_unorm", [rgba]),
           "rgba8_srgb": make_texture("rgba8_srgb", [rgba])}
    for fmt, c in (("bc1_unorm", 3), ("bc4_unorm", 1), ("bc5_unorm", 2), ("bc7_unorm", 4)):
        out[fmt] = make_texture(fmt, [bcn.encode(rgba[:, :, :c], fmt.split("_")[0])], width=8, height=8)
    out["array"] = make_texture("rgba8_unorm", [np.stack([rgba, rgba[::-1]])], array=True)
    return out, rgba


def test_dds_header_is_legacy_where_the_format_allows_and_reads_back():
    textures, _ = _textures()
    legacy = {k for k, t in textures.items() if uses_legacy_header(t)}
    assert legacy == {"rgba8_unorm", "bc1_unorm", "bc4_unorm", "bc5_unorm"}
    for name, tex in textures.items():
        data = write_dds(tex)
        assert (data[84:88] == b"DX10") == (name not in legacy), name
        back = read_dds(data)
        assert (back.format, back.levels, back.is_array) == (tex.format, tex.levels, tex.is_array), name


def test_an_independent_reader_opens_legacy_and_dx10_dds(tmp_path):
    from PIL import Image

    from bakery.baselines import bcn

    textures, rgba = _textures()
    for name in ("rgba8_unorm", "bc1_unorm", "bc4_unorm", "bc5_unorm", "bc7_unorm"):
        path = tmp_path / f"{name}.dds"
        path.write_bytes(write_dds(textures[name]))
        with Image.open(path) as im:
            im.load()
            a = np.asarray(im)
        assert im.size == (8, 8), name
        if name == "rgba8_unorm":
            np.testing.assert_array_equal(a, np.round(rgba * 255).astype(np.uint8))
        else:
            c = {"bc1_unorm": 3, "bc4_unorm": 1, "bc5_unorm": 2, "bc7_unorm": 4}[name]
            ours = np.round(bcn.decode(textures[name].levels[0][0], name.split("_")[0], 8, 8, channels=c) * 255)
            got = a.reshape(8, 8, -1)[:, :, :c].astype(np.float64)
            assert np.abs(got - ours.reshape(8, 8, -1)[:, :, :c]).max() <= 1, name
