"""The CoopVec backend's training kernels compiled to SPIR-V on any machine, for every
configuration the product can choose at run time.

The CPU device has no cooperative vectors, so it cannot create their pipelines; but the
Slang compiler generates their SPIR-V before the driver refuses it, and slangpy's link
option ``dump_intermediates`` writes that SPIR-V out. So this compiles each kernel a
Trainer builds (train step, split-K sum, optimizer, the objective's own entry points) as
the GPU would (BAKERY_SOFTWARE 0), for each reduction ``default_reduction`` picks:
per-workgroup slices without cooperative matrices, split-K on them at 128 threads with
and without warp copies of the rows and at 256 threads, the workgroup counts sized from
no, the H200's and a capped multiprocessor count. tests/test_coopvec_spirv.py checks
that they compile; run as a script it writes the SPIR-V disassembly of every one, so two
trees' (before and after a change to the backend) can be compared file by file:

    python3 -m tests.coopvec_spirv OUT_DIR [--only NAME ...]
    python3 -m tests.coopvec_spirv --compare BEFORE_DIR AFTER_DIR

(``--compare`` says which kernels are byte-identical and, for the others, prints the diff
with SPIR-V's result ids blanked: code that only lost or gained a few instructions is
otherwise renumbered from there on; it exits 1 where any kernel differs, is missing or is new.)
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import difflib
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

#: Device stand-ins: (name, cooperative matrices, multiprocessors its driver reports).
#: 2048 multiprocessors meet FIXED_POINT_PARTIALS' cap.
DEVICES = (("coopvec", False, None), ("coopvec_sm132", False, 132),
           ("coopmat", True, None), ("coopmat_sm132", True, 132), ("coopmat_sm2048", True, 2048))


def _texture(dev, hidden=(64, 64), octaves=3):
    from bakery.nn.encodings import FrequencyEncoding
    from bakery.nn.network import NetworkSpec
    from bakery.stages.neural_texture.objective import TextureFit

    image = np.random.default_rng(0).random((16, 16, 3), dtype=np.float32)
    return NetworkSpec(FrequencyEncoding(2, octaves), hidden, 3), TextureFit(dev, image)


def _texture_wide_input(dev):
    """96 inputs: the split-K rows too wide for warp copies at 128 threads."""
    return _texture(dev, octaves=24)


def _texture_wide(dev):
    """128-wide layers: 256-thread workgroups."""
    return _texture(dev, hidden=(128, 128))


def _ntc(dev, scatter="staged", **layout):
    from bakery.stages.ntc.objective import LatentTextureFit
    from bakery.stages.ntc.rate import choose

    image = np.random.default_rng(0).random((32, 32, 4), dtype=np.float32)
    point = choose(32, 32, 4, 16.0, hidden=16, layers=1, bits=4, pe_octaves=2)
    return point.network, LatentTextureFit(dev, image, point.grid, latent_scatter=scatter, lazy_latents=True,
                                           **(layout or {"line_texels": 8}))


def _ntc_patches(dev):
    return _ntc(dev, "shuffle", patches=True, touched_cells=True)


def _material(dev):
    from bakery.shading.layered import LayerConstants
    from bakery.stages.neural_material.objective import MaterialDistillation, make_stack

    params = np.random.default_rng(0).uniform(0.3, 1.0, (8, 8, 8)).astype(np.float32)
    return make_stack(4, 8, 1, 8, "frame"), MaterialDistillation(dev, params, 4, LayerConstants(), loss="log",
                                                                 directions="frame")


JOBS = {"texture": _texture, "texture_wide_input": _texture_wide_input, "texture_wide": _texture_wide,
        "ntc": _ntc, "ntc_patches": _ntc_patches, "material": _material}


class _Recorder:
    """Stands in for a compiled kernel: the trainer and objectives only keep them."""

    def __init__(self, source: str, entry: str):
        self.source, self.entry = source, entry


def stand_in(device, coopmat: bool, sm_count: int | None):
    """``device`` (a bakery Device) claiming cooperative vectors (and matrices), ``sm_count``
    multiprocessors and a hardware adapter, with fake matrix layouts; its ``kernel``
    records the (source, entry point) asked for instead of compiling."""
    from tests.conftest import _SpyWithFakeLayouts

    fake = copy.copy(device)
    fake.coopvec, fake.coopmat = True, coopmat
    fake.sm_count = sm_count
    fake.info = dataclasses.replace(device.info, cooperative_vector=True, software=False)
    fake.spy = _SpyWithFakeLayouts(device.spy)
    fake.asked = []

    def kernel(source, entry):
        k = _Recorder(source, entry)
        fake.asked.append(k)
        return k

    fake.kernel = kernel
    return fake


def programs(device, only: tuple[str, ...] = ()) -> dict[str, tuple[str, str]]:
    """Every CoopVec kernel a Trainer builds, by "<device>/<job>/<entry>": (full source
    with the device's defines, entry point)."""
    from bakery.nn.trainer import TrainConfig, Trainer

    out = {}
    for dname, coopmat, sms in DEVICES:
        for jname, job in JOBS.items():
            name = f"{dname}/{jname}"
            if only and not any(f"{name}/".startswith(o) for o in only):
                continue
            fake = stand_in(device, coopmat, sms)
            spec, objective = job(fake)
            Trainer(fake, spec, objective, TrainConfig(steps=1, batch=1024))
            header = fake._header()  # the defines Device.kernel prepends, exactly
            for k in fake.asked:
                out[f"{name}/{k.entry}"] = (header + k.source, k.entry)
    return out


def spirv_device():
    """A slangpy device of this machine with bakery's include path and no shader cache
    (a cached kernel is not generated again, so nothing would be written out)."""
    import slangpy as spy

    from bakery.device import SLANG_DIR

    return spy.Device(type=spy.DeviceType.vulkan, enable_hot_reload=False,
                      compiler_options={"include_paths": [str(SLANG_DIR)]})


def compile_spirv(spy_device, source: str, entry: str, **link) -> str:
    """The SPIR-V disassembly Slang generates for ``entry`` of ``source``; raises with
    the compiler's or the driver's message where no SPIR-V came out."""
    with tempfile.TemporaryDirectory() as tmp:
        module = spy_device.load_module_from_source(f"coopvec_spirv_{abs(hash(source)) % 10**12}", source)
        program = spy_device.link_program([module], [module.entry_point(entry)], link_options={
            "dump_intermediates": True, "dump_intermediates_prefix": f"{tmp}/k_", **link})
        error = None
        try:
            spy_device.create_compute_pipeline(program=program)  # generates the code; a CPU driver then refuses it
        except Exception as e:  # noqa: BLE001 - only a missing SPIR-V is a failure
            error = e
        asm = sorted(Path(tmp).glob("k_*.spv-asm"))
        if not asm:
            raise RuntimeError(f"no SPIR-V for {entry}: {error}")
        return asm[-1].read_text()


def _without_ids(asm: str) -> list[str]:
    return [re.sub(r"%[A-Za-z0-9_.]+", "%_", line) for line in asm.splitlines() if not line.startswith("; Bound:")]


def compare(before: Path, after: Path) -> int:
    """Prints, per kernel of ``before``, whether ``after`` holds the same bytes; the
    id-blind diff where not; and the kernels only ``after`` has. Returns the number that
    differ, are missing or are new."""
    differ = 0
    for g in sorted(after.rglob("*.spv-asm")):
        if not (before / g.relative_to(after)).is_file():
            differ += 1
            print(f"new        {g.relative_to(after)}")
    for f in sorted(before.rglob("*.spv-asm")):
        name, g = f.relative_to(before), after / f.relative_to(before)
        if g.is_file() and f.read_bytes() == g.read_bytes():
            print(f"identical  {name}")
            continue
        differ += 1
        if not g.is_file():
            print(f"missing    {name}")
            continue
        print(f"differs    {name}")
        diff = difflib.unified_diff(_without_ids(f.read_text()), _without_ids(g.read_text()), lineterm="", n=1)
        print("\n".join(f"    {line}" for line in list(diff)[2:]))
    return differ


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?", help="folder for <device>/<job>/<entry>.spv-asm")
    p.add_argument("--only", nargs="*", default=(), help="name prefixes, as <device>/<job>/")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two such folders")
    a = p.parse_args(argv)
    if a.compare:
        return 1 if compare(Path(a.compare[0]), Path(a.compare[1])) else 0
    if not a.out:
        p.error("name a folder to write, or --compare two")
    from bakery.device import Device

    spy_device = spirv_device()
    kernels = programs(Device(spy_device, "vulkan"), tuple(a.only))
    for name, (source, entry) in kernels.items():
        path = Path(a.out) / f"{name}.spv-asm"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(compile_spirv(spy_device, source, entry))
        print(name, flush=True)
    print(f"{len(kernels)} kernels written under {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
