"""Shared fixtures: one Vulkan device per test session (lavapipe on CI)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def device():
    from bakery.device import open_device

    return open_device("auto")


@pytest.fixture(scope="session")
def coopvec_device(device):
    if not device.coopvec:
        pytest.skip("needs cooperative vectors (NVIDIA GPU, Vulkan); this device has none")
    return device
