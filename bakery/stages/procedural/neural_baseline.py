"""The other baseline of a procedural program: a neural texture of equal bytes.

A studio that wants a texture in a few hundred bytes could also ship the UV -> RGB MLP of
stage ``neural_texture``, sized so its fp16 weights take no more bytes than the program's
compact JSON. It is trained here with that stage's objective and defaults, and scored as
the program is: PSNR, and the texture-statistics loss (texture_stats.py) that judges a
stochastic texture by appearance rather than noise phase.
"""

from __future__ import annotations

import numpy as np

from bakery.imaging import psnr
from bakery.nn.encodings import FrequencyEncoding
from bakery.nn.network import NetworkSpec
from bakery.nn.optimizers import Adam
from bakery.nn.trainer import TrainConfig, Trainer
from bakery.stages.neural_texture.objective import TextureFit
from bakery.stages.procedural import texture_stats

#: Bytes per weight: what an engine holds (neural_texture's default weights_dtype).
WEIGHT_BYTES = 2


def network_for_bytes(budget: int) -> tuple[int, int, int]:
    """(octaves, width, layers) of the largest UV -> RGB MLP whose fp16 weights fit ``budget`` bytes."""
    best = (0, 1, 1, 1)
    for octaves in range(1, 9):
        for layers in (1, 2):
            for width in range(2, 65):
                n_in = 4 * octaves
                params = n_in * width + width + (layers - 1) * (width * width + width) + 3 * width + 3
                if WEIGHT_BYTES * params <= budget and params > best[0]:
                    best = (params, octaves, width, layers)
    return best[1:]


def neural_texture_of_equal_bytes(device, image: np.ndarray, budget: int, *, steps: int, batch: int,
                                  seed: int, lr: float = 5e-3, target_stats: np.ndarray | None = None) -> dict:
    """Trains the largest neural texture within ``budget`` bytes on ``image`` (RGB, [H, W, 3])
    and scores it: {octaves, width, layers, weights_bytes, steps, psnr_db, texture_loss,
    decoded}. ``decoded`` is clipped to [0, 1], as an 8-bit display shows it.
    ``target_stats``: the image's texture statistics, where the caller already has them."""
    h, w = image.shape[:2]
    octaves, width, layers = network_for_bytes(budget)
    spec = NetworkSpec(FrequencyEncoding(2, octaves), (width,) * layers, 3, "relu")
    objective = TextureFit(device, np.ascontiguousarray(image[:, :, :3], np.float32))
    config = TrainConfig(steps=steps, batch=min(batch, h * w), optimizer=Adam(lr=lr), schedule="cosine", seed=seed)
    trainer = Trainer(device, spec, objective, config)
    trainer.train()
    decoded = np.clip(objective.decode(trainer), 0.0, 1.0)
    if target_stats is None:
        target_stats = texture_stats.statistics(image[:, :, :3])
    return {"octaves": octaves, "width": width, "layers": layers,
            "weights_bytes": WEIGHT_BYTES * spec.param_count, "steps": steps,
            "psnr_db": round(float(psnr(decoded, image[:, :, :3])), 4),
            "texture_loss": round(texture_stats.texture_loss(decoded, target_stats), 8),
            "decoded": decoded}
