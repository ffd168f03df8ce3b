"""Every stage's training program for the CoopVec backend builds on any device: its Slang
type-checks and links (train step, split-K sum, optimizer) with the default reduction of
a device with cooperative matrices (the generated backward pass), with Slang's autodiff's
and with the tile backward pass. The CPU device cannot run them; a device stand-in
(tests/conftest.py) says it has cooperative vectors and matrices and lays matrices out as
tests/test_coopvec_layout.py's fake does. So a CoopVec-only typo fails CI rather than a
GPU call; the GPU runs them in test_coopvec.py, test_ntc.py and test_neural_material.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bakery.nn import parameters
from bakery.nn.encodings import FrequencyEncoding
from bakery.nn.network import NetworkSpec
from bakery.nn.trainer import TrainConfig, Trainer




def _texture(dev):
    from bakery.stages.neural_texture.objective import TextureFit

    image = np.random.default_rng(0).random((16, 16, 3), dtype=np.float32)
    return NetworkSpec(FrequencyEncoding(2, 3), (64, 64), 3), TextureFit(dev, image)


def _ntc(dev, scatter="staged", **layout):
    from bakery.stages.ntc.objective import LatentTextureFit
    from bakery.stages.ntc.rate import choose

    image = np.random.default_rng(0).random((32, 32, 4), dtype=np.float32)
    point = choose(32, 32, 4, 16.0, hidden=16, layers=1, bits=4, pe_octaves=2)
    return point.network, LatentTextureFit(dev, image, point.grid, latent_scatter=scatter, lazy_latents=True,
                                           **(layout or {"line_texels": 8}))


def _ntc_patches(dev, scatter="staged"):
    """The large-set choice (patches, lazy updates), reading only the marked latent cells."""
    return _ntc(dev, scatter, patches=True, touched_cells=True)


def _ntc_patches_shuffle(dev):
    """Patches with the shuffle scatter (runs of lanes on one cell summed by shuffles)."""
    return _ntc_patches(dev, "shuffle")


def _material(dev):
    from bakery.shading.layered import LayerConstants
    from bakery.stages.neural_material.objective import MaterialDistillation, make_stack

    params = np.random.default_rng(0).uniform(0.3, 1.0, (8, 8, 8)).astype(np.float32)
    return make_stack(4, 8, 1, 8, "frame"), MaterialDistillation(dev, params, 4, LayerConstants(), loss="log",
                                                                 directions="frame")


@pytest.mark.parametrize("backward", ["default", "autodiff", "mma", "thread-stores", "two-forwards", "pipelined"])
@pytest.mark.parametrize("job", [_texture, _ntc, _ntc_patches, _ntc_patches_shuffle, _material],
                         ids=["neural_texture", "ntc", "ntc_patches", "ntc_patches_shuffle", "neural_material"])
def test_training_program_builds_for_coopvec(coopvec_stand_in, job, backward, monkeypatch):
    if backward == "pipelined":  # the default's split-K, its sums in the training dispatches
        monkeypatch.setattr(parameters, "COOPVEC_REDUCTION", dataclasses.replace(
            parameters.default_reduction(coopvec_stand_in, job(coopvec_stand_in)[0]), pipeline=3))
    elif backward != "default":
        monkeypatch.setattr(parameters, "COOPVEC_REDUCTION", parameters.CoopVecReduction(
            group=128, mode="splitk", reduce="mma", reduce_groups=132, unroll=2,
            backward="mma" if backward == "mma" else "coopvec",
            **({"generated_backward": True} if backward in ("thread-stores", "two-forwards") else {}),
            single_forward=backward != "two-forwards"))
    spec, objective = job(coopvec_stand_in)
    trainer = Trainer(coopvec_stand_in, spec, objective, TrainConfig(steps=1, batch=1024))
    # split-K: its sum kernel built too, unless the training dispatches sum (pipelined)
    assert trainer.store.coopvec and (trainer._reduce is None) == (backward == "pipelined")
    assert ("#define BK_PIPELINE 1" in trainer.source) == (backward == "pipelined")
    assert ("#define BK_TILE_BWD 1" in trainer.source) == (backward == "mma")
    default = backward in ("default", "pipelined")
    assert ("#define BK_GEN_BWD 1" in trainer.source) == (default or backward in ("thread-stores", "two-forwards"))
    # one forward per sample wherever the backward pass is generated, unless switched off
    assert ("#define BK_KEPT 1" in trainer.source) == (default or backward in ("thread-stores", "mma"))
    assert ("#define BK_ACTS_COPY 1" in trainer.source) == default
    assert ("#define BK_ACTS_TILED 1" in trainer.source) == default


def test_pipelined_step_trains_each_tile_once_and_sums_each_pass_after_it(coopvec_stand_in, monkeypatch):
    """The dispatches of a pipelined split-K step (CoopVecReduction.pipeline), as recorded:
    the passes cover the batch's tiles once, in order; each dispatch after the first sums
    the previous pass's rows from the buffer that pass wrote, while its own pass writes the
    other; the last dispatch only sums."""
    red = dataclasses.replace(parameters.default_reduction(coopvec_stand_in, _texture(coopvec_stand_in)[0]),
                              pipeline=3)
    monkeypatch.setattr(parameters, "COOPVEC_REDUCTION", red)
    spec, objective = _texture(coopvec_stand_in)
    batch = 40 * red.group - 5  # 40 tiles, the last ragged: passes of 14, 14 and 12
    trainer = Trainer(coopvec_stand_in, spec, objective, TrainConfig(steps=1, batch=batch))
    calls = []

    class Recorder:
        def dispatch(self, threads, vars, command_encoder, u):
            calls.append((threads[0], vars))

    trainer._train = Recorder()
    trainer._record_backward(None)
    rows = trainer.store.pass_rows
    assert rows[1] is not None and rows[0] is not rows[1]
    assert [(v["bk_pass_tile0"], v["bk_pass_tiles"]) for _, v in calls] == [(0, 14), (14, 14), (28, 12), (0, 0)]
    assert [v["bk_sum_samples"] for _, v in calls] == [0, 14 * red.group, 14 * red.group, 12 * red.group]
    for k, (threads, v) in enumerate(calls):
        assert v["g_acts"] is rows[k % 2] and v["g_sum_rows"] is rows[(k + 1) % 2]
        sums = v["bk_sum_groups"] * len(spec.layers) if v["bk_sum_samples"] else 0
        assert v["bk_pass_sum_wgs"] == sums  # the sum's workgroups first
        assert v["bk_pass_groups"] == min(v["bk_pass_tiles"], red.max_groups)
        assert threads == (v["bk_pass_groups"] + sums) * red.group
    # each pass's rows fit the buffers
    assert min(b.size for b in rows) >= 14 * red.group * trainer.store.row_bytes


def test_pipeline_needs_split_k():
    with pytest.raises(ValueError, match="pipeline"):
        parameters.CoopVecReduction(pipeline=2)  # per-workgroup slices store no rows to pass on
    with pytest.raises(ValueError, match="pipeline"):
        parameters.CoopVecReduction(mode="splitk", pipeline=0)
    r = parameters.CoopVecReduction(mode="splitk", group=128, reduce_groups=132, pipeline=4)
    assert r.passes(1000) == [(0, 2), (2, 2), (4, 2), (6, 2)]  # 8 tiles
    assert r.passes(100) == [(0, 1)]  # fewer tiles than passes
    assert r.pass_sum_groups() == 33 and parameters.CoopVecReduction(mode="splitk", pipeline=4,
                                                                      sum_groups=8).pass_sum_groups() == 8
