"""Rendering a program through its emitted shader: the shipped Slang function, compiled as
is, inside a one-line compute entry point. What this draws is what an engine draws."""

from __future__ import annotations

import numpy as np

from bakery.nn.parameters import make_buffer
from bakery.stages.procedural.codegen import generate
from bakery.stages.procedural.dsl import Node

_ENTRY = """
RWStructuredBuffer<float> g_out;
[shader("compute")]
[numthreads(64, 1, 1)]
void render_shader(uint3 tid: SV_DispatchThreadID, uniform uint width, uniform uint height, uniform float2 span,
                   uniform float2 origin)
{
    if (tid.x >= width * height)
        return;
    float2 fw = span / float2(float(width), float(height));
    float2 uv = origin + (float2(float(tid.x % width), float(tid.x / width)) + 0.5) * fw;
    float3 c = bakery_procedural(uv, fw);
    g_out[3 * tid.x] = c.x;
    g_out[3 * tid.x + 1] = c.y;
    g_out[3 * tid.x + 2] = c.z;
}
"""


def render_shader(device, program: Node, width: int, height: int, source: str | None = None, *,
                  tile: bool = False, repeat: float = 1.0, origin: tuple[float, float] = (0.0, 0.0)) -> np.ndarray:
    """[height, width, 3] float32 drawn by the generated Slang source of ``program`` over
    uv in origin + [0, repeat]^2, each pixel's footprint its own size."""
    src = (source if source is not None else generate(program, "slang", (width, height), tile=tile)) + _ENTRY
    kernel = device.kernel(src, "render_shader")
    n = width * height
    out = make_buffer(device, np.zeros(n * 3, np.float32))
    device.submit(lambda enc: kernel.dispatch([(n + 63) // 64 * 64, 1, 1], vars={"g_out": out},
                                              command_encoder=enc, width=width, height=height,
                                              span=[float(repeat), float(repeat)],
                                              origin=[float(origin[0]), float(origin[1])]))
    device.wait()
    return out.to_numpy().view(np.float32)[: n * 3].reshape(height, width, 3).copy()
