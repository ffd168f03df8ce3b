"""Objective: the inputs of a user's Slang function that make its output match a
reference image, over every output pixel each step (full batch).

One :class:`PlainParameters` group per trainable argument, with the argument's own
learning rate and clamp range; the shared :class:`Trainer` runs it with no network.
"""

from __future__ import annotations

import numpy as np

from bakery.nn.parameters import PlainParameters, make_buffer
from bakery.stages.fit.kernel import buffer_names, generate
from bakery.stages.fit.signature import Signature
from bakery.stages.fit.spec import Binding, FitSpec

#: The range ``init = "noise"`` draws from when a parameter has no clamp range.
NOISE_RANGE = (0.0, 1.0)


def initial_values(b: Binding, width: int, seed: int, init_image: np.ndarray | None = None) -> np.ndarray:
    """A parameter's starting values, flat in [H][W][C] (or component) order."""
    count = int(np.prod(b.shape)) if b.shape else 1
    if b.init == "noise":
        lo, hi = b.clamp if b.clamp else NOISE_RANGE
        return np.random.default_rng(seed).uniform(lo, hi, count).astype(np.float32)
    if init_image is not None:
        return np.ascontiguousarray(init_image, np.float32).reshape(-1)
    per = np.broadcast_to(np.asarray(b.init, np.float32), (width,))
    values = np.tile(per, count // width)
    if b.clamp:
        values = np.clip(values, *b.clamp)
    return values.astype(np.float32)


class ShaderFit:
    def __init__(self, device, spec: FitSpec, sig: Signature, reference: np.ndarray, images: dict[str, np.ndarray],
                 init_images: dict[str, np.ndarray], *, seed: int):
        self.device, self.spec, self.sig = device, spec, sig
        self.height, self.width, self.channels = reference.shape
        self.source = generate(spec, sig)
        self._reference = make_buffer(device, np.ascontiguousarray(reference, np.float32).reshape(-1))
        self._render = make_buffer(device, np.zeros(reference.size, np.float32))
        self._loss = make_buffer(device, np.zeros(spec.steps + 1, np.uint64))
        self._vars = {"bk_fit_reference": self._reference, "bk_fit_output": self._render, "bk_fit_loss": self._loss}
        self.groups: dict[str, PlainParameters] = {}
        for k, a in enumerate(sig.arguments):
            b = spec.args[a.name]
            image, values, grads = buffer_names(a.name)
            if b.kind == "image":
                self._vars[image] = make_buffer(device, np.ascontiguousarray(images[a.name], np.float32).reshape(-1))
            elif b.trainable:
                pseed = b.seed if b.seed is not None else (seed + k) & 0xFFFFFFFF
                init = initial_values(b, a.width, pseed, init_images.get(a.name))
                lo, hi = b.clamp if b.clamp else (-3.0e38, 3.0e38)
                g = PlainParameters(device, init, lr=b.lr or spec.lr, lo=lo, hi=hi)
                self.groups[a.name] = g
                self._vars[values], self._vars[grads] = g.params, g.grads

    # -- the Objective protocol ----------------------------------------------------------
    def slang_source(self) -> str:
        return self.source

    def vars(self) -> dict:
        return self._vars

    def uniforms(self, step: int, batch: int, seed: int) -> dict:
        return {"width": self.width, "height": self.height, "step": min(step, self.spec.steps),
                "grad_scale": 1.0 / (self.width * self.height)}

    def param_groups(self) -> list:
        return list(self.groups.values())

    # -- results -------------------------------------------------------------------------
    @property
    def pixels(self) -> int:
        return self.width * self.height

    def render(self, trainer) -> np.ndarray:
        """The function's output at every pixel with the current values, [H, W, C]."""
        trainer.run_kernel("bk_fit_render", self.pixels, self.uniforms(0, self.pixels, 0))
        out = self._render.to_numpy().view(np.float32)[: self.pixels * self.channels]
        return out.reshape(self.height, self.width, self.channels).copy()

    def losses(self, steps: int) -> np.ndarray:
        """Mean loss over the image before each of the first ``steps`` updates."""
        from bakery.nn.parameters import FIXED_POINT_SCALE

        raw = self._loss.to_numpy().view(np.int64)[:steps]
        return raw.astype(np.float64) / FIXED_POINT_SCALE

    def values(self) -> dict[str, np.ndarray]:
        """Every trainable argument's fitted values in its declared shape."""
        out = {}
        for name, g in self.groups.items():
            shape = self.spec.args[name].shape
            out[name] = g.download().reshape(shape) if shape else g.download()[0]
        return out
