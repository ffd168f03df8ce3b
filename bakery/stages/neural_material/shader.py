"""Generated runtime decoder of a neural material: fetch the latents from the bundle's
latent texture array (any mip, filtered by the sampler), undo the per-channel scale/bias,
and evaluate the decoder MLP on the latents and the encoded light/view directions
(``directions`` "frame": also the cosines of a shading normal held in the first three
latents, as objective.py::encode_directions).

Two paths: ``neural_material_eval`` multiplies in scalar loops from ``weights.bin`` as
stored (Slang; the same text is valid HLSL), and, in the Slang file,
``neural_material_eval_coopvec`` runs each layer on the tensor cores from matrices the
engine converted at load (bakery/formats/coopvec_shader.py)."""

from __future__ import annotations

from bakery.formats.coopvec_shader import generate_coopvec
from bakery.formats.shadergen import generate
from bakery.nn.network import NetworkSpec


def _floats(values) -> str:
    return "{ " + ", ".join(f"{float(v)!r}" for v in values) + " }"


def generate_material_eval(spec: NetworkSpec, latents: int, scale, bias, lang: str = "slang",
                           *, directions: str, dtype: str = "float16") -> str:
    from bakery.stages.neural_material.objective import NORMAL_EPS, OUTPUT_GAIN, dir_features

    if spec.n_inputs != latents + dir_features(directions):
        raise ValueError(f"decoder takes {spec.n_inputs} inputs, {latents} latents + {directions!r} directions "
                         f"make {latents + dir_features(directions)}")
    frame = directions == "frame"
    normal = f"""
// directions = "frame": the first three latents hold a learned shading normal.
static const float NM_NORMAL_EPS = {NORMAL_EPS!r};
float3 neural_material_normal(float z[NM_LATENTS])
{{
    float3 v = float3(2.0 * z[0] - 1.0, 2.0 * z[1] - 1.0, 2.0 * z[2] - 1.0);
    return v * rsqrt(dot(v, v) + NM_NORMAL_EPS);  // normalize, finite where v vanishes
}}
""" if frame else ""
    cosines = """    float3 n = neural_material_normal(z);
    inputs[NM_LATENTS + 9u] = dot(n, wi);
    inputs[NM_LATENTS + 10u] = dot(n, wo);
    inputs[NM_LATENTS + 11u] = dot(n, h);
""" if frame else ""
    mlp = generate(spec, lang, dtype=dtype, prefix="nm_mlp")
    coopvec = "" if lang != "slang" else "\n" + generate_coopvec(spec, prefix="nm_mlp") + """
// Cooperative-vector path (Slang only): weights and offsets as nm_mlp_decode_coopvec takes them.
float3 neural_material_eval_coopvec(ByteAddressBuffer weights, NmMlpCoopVecOffsets at, float z[NM_LATENTS],
                                    float3 wi, float3 wo)
{
    if (wi.z <= 0.0 || wo.z <= 0.0)
        return float3(0.0, 0.0, 0.0);
    float inputs[NM_MLP_N_INPUTS];
    neural_material_inputs(z, wi, wo, inputs);
    float y[NM_MLP_N_OUTPUTS];
    nm_mlp_decode_coopvec(weights, at, inputs, y);
    return neural_material_reflectance(y);
}
"""
    return mlp + f"""
// ---- neural material -------------------------------------------------------------------
// latents: the bundle's latents texture array (feature f in layer f / 4, component f % 4),
// stored value v decodes as bias[f] + scale[f] * v. Directions are unit vectors in the
// surface's tangent frame (z = geometric normal), pointing away from the surface.
// neural_material_eval returns BRDF x cos(theta_i), RGB, for a light of unit irradiance.
static const uint NM_LATENTS = {latents}u;
static const float NM_OUTPUT_GAIN = {OUTPUT_GAIN!r};  // the decoder predicts log(1 + gain f)
static const float NM_LATENT_SCALE[{latents}] = {_floats(scale)};
static const float NM_LATENT_BIAS[{latents}] = {_floats(bias)};

void neural_material_latents(Texture2DArray<float4> latents, SamplerState s, float2 uv, float lod,
                             out float z[NM_LATENTS])
{{
    for (uint layer = 0u; layer < NM_LATENTS / 4u; layer++)
    {{
        float4 v = latents.SampleLevel(s, float3(uv, float(layer)), lod);
        z[4u * layer + 0u] = NM_LATENT_BIAS[4u * layer + 0u] + NM_LATENT_SCALE[4u * layer + 0u] * v.x;
        z[4u * layer + 1u] = NM_LATENT_BIAS[4u * layer + 1u] + NM_LATENT_SCALE[4u * layer + 1u] * v.y;
        z[4u * layer + 2u] = NM_LATENT_BIAS[4u * layer + 2u] + NM_LATENT_SCALE[4u * layer + 2u] * v.z;
        z[4u * layer + 3u] = NM_LATENT_BIAS[4u * layer + 3u] + NM_LATENT_SCALE[4u * layer + 3u] * v.w;
    }}
}}
{normal}
// The decoder's inputs: latents, wi, wo, their half vector (and the frame cosines).
void neural_material_inputs(float z[NM_LATENTS], float3 wi, float3 wo, out float inputs[NM_MLP_N_INPUTS])
{{
    for (uint i = 0u; i < NM_LATENTS; i++)
        inputs[i] = z[i];
    float3 h = normalize(wi + wo);
    inputs[NM_LATENTS + 0u] = wi.x;
    inputs[NM_LATENTS + 1u] = wi.y;
    inputs[NM_LATENTS + 2u] = wi.z;
    inputs[NM_LATENTS + 3u] = wo.x;
    inputs[NM_LATENTS + 4u] = wo.y;
    inputs[NM_LATENTS + 5u] = wo.z;
    inputs[NM_LATENTS + 6u] = h.x;
    inputs[NM_LATENTS + 7u] = h.y;
    inputs[NM_LATENTS + 8u] = h.z;
{cosines}}}

float3 neural_material_reflectance(float y[NM_MLP_N_OUTPUTS])
{{
    return max(exp(float3(y[0], y[1], y[2])) - 1.0, float3(0.0, 0.0, 0.0)) / NM_OUTPUT_GAIN;
}}

// Plain path: weights.bin bound as stored.
float3 neural_material_eval(StructuredBuffer<uint> weights, float z[NM_LATENTS], float3 wi, float3 wo)
{{
    if (wi.z <= 0.0 || wo.z <= 0.0)
        return float3(0.0, 0.0, 0.0);
    float inputs[NM_MLP_N_INPUTS];
    neural_material_inputs(z, wi, wo, inputs);
    float y[NM_MLP_N_OUTPUTS];
    nm_mlp_decode(weights, inputs, y);
    return neural_material_reflectance(y);
}}
{coopvec}"""


def generate_material_eval_webgl(spec: NetworkSpec, latents: int, scale, bias, *, directions: str, prefix: str,
                                 dtype: str = "float16") -> str:
    """The same evaluation in WebGL2 (GLSL ES 3.00) for a fragment shader, every global name
    under the bundle's ``prefix``: ``{prefix}_eval(uv, lod, wi, wo)`` samples the latents
    (``{prefix}_latents``, a sampler2DArray of the latent texture's RGBA8 layers with their
    mips) and returns BRDF x cos; ``{prefix}_display`` maps it as the manifest's evaluation
    displays it (Reinhard(pi f), sRGB)."""
    from bakery.stages.neural_material.objective import IRRADIANCE, NORMAL_EPS, OUTPUT_GAIN, dir_features

    if spec.n_inputs != latents + dir_features(directions):
        raise ValueError(f"decoder takes {spec.n_inputs} inputs, {latents} latents + {directions!r} directions "
                         f"make {latents + dir_features(directions)}")
    P, U, M = prefix, prefix.upper(), f"{prefix}_mlp"
    mlp = generate(spec, "webgl", dtype=dtype, prefix=M)
    floats = lambda v: ", ".join(f"{float(x)!r}" for x in v)  # noqa: E731
    cosines = f"""    vec3 v = vec3(2.0 * z[0] - 1.0, 2.0 * z[1] - 1.0, 2.0 * z[2] - 1.0);
    vec3 n = v * inversesqrt(dot(v, v) + {NORMAL_EPS!r});
    inputs[{U}_LATENTS + 9u] = dot(n, wi);
    inputs[{U}_LATENTS + 10u] = dot(n, wo);
    inputs[{U}_LATENTS + 11u] = dot(n, h);
""" if directions == "frame" else ""
    return mlp + f"""
// ---- neural material (WebGL2) -----------------------------------------------------------
// Directions are unit vectors in the surface's tangent frame (z = normal), away from it.
const uint {U}_LATENTS = {latents}u;
const float {U}_LATENT_SCALE[{latents}] = float[{latents}]({floats(scale)});
const float {U}_LATENT_BIAS[{latents}] = float[{latents}]({floats(bias)});
uniform highp sampler2DArray {P}_latents;

vec3 {P}_eval(vec2 uv, float lod, vec3 wi, vec3 wo)
{{
    if (wi.z <= 0.0 || wo.z <= 0.0)
        return vec3(0.0);
    float z[{U}_LATENTS];
    for (uint layer = 0u; layer < {U}_LATENTS / 4u; layer++)
    {{
        vec4 s = textureLod({P}_latents, vec3(uv, float(layer)), lod);
        for (uint c = 0u; c < 4u; c++)
            z[4u * layer + c] = {U}_LATENT_BIAS[4u * layer + c] + {U}_LATENT_SCALE[4u * layer + c] * s[c];
    }}
    float inputs[{M.upper()}_N_INPUTS];
    for (uint i = 0u; i < {U}_LATENTS; i++)
        inputs[i] = z[i];
    vec3 h = normalize(wi + wo);
    inputs[{U}_LATENTS + 0u] = wi.x;
    inputs[{U}_LATENTS + 1u] = wi.y;
    inputs[{U}_LATENTS + 2u] = wi.z;
    inputs[{U}_LATENTS + 3u] = wo.x;
    inputs[{U}_LATENTS + 4u] = wo.y;
    inputs[{U}_LATENTS + 5u] = wo.z;
    inputs[{U}_LATENTS + 6u] = h.x;
    inputs[{U}_LATENTS + 7u] = h.y;
    inputs[{U}_LATENTS + 8u] = h.z;
{cosines}    float y[{M.upper()}_N_OUTPUTS];
    {M}_decode(inputs, y);
    return max(exp(vec3(y[0], y[1], y[2])) - 1.0, vec3(0.0)) / {OUTPUT_GAIN!r};
}}

vec3 {P}_display(vec3 f)
{{
    vec3 r = {float(IRRADIANCE)!r} * f;
    vec3 x = r / (1.0 + r);
    return mix(1.055 * pow(max(x, vec3(0.0031308)), vec3(1.0 / 2.4)) - 0.055, 12.92 * x,
               vec3(lessThanEqual(x, vec3(0.0031308))));
}}
"""
