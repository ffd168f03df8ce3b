"""A device stage for the kernel-cache tests: every task compiles the same small kernel
through ``Device.kernel``, runs it, and writes the process, the device it ran on and the
device's kernel-cache counters after the task. Imported by worker processes through
``[project] plugins = ["kernel_stages"]`` with ``tests/`` on their path."""

from __future__ import annotations

import os

import numpy as np

from bakery.stages import Stage, StageResult, register

SOURCE = """
RWStructuredBuffer<float> g_out;

[shader("compute")]
[numthreads(32, 1, 1)]
void ramp(uint3 tid: SV_DispatchThreadID, uniform float scale)
{
    g_out[tid.x] = scale * float(tid.x);
}
"""


@register
class KernelStage(Stage):
    type_name = "test_kernel"
    version = "1"
    uses_device = True
    input_roles = ("image",)

    def run(self, ctx, inputs, params):
        from bakery.nn.parameters import make_buffer

        dev = ctx.device
        kernel = dev.kernel(SOURCE, "ramp")
        out = make_buffer(dev, np.zeros(32, np.float32))
        dev.submit(lambda enc: kernel.dispatch([32, 1, 1], vars={"g_out": out}, command_encoder=enc, scale=2.0))
        dev.wait()
        ramp = out.to_numpy().view(np.float32)[:32]
        ctx.out.write_json("kernel.json", {"pid": os.getpid(), "device": id(dev), "sum": float(ramp.sum()),
                                           "kernel_cache": dev.kernel_cache.to_dict()})
        return StageResult()
