"""Every stage's training program for the CoopVec backend builds on any device: its Slang
type-checks and links (train step, split-K sum, optimizer) with the default reduction of
a device with cooperative matrices (the generated backward pass), with Slang's autodiff's,
with rows stored per thread and with the forward run twice (the lab's forward_twice).
tests/test_coopvec_spirv.py also generates their SPIR-V for every reduction the product
can choose. The CPU device cannot run them; a device stand-in
(tests/conftest.py) says it has cooperative vectors and matrices and lays matrices out as
tests/test_coopvec_layout.py's fake does. So a CoopVec-only typo fails CI rather than a
GPU call; the GPU runs them in test_coopvec.py, test_ntc.py and test_neural_material.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.experiments import reduction as lab
from bench.experiments.reduction import always, forward_twice

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


@pytest.mark.parametrize("backward", ["default", "autodiff", "thread-stores", "two-forwards"])
@pytest.mark.parametrize("job", [_texture, _ntc, _ntc_patches, _ntc_patches_shuffle, _material],
                         ids=["neural_texture", "ntc", "ntc_patches", "ntc_patches_shuffle", "neural_material"])
def test_training_program_builds_for_coopvec(coopvec_stand_in, job, backward, monkeypatch):
    if backward != "default":
        monkeypatch.setattr(parameters, "default_reduction", always(parameters.CoopVecReduction(
            group=128, mode="splitk", reduce_groups=132, unroll=2,
            generated_backward=backward in ("thread-stores", "two-forwards"))))
    if backward == "two-forwards":
        monkeypatch.setattr(parameters.ParameterStore, "defines", forward_twice(parameters.ParameterStore.defines))
    spec, objective = job(coopvec_stand_in)
    trainer = Trainer(coopvec_stand_in, spec, objective, TrainConfig(steps=1, batch=1024))
    assert trainer.store.coopvec and trainer._reduce is not None  # split-K: its sum kernel built too
    assert ("#define BK_GEN_BWD 1" in trainer.source) == (backward in ("default", "thread-stores", "two-forwards"))
    # one forward per sample wherever the backward pass is generated, unless switched off
    assert ("#define BK_KEPT 1" in trainer.source) == (backward in ("default", "thread-stores"))
    assert ("#define BK_ACTS_COPY 1" in trainer.source) == (backward == "default")
    assert ("#define BK_ACTS_TILED 1" in trainer.source) == (backward == "default")


def test_forward_twice_refuses_a_reduction_that_keeps_no_forward():
    """The lab's forward_twice turns BK_KEPT off; on a reduction whose backward pass is not
    generated there is nothing to turn off, and a benchmark would time the product unchanged."""
    from tests.test_coopvec_layout import _FakeDevice

    spec = NetworkSpec(FrequencyEncoding(2, 3), (64, 64), 3)
    twice = forward_twice(parameters.ParameterStore.defines)
    generated = parameters.ParameterStore(_FakeDevice(), spec, reduction=parameters.CoopVecReduction(
        group=128, mode="splitk", generated_backward=True))
    assert "#define BK_KEPT 0\n" in twice(generated) and "#define BK_KEPT 1\n" in generated.defines()
    autodiff = parameters.ParameterStore(_FakeDevice(), spec, reduction=parameters.CoopVecReduction(
        group=128, mode="splitk"))
    with pytest.raises(ValueError, match="keeps no forward"):
        twice(autodiff)


def test_a_reduction_from_json_is_the_one_named_or_refused(tmp_path):
    """``--reduction`` of bench/ntc.py and train_texture.py: grad_reduction.py's result file
    or JSON gives the variant it names, recorded as JSON again; a removed design's field, or
    the sum-less diagnostic those scripts never apply, is refused rather than dropped (the
    run would time the product's design under another name)."""
    best = lab.Variant(parameters.CoopVecReduction(group=128, mode="splitk", unroll=2), forward_twice=False)
    result = tmp_path / "grad_reduction.json"
    result.write_text(json.dumps({"benchmark": "grad_reduction", "best": best.to_dict()}))
    try:
        assert lab.use_json(str(result)) == best == lab.chosen()
        assert json.loads(json.dumps(lab.chosen().to_dict())) == best.to_dict()  # what ntc.py writes
        with pytest.raises(ValueError, match="unknown gradient reduction field.*backward"):
            lab.use_json('{"group": 128, "mode": "splitk", "backward": "mma"}')
        with pytest.raises(ValueError, match="skip_sum"):
            lab.use_json('{"group": 128, "mode": "splitk", "skip_sum": true}')
        with pytest.raises(ValueError, match="skip_sum"):
            lab.use_json('{"skip_sum": true}')  # over the product's choice too
    finally:
        lab.use(None)


def test_lab_changes_over_the_product_choice(coopvec_stand_in):
    """A variant named without a reduction keeps the product's choice and records the one a
    store took; apply() with skip_sum (grad_reduction.py's diagnostic) drops only the split-K
    sum dispatch, the training kernel stays the product's."""
    spec, objective = _texture(coopvec_stand_in)
    try:
        twice = lab.use_json('{"forward_twice": true}')
        assert twice.reduction is None and parameters.default_reduction is lab._PRODUCT_CHOICE
        used = parameters.CoopVecReduction(group=128, mode="splitk")
        assert twice.to_dict(used) == dict(used.__dict__, forward_twice=True, skip_sum=False)
        lab.use(lab.Variant(None, skip_sum=True))
        trainer = Trainer(coopvec_stand_in, spec, objective, TrainConfig(steps=1, batch=1024))
        train = trainer._train
        assert trainer._reduce is not None
        lab.apply(trainer)
        assert trainer._train is train and trainer._reduce is None
    finally:
        lab.use(None)
