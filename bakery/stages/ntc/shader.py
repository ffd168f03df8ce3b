"""Generated per-texel NTC decoder (Slang, which is also valid HLSL): fetch two latent
levels from the bundle's RGBA8 texture arrays, filter bilinearly by hand (the same
arithmetic as training, so any texel decodes alone and exactly), add the texel position
encoding and run the generated MLP over the bundle's weights.bin."""

from __future__ import annotations

from bakery.formats.shadergen import generate
from bakery.stages.ntc.objective import LatentGridSpec
from bakery.nn.network import NetworkSpec


def generate_ntc_decoder(grid: LatentGridSpec, spec: NetworkSpec, *, dtype: str = "float16") -> str:
    (gw0, gh0, f0), (gw1, gh1, f1) = grid.levels
    mlp = generate(spec, "slang", dtype=dtype, prefix="ntc_mlp")
    return mlp + f"""
// ---- NTC per-texel decode --------------------------------------------------------------
// latents0 / latents1: the bundle's latents_0 / latents_1 texture arrays (RGBA8 UNORM,
// feature f in layer f / 4, component f % 4). Call ntc_decode_texel(..., px, py, outputs)
// for integer texel coordinates of the {grid.width}x{grid.height} set.
static const uint NTC_WIDTH = {grid.width}u;
static const uint NTC_HEIGHT = {grid.height}u;
static const uint NTC_F0 = {f0}u;
static const uint NTC_F1 = {f1}u;
static const uint NTC_PE = {grid.pe_octaves}u;

float ntc_fetch(Texture2DArray<float4> t, int x, int y, uint f)
{{
    float4 v = t.Load(int4(x, y, int(f / 4u), 0));
    uint c = f % 4u;
    return c == 0u ? v.x : (c == 1u ? v.y : (c == 2u ? v.z : v.w));
}}

void ntc_sample(Texture2DArray<float4> t, uint gw, uint gh, float u, float v, uint features, uint first,
                inout float inputs[NTC_MLP_N_INPUTS])
{{
    float gx = u * float(gw) - 0.5;
    float gy = v * float(gh) - 0.5;
    float fx = floor(gx);
    float fy = floor(gy);
    float tx = gx - fx;
    float ty = gy - fy;
    int x0 = clamp(int(fx), 0, int(gw) - 1);
    int x1 = clamp(int(fx) + 1, 0, int(gw) - 1);
    int y0 = clamp(int(fy), 0, int(gh) - 1);
    int y1 = clamp(int(fy) + 1, 0, int(gh) - 1);
    float w0 = (1.0 - tx) * (1.0 - ty);
    float w1 = tx * (1.0 - ty);
    float w2 = (1.0 - tx) * ty;
    float w3 = tx * ty;
    for (uint f = 0u; f < features; f++)
    {{
        float s = 0.0;
        s += w0 * ntc_fetch(t, x0, y0, f);
        s += w1 * ntc_fetch(t, x1, y0, f);
        s += w2 * ntc_fetch(t, x0, y1, f);
        s += w3 * ntc_fetch(t, x1, y1, f);
        inputs[first + f] = s;
    }}
}}

float ntc_triangle(float x)
{{
    return abs(2.0 * frac(x) - 1.0);
}}

void ntc_decode_texel(StructuredBuffer<uint> weights, Texture2DArray<float4> latents0,
                      Texture2DArray<float4> latents1, uint px, uint py, out float outputs[NTC_MLP_N_OUTPUTS])
{{
    float inputs[NTC_MLP_N_INPUTS];
    float u = (float(px) + 0.5) / float(NTC_WIDTH);
    float v = (float(py) + 0.5) / float(NTC_HEIGHT);
    ntc_sample(latents0, {gw0}u, {gh0}u, u, v, NTC_F0, 0u, inputs);
    ntc_sample(latents1, {gw1}u, {gh1}u, u, v, NTC_F1, NTC_F0, inputs);
    for (uint k = 0u; k < NTC_PE; k++)
    {{
        float period = float(2u << k);
        float ax = (float(px) + 0.5) / period;
        float ay = (float(py) + 0.5) / period;
        inputs[NTC_F0 + NTC_F1 + 4u * k + 0u] = ntc_triangle(ax);
        inputs[NTC_F0 + NTC_F1 + 4u * k + 1u] = ntc_triangle(ax + 0.25);
        inputs[NTC_F0 + NTC_F1 + 4u * k + 2u] = ntc_triangle(ay);
        inputs[NTC_F0 + NTC_F1 + 4u * k + 3u] = ntc_triangle(ay + 0.25);
    }}
    ntc_mlp_decode(weights, inputs, outputs);
}}
"""
