"""Stage ``neural_texture``: one texture as a small MLP from UV to its channels.

The UV -> colour network of the neural-shading literature: frequency-encoded UV, a few
hidden layers, RGB(A) out. Bundle: weights, decoded preview, ONNX decoder and generated
decoder shaders; the manifest carries the whole-image PSNR.
"""

from __future__ import annotations

from bakery.formats.images import load_image, psnr
from bakery.nn.activations import ACTIVATIONS
from bakery.nn.encodings import FrequencyEncoding
from bakery.nn.network import NetworkSpec
from bakery.nn.optimizers import SCHEDULES, Adam
from bakery.stages.neural_texture.objective import LOSSES, TextureFit
from bakery.nn.trainer import TrainConfig, Trainer
from bakery.stages import Param, Stage, StageResult, register
from bakery.stages.base import StepProgress


@register
class NeuralTexture(Stage):
    type_name = "neural_texture"
    version = "1"
    description = "fit a UV -> colour MLP to one texture"
    input_roles = ("image",)
    params = (
        Param("steps", int, 2000, "training steps", min=1, max=1_000_000),
        Param("batch", int, 1 << 16, "texels per step, drawn at random on the GPU", min=64, max=1 << 22),
        Param("width", int, 64, "hidden layer width", min=4, max=256),
        Param("layers", int, 3, "hidden layers", min=1, max=8),
        Param("octaves", int, 8, "frequency-encoding octaves per UV axis", min=1, max=16),
        Param("activation", str, "relu", "hidden activation", choices=ACTIVATIONS),
        Param("loss", str, "l2", "training loss", choices=LOSSES),
        Param("lr", float, 5e-3, "Adam learning rate", min=1e-6, max=1.0),
        Param("schedule", str, "cosine", "learning-rate schedule", choices=SCHEDULES),
        Param("weights_dtype", str, "float16", "dtype of weights.bin", choices=("float16", "float32")),
    )

    def run(self, ctx, inputs, params) -> StageResult:
        (inp,) = inputs
        image = load_image(inp.files["image"], key="image")
        h, w, c = image.shape
        spec = NetworkSpec(FrequencyEncoding(2, params["octaves"]), (params["width"],) * params["layers"], c,
                           params["activation"])
        device = ctx.device
        objective = TextureFit(device, image, loss=params["loss"])
        config = TrainConfig(steps=params["steps"], batch=params["batch"], optimizer=Adam(lr=params["lr"]),
                             schedule=params["schedule"], seed=ctx.seed)
        trainer = Trainer(device, spec, objective, config)
        trainer.train(progress=StepProgress(ctx, config.steps))
        decoded = objective.decode(trainer)
        weights = trainer.params()
        score = psnr(decoded, image)
        ctx.log.info("%s: %dx%dx%d, %d steps, PSNR %.2f dB", inp.name, w, h, c, config.steps, score)

        ctx.out.write_weights("weights.bin", spec, weights, dtype=params["weights_dtype"])
        ctx.out.write_png("preview.png", decoded)
        ctx.out.write_decoder_artifacts(spec, params=weights)
        return StageResult(metrics={"psnr_db": round(score, 4)},
                           manifest={"source": {"width": w, "height": h, "channels": c}})
