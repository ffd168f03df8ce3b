"""bench/backward_anatomy.py's kernels type-check on any device (they run only where the
device has cooperative vectors), so a session's first GPU call does not find a typo."""

from __future__ import annotations

import pytest

from bench.backward_anatomy import VARIANTS, kernel_source


@pytest.mark.parametrize("variant", VARIANTS)
def test_anatomy_kernel_compiles(device, variant):
    module = device.spy.load_module_from_source(f"anatomy_test_{variant}", kernel_source(None, variant))
    device.spy.link_program([module], [module.entry_point("anatomy")])
