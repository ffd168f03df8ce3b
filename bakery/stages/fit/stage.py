"""Stage ``fit``: recover the inputs of a user's differentiable Slang shader from a
reference image.

The input is a fit spec (bakery/stages/fit/spec.py): the user's ``.slang`` file and
``[Differentiable]`` function, what each argument is bound to, the reference and the
optimiser. The function is differentiated by Slang (``bwd_diff``) inside a generated
wrapper kernel and its trainable arguments are optimised on the device by the shared
:class:`Trainer`. Bundle: ``params.json`` (scalars and vectors by argument name), each
texture parameter as PNG and DDS, the final render, the reference, a difference image,
the loss curve (JSON and a convergence plot).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bakery.formats.images import load_image
from bakery.imaging import psnr
from bakery.nn.optimizers import OPTIMIZERS, AdamW
from bakery.nn.trainer import TrainConfig, Trainer
from bakery.progress import TrainingProgress
from bakery.stages.base import Stage, StageResult, register
from bakery.stages.fit.objective import ShaderFit
from bakery.stages.fit.plot import convergence_png
from bakery.stages.fit.signature import check_bindings, compile_error, reflect
from bakery.stages.fit.spec import FitSpec, SpecError, load_spec, referenced_files
from bakery.stages.params import AUTO, QUALITY, Param, Presets
from bakery.verdict import budget_reason, error_verdict

#: The difference image shows |render - reference| times this, so small errors are visible.
DIFFERENCE_GAIN = 4.0
#: Seconds between progress reports that read the current loss back from the device.
LOSS_REPORT_INTERVAL = 0.5


#: What ``auto`` steps mean when the spec's ``[fit]`` does not set them. The cost of a step
#: is the user's shader, so both device classes get the same rows; production is the
#: spec's own default (300).
PRESETS = Presets({dclass: {"preview": {"steps": 150}, "production": {"steps": 300}, "final": {"steps": 1000}}
                   for dclass in ("cpu", "gpu")})


def loss_progress(ctx, objective: ShaderFit, total: int) -> TrainingProgress:
    """Step progress with the current loss, the step rate and the time left; the loss is
    read back at most twice a second so the GPU is not stalled every command buffer."""
    return TrainingProgress(ctx.progress, total, probe=lambda done: {"loss": float(objective.losses(done)[-1])},
                            interval_s=LOSS_REPORT_INTERVAL)


def load_inputs(spec: FitSpec) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray], tuple[int, int]]:
    """The reference, the images bound to arguments, the init images and the output size
    (width, height); every size problem is one line naming the spec's key."""
    reference = load_image(spec.reference, key="reference")
    ref_size = (reference.shape[1], reference.shape[0])
    size = spec.size or ref_size
    lines = []
    if ref_size != size:
        lines.append(spec.error("reference", f"reference {spec.reference.name} is {ref_size[0]}x{ref_size[1]} but "
                                             f"the output size is {size[0]}x{size[1]} (size = [{size[0]}, {size[1]}])"))
    images, inits = {}, {}
    for b in spec.args.values():
        if b.kind == "image":
            img = images[b.name] = load_image(b.path, key=f"args.{b.name}")
            if (img.shape[1], img.shape[0]) != size:
                lines.append(spec.error(f"args.{b.name}", f"image {b.path.name} is {img.shape[1]}x{img.shape[0]} but "
                                                          f"the output size is {size[0]}x{size[1]}"))
        elif b.trainable and isinstance(b.init, Path):
            img = inits[b.name] = load_image(b.init, key=f"args.{b.name}.init")
            h, w = b.shape[:2]
            if img.shape[:2] != (h, w):
                lines.append(spec.error(f"args.{b.name}.init", f"init image {b.init.name} is {img.shape[1]}x"
                                                               f"{img.shape[0]} but the parameter is {w}x{h}"))
    if lines:
        raise SpecError(lines)
    return reference, images, inits, size


def make_optimizer(spec: FitSpec):
    cls = OPTIMIZERS[spec.optimizer]
    return cls(lr=spec.lr, weight_decay=spec.weight_decay) if cls is AdamW else cls(lr=spec.lr)


@register
class Fit(Stage):
    type_name = "fit"
    typical_seconds = 8.0  # a sample asset's task on an H200 (bench/rebake.py --fresh)
    version = "1"
    description = "recover the inputs of a differentiable Slang shader from a reference image"
    input_roles = ("fit",)
    presets = PRESETS
    baseline = "its start (the spec's initial values)"
    metric_docs = {
        "final_loss": ("final loss", "the spec's loss (l2: mean squared error) of the render after the last step"),
        "start_loss": ("start loss", "the same loss before the first step, from the initial values"),
        "render_psnr_db": ("render PSNR (dB)", "PSNR of the fitted function's render against the reference"),
        "margin_db": ("vs start (dB)", "10 log10 (l2) or 20 log10 (l1) of start loss over final loss"),
    }
    params = (
        QUALITY,
        Param("steps", int, AUTO, "optimisation steps; auto: the spec's fit.steps, else the quality preset",
              min=1, max=10_000_000),
    )

    @classmethod
    def referenced_files(cls, files) -> dict:
        """The spec's shader, reference and bound images (roles ``fit.*``)."""
        return referenced_files(files["fit"])

    @classmethod
    def resolve_auto(cls, params, *, device_class, files) -> dict:
        """``auto`` steps: the spec's own ``[fit] steps`` where it sets them, else the preset."""
        if params["steps"] == AUTO:
            spec = load_spec(files["fit"])
            if spec.steps_given:  # the spec's explicit value wins over the preset
                params = dict(params, steps=spec.steps)
        return PRESETS.resolve(params, device_class=device_class)

    def run(self, ctx, inputs, params) -> StageResult:
        (inp,) = inputs
        spec = load_spec(inp.files["fit"])
        device = ctx.device
        steps_from = "param" if "steps" not in params.auto else "spec" if spec.steps_given else "preset"
        spec.steps = params["steps"]
        reference, images, inits, size = load_inputs(spec)
        sig = reflect(device, spec)
        channels = {n: im.shape[2] for n, im in images.items()}
        channels.update({f"{n}.init": im.shape[2] for n, im in inits.items()})
        check_bindings(spec, sig, size, channels)
        if reference.shape[2] != sig.return_width:
            raise SpecError([spec.error("reference", f"reference {spec.reference.name} has {reference.shape[2]} "
                                                     f"channel(s) but {sig.function} returns {sig.returns}")])
        seed = spec.seed if spec.seed is not None else ctx.seed
        objective = ShaderFit(device, spec, sig, reference, images, inits, seed=seed)
        config = TrainConfig(steps=spec.steps, batch=objective.pixels, optimizer=make_optimizer(spec),
                             schedule=spec.schedule, seed=seed)
        import slangpy as spy

        try:
            trainer = Trainer(device, None, objective, config)
        except spy.SlangCompileError as e:  # e.g. the function is not differentiable all the way down
            raise compile_error(spec, e) from None
        trainer.train(progress=loss_progress(ctx, objective, config.steps))
        render = objective.render(trainer)
        losses = objective.losses(config.steps)
        diff = render - reference
        final_loss = float(np.mean(diff.astype(np.float64) ** 2 if spec.loss == "l2" else np.abs(diff)))
        score = psnr(render, reference)
        ctx.log.info("%s: %s, %dx%d, %d steps, final %s loss %.3g, render PSNR %.2f dB", inp.name, sig.function,
                     size[0], size[1], config.steps, spec.loss, final_loss, score)
        manifest = self._write(ctx, spec, sig, objective, render, reference, losses, config)
        manifest["fit"]["steps_from"] = steps_from
        start_loss = float(losses[0]) if len(losses) else final_loss
        budget = (f"steps = {spec.steps} from the spec's fit.steps; more steps may win" if steps_from == "spec"
                  else budget_reason(PRESETS, params))
        verdict = error_verdict("its start (the spec's initial values)", final_loss, start_loss,
                                metric=f"{spec.loss} loss", power=spec.loss == "l2", reason=budget)
        return StageResult(metrics={"final_loss": final_loss, "start_loss": start_loss,
                                    "render_psnr_db": round(score, 4)}, manifest=manifest, verdict=verdict)

    def _write(self, ctx, spec, sig, objective, render, reference, losses, config) -> dict:
        out = ctx.out
        scalars, textures = {}, {}
        for name, values in objective.values().items():
            b = spec.args[name]
            if len(b.shape) == 3:
                textures[name] = _write_texture(out, name, values, b.clamp)
            else:
                scalars[name] = float(values) if not b.shape else [float(v) for v in values]
        out.write_json("params.json", scalars, role="params")
        out.write_png("render.png", render)
        out.write_png("reference.png", reference, role="reference")
        out.write_png("difference.png", np.abs(render - reference) * DIFFERENCE_GAIN)
        out.write_json("loss.json", {"loss": spec.loss, "per_step": [float(v) for v in losses]}, role="loss_curve")
        out.write_bytes("convergence.png", convergence_png(losses, title=f"{sig.function} ({spec.path.name})",
                                                           loss_name=spec.loss), role="plot")
        return {"fit": {"shader": spec.shader.name, "function": sig.describe(), "steps": config.steps,
                        "loss": spec.loss, "optimizer": spec.optimizer, "schedule": spec.schedule, "lr": spec.lr,
                        **({"weight_decay": spec.weight_decay} if spec.optimizer == "adamw" else {}),
                        "size": [objective.width, objective.height], "difference_gain": DIFFERENCE_GAIN,
                        "bindings": {n: b.describe() for n, b in spec.args.items()},
                        "textures": textures, "seed": config.seed}}


def _write_texture(out, name: str, values: np.ndarray, clamp) -> dict:
    """PNG preview and DDS of a texture parameter: 8-bit UNORM when its clamp range lies in
    [0, 1], else half floats (the values may leave [0, 1])."""
    h, w, c = values.shape
    out.write_png(f"{name}.png", values if c != 2 else np.concatenate([values, np.zeros((h, w, 1))], 2),
                  role="texture_preview")
    unorm = clamp is not None and clamp[0] >= 0.0 and clamp[1] <= 1.0
    if unorm and c in (1, 2):
        fmt, data = ("r8_unorm", "rg8_unorm")[c - 1], values
    else:
        fmt = "rgba8_unorm" if unorm else "rgba16f"
        data = np.concatenate([values, np.ones((h, w, 4 - c), np.float32)], 2) if c < 4 else values
    out.write_texture(f"{name}.dds", fmt, [data], role="texture")
    return {"dds": f"{name}.dds", "png": f"{name}.png", "format": fmt, "shape": [h, w, c]}
