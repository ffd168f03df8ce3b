"""Shared fixtures: one Vulkan device per test session (lavapipe on CI)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def device():
    from bakery.device import open_device

    return open_device("auto")


@pytest.fixture(scope="session")
def tiny_out(tmp_path_factory, device):
    """One out/ folder of tiny bundles of several kinds (tests/view_bundles.py), baked once
    for the viewer and engine-example tests."""
    from tests.view_bundles import bake

    return bake(tmp_path_factory.mktemp("tiny_out"), ("compress", "compress_bc", "neural_material", "mips", "texture"))


@pytest.fixture(scope="session")
def coopvec_device(device):
    if not device.coopvec:
        pytest.skip("needs cooperative vectors (NVIDIA GPU, Vulkan); this device has none")
    return device


class _SpyWithFakeLayouts:
    """The real slangpy device, except for the cooperative-vector layout calls."""

    def __init__(self, spy):
        from tests.test_coopvec_layout import _FakeSpy

        self._spy, self._layouts = spy, _FakeSpy()

    def get_coop_vec_matrix_size(self, *a, **k):
        return self._layouts.get_coop_vec_matrix_size(*a, **k)

    def convert_coop_vec_matrix(self, *a, **k):
        return self._layouts.convert_coop_vec_matrix(*a, **k)

    def __getattr__(self, name):
        return getattr(self._spy, name)


@pytest.fixture()
def coopvec_stand_in(device):
    """The session's device claiming cooperative vectors and matrices, with the fake
    matrix layouts of tests/test_coopvec_layout.py: CoopVec programs type-check and link
    on it (tests/test_coopvec_programs.py says why)."""
    import copy

    fake = copy.copy(device)
    fake.coopvec = fake.coopmat = True
    fake.spy = _SpyWithFakeLayouts(device.spy)
    fake._programs = {}
    fake.kernel_cache = type(device.kernel_cache)()
    return fake
