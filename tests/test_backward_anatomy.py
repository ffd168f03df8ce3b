"""bench/backward_anatomy.py's kernels type-check on any device (they run only where the
device has cooperative vectors), so a typo is found on the CPU, not first on a GPU. The
network variants build through the CoopVec stand-in (tests/conftest.py)."""

from __future__ import annotations

import pytest

from bench.backward_anatomy import NETWORKS, VARIANTS, kernel_source, network_kernel_source, network_store


@pytest.mark.parametrize("variant", VARIANTS)
def test_anatomy_kernel_compiles(device, variant):
    module = device.spy.load_module_from_source(f"anatomy_test_{variant}", kernel_source(None, variant))
    device.spy.link_program([module], [module.entry_point("anatomy")])


@pytest.mark.parametrize("variant", NETWORKS)
def test_anatomy_network_kernel_compiles(coopvec_stand_in, variant):
    store = network_store(coopvec_stand_in, variant)
    source = network_kernel_source(store, variant)
    assert ("#define BK_GEN_BWD 1" in source) == NETWORKS[variant][2]
    # the lab's layers without row stores, but where the variant times them
    assert ("LabLinear<" in source) == (NETWORKS[variant][4] is None)
    coopvec_stand_in.kernel(source, "anatomy")
