"""Stage ``neural_texture``: one texture as a small MLP from UV to its channels.

The UV -> colour network of the neural-shading literature: frequency-encoded UV, a few
hidden layers, RGB(A) out. Bundle: weights, decoded preview, ONNX decoder and generated
decoder shaders; the manifest carries the whole-image PSNR, the values the ``auto``
parameters resolved to and the convergence curve (``convergence.json``).
"""

from __future__ import annotations

import numpy as np

from bakery.formats.images import image_size, load_image
from bakery.imaging import psnr
from bakery.formats.onnx_export import OPSET, OPSETS
from bakery.nn.activations import ACTIVATIONS
from bakery.nn.encodings import FrequencyEncoding
from bakery.nn.network import NetworkSpec
from bakery.nn.optimizers import SCHEDULES, Adam
from bakery.stages.neural_texture.objective import LOSSES, TextureFit
from bakery.nn.trainer import TrainConfig, Trainer
from bakery.progress import TrainingProgress
from bakery.stages.base import Stage, StageResult, register
from bakery.stages.params import AUTO, QUALITY, Param, Presets
from bakery.verdict import budget_reason, psnr_verdict

#: Convergence-curve points per run (each decodes the whole image once).
CURVE_POINTS = 16


def _fit_to_image(preset: dict, texels: int) -> dict:
    """No batch larger than the image: beyond its texel count a step only repeats texels."""
    cap = max(64, 1 << max(0, int(texels) - 1).bit_length())
    return dict(preset, batch=min(preset["batch"], cap))


#: What ``auto`` means. The CPU rows keep a 256x256 texture under a minute on two cores
#: (lavapipe); the GPU rows are what a production bake should use.
PRESETS = Presets({
    "cpu": {"preview": {"steps": 100, "batch": 2048, "width": 32, "layers": 2},
            "production": {"steps": 200, "batch": 4096, "width": 32, "layers": 2},
            "final": {"steps": 1000, "batch": 8192, "width": 64, "layers": 3}},
    "gpu": {"preview": {"steps": 500, "batch": 1 << 14, "width": 64, "layers": 2},
            "production": {"steps": 2000, "batch": 1 << 16, "width": 64, "layers": 3},
            "final": {"steps": 8000, "batch": 1 << 18, "width": 64, "layers": 4}},
}, fit=_fit_to_image)


@register
class NeuralTexture(Stage):
    type_name = "neural_texture"
    typical_seconds = 10.0  # a sample asset's task on an H200 (bench/rebake.py --fresh)
    version = "1"
    description = "fit a UV -> colour MLP to one texture"
    input_roles = ("image",)
    presets = PRESETS
    baseline = "BC7 of the image at equal bytes"
    metric_docs = {
        "psnr_db": ("PSNR (dB)", "PSNR of the decoded texture against the source image"),
        "bc7_psnr_db": ("BC7 at equal bytes (dB)", "PSNR of the image stored as BC7 in the weights' bytes "
                        "(area-downsampled, upsampled back)"),
        "weights_bytes": ("weights (bytes)", "the network's parameters at weights_dtype: what a GPU holds"),
        "margin_db": ("vs BC7 at equal bytes (dB)", "PSNR minus BC7's at equal bytes"),
    }
    params = (
        QUALITY,
        Param("steps", int, AUTO, "training steps", min=1, max=1_000_000),
        Param("batch", int, AUTO, "texels per step, drawn at random on the GPU", min=64, max=1 << 22),
        Param("width", int, AUTO, "hidden layer width", min=4, max=256),
        Param("layers", int, AUTO, "hidden layers", min=1, max=8),
        Param("octaves", int, 8, "frequency-encoding octaves per UV axis", min=1, max=16),
        Param("activation", str, "relu", "hidden activation", choices=ACTIVATIONS),
        Param("loss", str, "l2", "training loss", choices=LOSSES),
        Param("lr", float, 5e-3, "Adam learning rate", min=1e-6, max=1.0),
        Param("schedule", str, "cosine", "learning-rate schedule", choices=SCHEDULES),
        Param("weights_dtype", str, "float16", "dtype of weights.bin", choices=("float16", "float32")),
        Param("onnx_opset", int, OPSET, "opset of decoder.onnx (IR version to match)", choices=OPSETS),
    )

    @classmethod
    def resolve_auto(cls, params, *, device_class, files) -> dict:
        """The presets, no batch beyond the image's texels (read from its header)."""
        w, h = image_size(files["image"], key="image")
        return PRESETS.resolve(params, device_class=device_class, size=w * h)

    def run(self, ctx, inputs, params) -> StageResult:
        (inp,) = inputs
        image = load_image(inp.files["image"], key="image")
        h, w, c = image.shape
        device = ctx.device
        spec = NetworkSpec(FrequencyEncoding(2, params["octaves"]), (params["width"],) * params["layers"], c,
                           params["activation"])
        objective = TextureFit(device, image, loss=params["loss"])
        config = TrainConfig(steps=params["steps"], batch=params["batch"], optimizer=Adam(lr=params["lr"]),
                             schedule=params["schedule"], seed=ctx.seed)
        trainer = Trainer(device, spec, objective, config)
        live = TrainingProgress(ctx.progress, config.steps, probe=lambda done: _quality(objective, trainer, image),
                                curve_every=max(1, config.steps // CURVE_POINTS))
        trainer.train(progress=live)
        decoded = objective.decode(trainer)
        weights = trainer.params()
        score = psnr(decoded, image)
        ctx.log.info("%s: %dx%dx%d, %d steps (%s, %s), PSNR %.2f dB", inp.name, w, h, c, config.steps,
                     params.device_class, params["quality"], score)

        ctx.out.write_weights("weights.bin", spec, weights, dtype=params["weights_dtype"])
        ctx.out.write_png("preview.png", decoded)
        ctx.out.write_png("reference.png", image, role="reference")
        ctx.out.write_png("difference.png", np.abs(decoded - image) * DIFFERENCE_GAIN, role="difference")
        ctx.out.write_json("convergence.json", {"loss": "mse", "points": live.curve}, role="loss_curve")
        ctx.out.write_decoder_artifacts(spec, params=weights, onnx_opset=params["onnx_opset"])
        from bakery.baselines.material import same_bytes_image

        weight_bytes = int(np.asarray(weights).size) * (2 if params["weights_dtype"] == "float16" else 4)
        bc7 = same_bytes_image(image, weight_bytes)
        verdict = psnr_verdict(f"BC7 at equal bytes ({bc7['width']}x{bc7['height']}, {bc7['bytes']} B)", score,
                               bc7["psnr"], reason=budget_reason(PRESETS, params))
        return StageResult(metrics={"psnr_db": round(score, 4), "bc7_psnr_db": round(bc7["psnr"], 4),
                                    "weights_bytes": weight_bytes}, verdict=verdict,
                           manifest={"source": {"width": w, "height": h, "channels": c},
                                     "difference_gain": DIFFERENCE_GAIN})


#: The difference image shows |decoded - reference| times this, so small errors are visible.
DIFFERENCE_GAIN = 4.0


def _quality(objective: TextureFit, trainer: Trainer, image: np.ndarray) -> dict:
    """The live quality: the whole texture decoded now, its MSE and PSNR (what the
    manifest's final ``psnr_db`` measures), at the trainer's current step."""
    decoded = objective.decode(trainer)
    mse = float(np.mean((decoded.astype(np.float64) - image) ** 2))
    return {"step": trainer.step, "mse": mse, "psnr_db": psnr(decoded, image)}
