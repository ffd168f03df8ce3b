"""Generated NTC decoders in Slang, HLSL, GLSL and WebGL2 (GLSL ES 3.00), from one template:
a per-texel decode (inference on sample) and, in Slang, HLSL and GLSL, a compute shader
that decodes a whole mip level into a texture array (inference on load).

Each fetches the two latent levels a colour mip reads (packed codes from ``latents.bin``
bound as a uint buffer and filtered bilinearly by hand, exactly as in training; or BC4
latents from ``latents.dds`` through a bilinear clamp sampler, filtered by the hardware),
adds the texel position encoding and the LOD, and runs the generated MLP over the
bundle's ``weights.bin`` (bakery.formats.shadergen). The languages differ only in
resource declarations and a handful of spellings, filled into the one template below;
tables (level sizes, offsets) are baked in as ternary chains, which all four accept.
Every global name starts with the bundle's symbol prefix (``bk_ntc_bricks_...``), so the
decoders of several bundles link into one program.
"""

from __future__ import annotations

import re

from bakery.formats.shadergen import generate, webgl_word_fetch
from bakery.nn.network import NetworkSpec
from bakery.stages.ntc.packing import codes_per_word, word_offsets
from bakery.stages.ntc.texture_set import LOD_INPUT_SCALE, LatentGridSpec

LANGUAGES = ("slang", "hlsl", "glsl", "webgl")
#: Per-texel decoder file per language (ntc_decode.<ext>).
EXTENSIONS = {"slang": "slang", "hlsl": "hlsl", "glsl": "glsl", "webgl": "webgl.glsl"}
#: Languages of the whole-mip compute decoder (ntc_decode_mip.<ext>); WebGL2 has no compute.
COMPUTE_LANGUAGES = {"slang": "slang", "hlsl": "hlsl", "glsl": "comp"}


def _table(name: str, values: list[int]) -> str:
    """uint name(uint i): the i-th value (last one for i past the end)."""
    expr = f"{values[-1]}u"
    for i in range(len(values) - 2, -1, -1):
        expr = f"(i == {i}u ? {values[i]}u : {expr})"
    return f"uint {name}(uint i)\n{{\n    return {expr};\n}}\n"


def _resources(lang: str, mode: str) -> dict:
    """Per-language spellings: function parameters/arguments for the bound resources,
    global declarations (GLSL), the latent fetch and the MLP call."""
    if lang == "webgl":
        decl = ("uniform highp usampler2D ntc_latent_words;\n" + webgl_word_fetch("ntc_latent_word", "ntc_latent_words")
                if mode == "packed" else "uniform highp sampler2DArray ntc_latents;\n")
        return {"const": "const", "decl": decl, "params": "", "args": "", "mlp": "ntc_mlp_decode(inputs, outputs)",
                "word": "ntc_latent_word({i})", "sample": "textureLod(ntc_latents, vec3({u}, {v}, float({f})), float({lvl})).r",
                "bind": "upload weights.bin as an R32UI texture to ntc_mlp_weights and " + (
                    "latents.bin likewise to ntc_latent_words (texel i = word i, rows in order)" if mode == "packed"
                    else "latents.dds's BC4 blocks with their mips to ntc_latents (EXT_texture_compression_rgtc; "
                         "linear, mipmap-nearest, clamp to edge)")}
    if lang == "glsl":
        decl = ("#ifndef NTC_LATENTS_BINDING\n#define NTC_LATENTS_BINDING 1\n#endif\n"
                + ("layout(std430, binding = NTC_LATENTS_BINDING) readonly buffer ntc_LatentBuffer { uint ntc_latent_words[]; };\n"
                   if mode == "packed" else "layout(binding = NTC_LATENTS_BINDING) uniform sampler2DArray ntc_latents;\n"))
        return {"const": "const", "decl": decl, "params": "", "args": "", "mlp": "ntc_mlp_decode(inputs, outputs)",
                "word": "ntc_latent_words[{i}]", "sample": "textureLod(ntc_latents, vec3({u}, {v}, float({f})), float({lvl})).r",
                "bind": "bind weights.bin at NTC_MLP_WEIGHTS_BINDING (0) and the latents at NTC_LATENTS_BINDING (1)"}
    res = ("StructuredBuffer<uint> latents" if mode == "packed"
           else "Texture2DArray<float> latents, SamplerState latent_sampler")
    args = "latents" if mode == "packed" else "latents, latent_sampler"
    return {"const": "static const", "decl": "", "params": f"StructuredBuffer<uint> weights, {res}, ",
            "args": f"{args}, ", "mlp": "ntc_mlp_decode(weights, inputs, outputs)", "word": "latents[{i}]",
            "sample": "latents.SampleLevel(latent_sampler, float3({u}, {v}, float({f})), float({lvl}))",
            "bind": "pass weights.bin as a uint buffer and the latents as declared below"}


def _prefixed(text: str, prefix: str) -> str:
    """The template's ``ntc_`` / ``NTC_`` names under the bundle's own prefix."""
    if prefix == "ntc":
        return text
    return re.sub(r"\bNTC_", prefix.upper() + "_", re.sub(r"\bntc_", prefix + "_", text))


def generate_ntc_decoder(grid: LatentGridSpec, spec: NetworkSpec, lang: str = "slang", *,
                         normal_channel: int = -1, dtype: str = "float16", prefix: str = "ntc") -> str:
    """The per-texel decoder ``{prefix}_decode_texel`` in ``lang``; every global name starts
    with ``prefix`` (the bundle's symbol prefix)."""
    return _prefixed(_ntc_decoder(grid, spec, lang, normal_channel=normal_channel, dtype=dtype), prefix)


def _ntc_decoder(grid: LatentGridSpec, spec: NetworkSpec, lang: str, *, normal_channel: int, dtype: str) -> str:
    if lang not in LANGUAGES:
        raise ValueError(f"unknown shader language {lang!r} (known: {', '.join(LANGUAGES)})")
    r = _resources(lang, grid.mode)
    lat_params = r["params"].replace("StructuredBuffer<uint> weights, ", "")
    lat_args = r["args"]
    mlp = generate(spec, lang, dtype=dtype, prefix="ntc_mlp")
    mips, levels = grid.color_mips, grid.levels
    tables = (_table("ntc_mip_width", [w for w, _ in mips]) + _table("ntc_mip_height", [h for _, h in mips])
              + _table("ntc_mip_latent_level", [grid.latent_pair(m) for m in range(len(mips))])
              + _table("ntc_level_width", [w for w, _, _ in levels])
              + _table("ntc_level_height", [h for _, h, _ in levels]))
    if grid.mode == "packed":
        tables += _table("ntc_level_word", word_offsets(grid)[:-1])
        n = codes_per_word(grid.bits)
        fetch = f"""
// Value of feature f at latent texel (x, y) of level k, from the packed codes (docs/FORMAT.md).
float ntc_latent({lat_params}uint k, int x, int y, uint f)
{{
    uint e = (uint(y) * ntc_level_width(k) + uint(x)) * NTC_F + f;
    uint word = {r["word"].format(i=f"ntc_level_word(k) + e / {n}u")};
    uint code = (word >> ((e % {n}u) * {grid.bits}u)) & {(1 << grid.bits) - 1}u;
    return float(code) / {float((1 << grid.bits) - 1)!r};
}}

// Bilinear, clamp to edge, by hand: bit-exact with training on any GPU.
void ntc_sample({lat_params}uint k, float u, float v, uint first, inout float inputs[NTC_MLP_N_INPUTS])
{{
    uint gw = ntc_level_width(k);
    uint gh = ntc_level_height(k);
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
    for (uint f = 0u; f < NTC_F; f++)
    {{
        float s = 0.0;
        s += (1.0 - tx) * (1.0 - ty) * ntc_latent({lat_args}k, x0, y0, f);
        s += tx * (1.0 - ty) * ntc_latent({lat_args}k, x1, y0, f);
        s += (1.0 - tx) * ty * ntc_latent({lat_args}k, x0, y1, f);
        s += tx * ty * ntc_latent({lat_args}k, x1, y1, f);
        inputs[first + f] = s;
    }}
}}
"""
    else:
        fetch = f"""
// Hardware bilinear filtering of the BC4 latents: use a linear, clamp-to-edge sampler
// without mip interpolation (the level is chosen explicitly).
void ntc_sample({lat_params}uint k, float u, float v, uint first, inout float inputs[NTC_MLP_N_INPUTS])
{{
    for (uint f = 0u; f < NTC_F; f++)
        inputs[first + f] = {r["sample"].format(u="u", v="v", f="f", lvl="k")};
}}
"""
    c = r["const"]
    normal = """
    if (NTC_NORMAL_CHANNEL >= 0)
    {
        uint nc = uint(NTC_NORMAL_CHANNEL);
        float nx = outputs[nc] * 2.0 - 1.0;
        float ny = outputs[nc + 1u] * 2.0 - 1.0;
        float nz = outputs[nc + 2u] * 2.0 - 1.0;
        float s = 1.0 / sqrt(nx * nx + ny * ny + nz * nz + 1e-6);
        outputs[nc] = nx * s * 0.5 + 0.5;
        outputs[nc + 1u] = ny * s * 0.5 + 0.5;
        outputs[nc + 2u] = nz * s * 0.5 + 0.5;
    }"""
    return mlp + f"""
// ---- NTC per-texel decode ({lang}, {grid.mode} latents) ----------------------------------
// Decodes texel (px, py) of colour mip `mip` of the {grid.width}x{grid.height} set; {r["bind"]}.
// ntc_decode_texel returns the raw outputs (what the bundle's reference decoder returns);
// ntc_finish renormalises the normal and clamps to [0, 1], as the previews are stored.
{r["decl"]}{c} uint NTC_F = {grid.features}u;
{c} uint NTC_PE = {grid.pe_octaves}u;
{c} uint NTC_MIPS = {len(mips)}u;
{c} int NTC_NORMAL_CHANNEL = {normal_channel};

{tables}{fetch}
float ntc_triangle(float x)
{{
    return abs(2.0 * (x - floor(x)) - 1.0);
}}

void ntc_decode_texel({r["params"]}uint mip, uint px, uint py, out float outputs[NTC_MLP_N_OUTPUTS])
{{
    float inputs[NTC_MLP_N_INPUTS];
    uint a = ntc_mip_latent_level(mip);
    float u = (float(px) + 0.5) / float(ntc_mip_width(mip));
    float v = (float(py) + 0.5) / float(ntc_mip_height(mip));
    ntc_sample({lat_args}a, u, v, 0u, inputs);
    ntc_sample({lat_args}a + 1u, u, v, NTC_F, inputs);
    for (uint k = 0u; k < NTC_PE; k++)
    {{
        float period = float(2u << k);
        float ax = (float(px) + 0.5) / period;
        float ay = (float(py) + 0.5) / period;
        inputs[2u * NTC_F + 4u * k + 0u] = ntc_triangle(ax);
        inputs[2u * NTC_F + 4u * k + 1u] = ntc_triangle(ax + 0.25);
        inputs[2u * NTC_F + 4u * k + 2u] = ntc_triangle(ay);
        inputs[2u * NTC_F + 4u * k + 3u] = ntc_triangle(ay + 0.25);
    }}
    inputs[2u * NTC_F + 4u * NTC_PE] = float(mip) * {LOD_INPUT_SCALE!r};
    {r["mlp"]};
}}

void ntc_finish(inout float outputs[NTC_MLP_N_OUTPUTS])
{{{normal}
    for (uint c = 0u; c < NTC_MLP_N_OUTPUTS; c++)
        outputs[c] = clamp(outputs[c], 0.0, 1.0);
}}
"""


def generate_ntc_mip_decoder(grid: LatentGridSpec, spec: NetworkSpec, lang: str = "slang", *,
                             normal_channel: int = -1, dtype: str = "float16", prefix: str = "ntc") -> str:
    """A complete compute shader (``lang`` in COMPUTE_LANGUAGES) that decodes every texel of
    one colour mip into a float RGBA texture array: layer l holds channels 4l..4l+3 (the
    last layer padded with 0), renormalised and clamped as ``{prefix}_finish`` stores them.
    Run once per mip at load (inference on load); the result can be block-compressed or
    sampled as is."""
    if lang not in COMPUTE_LANGUAGES:
        raise ValueError(f"no compute decoder in {lang!r} (known: {', '.join(COMPUTE_LANGUAGES)})")
    decoder = _ntc_decoder(grid, spec, lang, normal_channel=normal_channel, dtype=dtype)
    layers = -(-spec.n_outputs // 4)
    usage = (f"// ---- NTC whole-mip decode ({lang}): inference on load -------------------------------\n"
             f"// One thread per texel of colour mip `mip` (a uniform); dispatch ceil(W_L / 8) x ceil(H_L / 8)\n"
             f"// groups. Writes ntc_output, a float RGBA 2D array of {layers} layers bound at that mip.\n")
    if lang == "glsl":
        return _prefixed("#version 450\n" + decoder + usage + f"""
#ifndef NTC_OUTPUT_BINDING
#define NTC_OUTPUT_BINDING 2
#endif
const uint NTC_OUTPUT_LAYERS = {layers}u;
layout(local_size_x = 8, local_size_y = 8) in;
layout(binding = NTC_OUTPUT_BINDING, rgba32f) uniform writeonly image2DArray ntc_output;
layout(push_constant) uniform ntc_Push {{ uint mip; }} ntc_push;

void main()
{{
    uint mip = ntc_push.mip;
    uvec2 p = gl_GlobalInvocationID.xy;
    if (p.x >= ntc_mip_width(mip) || p.y >= ntc_mip_height(mip))
        return;
    float outputs[NTC_MLP_N_OUTPUTS];
    ntc_decode_texel(mip, p.x, p.y, outputs);
    ntc_finish(outputs);
    for (uint l = 0u; l < NTC_OUTPUT_LAYERS; l++)
    {{
        vec4 v = vec4(0.0);
        for (uint c = 0u; c < 4u; c++)
            if (4u * l + c < NTC_MLP_N_OUTPUTS)
                v[c] = outputs[4u * l + c];
        imageStore(ntc_output, ivec3(int(p.x), int(p.y), int(l)), v);
    }}
}}
""", prefix)
    packed = grid.mode == "packed"
    resources = ("StructuredBuffer<uint> ntc_latent_buffer;   // latents.bin\n" if packed else
                 "Texture2DArray<float> ntc_latent_texture;   // latents.dds\n"
                 "SamplerState ntc_latent_sampler;   // linear, clamp to edge\n")
    args = "ntc_weights, ntc_latent_buffer" if packed else "ntc_weights, ntc_latent_texture, ntc_latent_sampler"
    return _prefixed(decoder + usage + f"""
static const uint NTC_OUTPUT_LAYERS = {layers}u;
StructuredBuffer<uint> ntc_weights;   // weights.bin
{resources}RWTexture2DArray<float4> ntc_output;
uniform uint ntc_mip;   // the colour mip to decode (HLSL: in $Globals)

[numthreads(8, 8, 1)]
void ntc_decode_mip(uint3 id : SV_DispatchThreadID)
{{
    if (id.x >= ntc_mip_width(ntc_mip) || id.y >= ntc_mip_height(ntc_mip))
        return;
    float outputs[NTC_MLP_N_OUTPUTS];
    ntc_decode_texel({args}, ntc_mip, id.x, id.y, outputs);
    ntc_finish(outputs);
    for (uint l = 0u; l < NTC_OUTPUT_LAYERS; l++)
    {{
        float4 v = float4(0.0, 0.0, 0.0, 0.0);
        for (uint c = 0u; c < 4u; c++)
            if (4u * l + c < NTC_MLP_N_OUTPUTS)
                v[c] = outputs[4u * l + c];
        ntc_output[uint3(id.x, id.y, l)] = v;
    }}
}}
""", prefix)
