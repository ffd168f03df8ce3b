"""Fine-tuning the baked latents: the level-0 latent texels trained directly against the
teacher through the frozen decoder, each read as the bundle stores it (kernels:
latent_finetune.slang). The encoder maps a texel's parameters to latents smoothly; the
texel's best latents for the decoder need not be a smooth function of them."""

from __future__ import annotations

import numpy as np

from bakery.nn.network import NetworkSpec
from bakery.nn.optimizers import Adam
from bakery.nn.parameters import PlainParameters, make_buffer
from bakery.nn.trainer import TrainConfig, Trainer
from bakery.shading.layered import LayerConstants
from bakery.stages.neural_material.objective import dir_features, material_uniforms


class LatentFinetune:
    """Objective for :class:`~bakery.nn.trainer.Trainer`: latents [H, W, N] of the material
    level ``material`` [H, W, 8] as one parameter group, the decoder frozen."""

    def __init__(self, device, material: np.ndarray, latents: np.ndarray, scale, bias, layers: LayerConstants,
                 *, loss: str, directions: str, latent_format: str, lr: float):
        dir_features(directions)
        self.layers, self.loss, self.directions, self.latent_format = layers, loss, directions, latent_format
        self.shape, self.latents = latents.shape[:2], int(latents.shape[2])
        self.texels = int(self.shape[0] * self.shape[1])
        self._material = make_buffer(device, np.ascontiguousarray(material, np.float32).reshape(-1))
        rng = np.stack([np.asarray(bias, np.float32), np.asarray(scale, np.float32)], -1)
        self._range = make_buffer(device, rng.reshape(-1))
        self._output = make_buffer(device, np.zeros(1, np.float32))  # declared by the shared include
        self.group = PlainParameters(device, latents, lr=lr)

    def slang_source(self) -> str:
        return (f'#define BK_LATENTS {self.latents}\n#define BK_DISPLAY_LOSS {int(self.loss == "display")}\n'
                f'#define BK_FRAME_FEATURES {int(self.directions == "frame")}\n'
                f'#define BK_LATENT_UNORM8 {int(self.latent_format == "unorm8")}\n'
                '#include "stages/neural_material/latent_finetune.slang"\n')

    def vars(self) -> dict:
        return {"g_material": self._material, "g_output": self._output, "g_latent_params": self.group.params,
                "g_latent_grads": self.group.grads, "g_latent_range": self._range}

    def uniforms(self, step: int, batch: int, seed: int) -> dict:
        return material_uniforms(self.texels, self.layers, step, batch, seed)

    def param_groups(self) -> list:
        return [self.group]

    def latents_now(self) -> np.ndarray:
        return self.group.download().reshape(*self.shape, self.latents)


def finetune_latents(device, decoder: NetworkSpec, decoder_params: np.ndarray, objective: LatentFinetune, *,
                     steps: int, batch: int, seed: int, progress=None) -> tuple[np.ndarray, np.ndarray]:
    """Trains ``objective``'s latents ``steps`` steps (cosine schedule) with the decoder's
    parameters fixed (Adam at learning rate 0), and returns (latents [H, W, N] unquantised,
    the decoder's parameters as training left them: unchanged).

    The frozen decoder still computes its weight gradients each step (the trainer has no
    frozen network): fine-tuning costs about what distillation does per step. On CoopVec,
    a step whose fp16 gradients overflow skips the network's update, not the latents'."""
    cfg = TrainConfig(steps=steps, batch=batch, optimizer=Adam(lr=0.0), schedule="cosine", seed=seed ^ 0xF17E)
    trainer = Trainer(device, decoder, objective, cfg, params=decoder_params)
    trainer.train(progress=progress)
    return objective.latents_now(), trainer.params()
