"""Every reduction the CoopVec backend can choose at run time compiles to SPIR-V on any
machine (tests/coopvec_spirv.py says how): per-workgroup slices (no cooperative matrices)
and split-K on cooperative matrices at 128 threads with and without warp copies of its
rows and at 256 threads. Elsewhere CoopVec code is generated only on an NVIDIA GPU."""

from __future__ import annotations

import pytest

from tests import coopvec_spirv


@pytest.fixture(scope="module")
def compiler():
    from bakery.device import Device

    spy_device = coopvec_spirv.spirv_device()
    return spy_device, Device(spy_device, "vulkan")


@pytest.mark.parametrize("job,device,group,copies", [
    ("texture", "coopvec_sm132", 256, False),
    ("texture", "coopmat_sm132", 128, True),
    ("texture_wide_input", "coopmat_sm132", 128, False),
    ("texture_wide", "coopmat", 256, False)])
def test_shipped_reduction_compiles_to_spirv(compiler, job, device, group, copies):
    spy_device, dev = compiler
    kernels = coopvec_spirv.programs(dev, (f"{device}/{job}/",))
    split_k = device.startswith("coopmat")
    entries = {name.rsplit("/", 1)[1] for name in kernels}
    assert {"train_step", "adam_step"} <= entries and ("bk_reduce_gradients" in entries) == split_k
    source = kernels[f"{device}/{job}/train_step"][0]
    assert f"#define BK_GROUP {group}\n" in source and f"#define BK_GRAD_MODE {2 if split_k else 0}\n" in source
    assert f"#define BK_ACTS_COPY {int(copies)}\n" in source
    for name, (source, entry) in kernels.items():
        asm = coopvec_spirv.compile_spirv(spy_device, source, entry)
        assert f'OpEntryPoint GLCompute %{entry} "main"' in asm, name
        if entry == "train_step":
            assert "OpCooperativeVectorMatrixMulAddNV" in asm and f"LocalSize {group} 1 1" in asm, name
        if entry == "bk_reduce_gradients":
            assert "OpCooperativeMatrixMulAddKHR" in asm, name


def test_compare_fails_where_a_kernel_differs_is_missing_or_is_new(tmp_path, capsys):
    """``python3 -m tests.coopvec_spirv --compare`` is how a backend change shows it left
    every kernel's SPIR-V as it was: its exit status says so, not only its printout."""
    before, after = tmp_path / "before", tmp_path / "after"
    for root in (before, after):
        (root / "coopmat/texture").mkdir(parents=True)
        (root / "coopmat/texture/train_step.spv-asm").write_text("OpCapability Shader\n%1 = OpTypeVoid\n")
    assert coopvec_spirv.main(["--compare", str(before), str(after)]) == 0
    (after / "coopmat/texture/adam_step.spv-asm").write_text("OpCapability Shader\n")
    assert coopvec_spirv.main(["--compare", str(before), str(after)]) == 1
    assert "new        coopmat/texture/adam_step.spv-asm" in capsys.readouterr().out
    (before / "coopmat/texture/adam_step.spv-asm").write_text("OpCapability Shader\n")
    (after / "coopmat/texture/train_step.spv-asm").write_text("OpCapability Shader\n%1 = OpTypeInt 32 0\n")
    assert coopvec_spirv.main(["--compare", str(before), str(after)]) == 1
    assert "differs    coopmat/texture/train_step.spv-asm" in capsys.readouterr().out
