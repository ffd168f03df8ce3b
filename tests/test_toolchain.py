"""The toolchain in the cache key and the manifest: what it holds, that planning learns it
without opening a device, that a change rebuilds and says why, and that two identical
GPUs share it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import bakery.device
from bakery import vulkan_probe
from bakery.errors import DeviceError
from bakery.pipeline.cache import Cache, why_rebuild
from bakery.pipeline.cli import bake_cmd
from bakery.pipeline.config import load_pipeline
from bakery.pipeline.planner import plan
from bakery.pipeline.worker import DevicePool, build

from pipeline_helpers import BASIC_TOML, make_project

DEVICE_TOML = BASIC_TOML + '\n[stages.dev]\ntype = "test_device"\ninputs = ["photos"]\n'
FIELDS = {"slangpy", "slang", "backend", "coopvec", "adapter", "driver"}


@pytest.fixture
def project(tmp_path, monkeypatch):
    make_project(tmp_path, DEVICE_TOML)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_device_stages_key_the_toolchain_and_cpu_stages_none(project, monkeypatch):
    import slangpy as spy

    def boom(*a, **k):
        raise AssertionError("device opened while planning")

    monkeypatch.setattr("bakery.device.open_device", boom)
    specs = plan(load_pipeline(project / "pipeline.toml"))
    dev = [s for s in specs if s.stage == "dev"]
    tool = dev[0].toolchain
    assert set(tool) == FIELDS and all(s.parts["toolchain"] == tool for s in dev)
    assert tool["slangpy"] == spy.__version__ and tool["slang"] == spy.SLANG_BUILD_TAG
    assert tool["backend"] in ("vulkan", "cuda") and tool["adapter"] and tool["driver"] != "unknown"
    if "llvmpipe" in tool["adapter"]:  # the CPU's Vulkan: the driver is Mesa's version, no CoopVec
        assert tool["driver"].startswith("Mesa ") and tool["coopvec"] is False
    assert all(s.toolchain is None and s.parts["toolchain"] is None for s in specs if s.stage == "blur")


def test_the_manifest_records_the_toolchain_the_key_holds(project):
    assert CliRunner().invoke(bake_cmd, ["pipeline.toml", "--only", "dev"]).exit_code == 0
    spec = next(s for s in plan(load_pipeline(project / "pipeline.toml")) if s.stage == "dev")
    manifest = json.loads((project / "out" / "dev" / spec.asset / "manifest.json").read_text())
    assert manifest["toolchain"] == spec.toolchain


def test_a_toolchain_change_rebuilds_and_says_which_field(project, monkeypatch):
    assert CliRunner().invoke(bake_cmd, ["pipeline.toml", "--only", "dev"]).exit_code == 0
    real = bakery.device.probe_toolchain

    def upgraded(kind, **kw):
        t = real(kind, **kw)
        return type(t)(**{**t.to_dict(), "driver": "999.1"})

    monkeypatch.setattr("bakery.device.probe_toolchain", upgraded)
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml", "--only", "dev", "--dry-run"])
    assert r.exit_code == 3
    assert "toolchain changed (driver " in r.output and "-> 999.1)" in r.output
    old = {"inputs": {}, "upstream": {}, "params": {}, "seed": 0, "stage": "s", "stage_version": "1",
           "bakery_version": "1", "code": "c", "device_class": "d", "toolchain": {"slangpy": "0.43.1"}}
    assert why_rebuild(old, {**old, "toolchain": {"slangpy": "0.44.0"}}) == "toolchain changed (slangpy 0.43.1 -> 0.44.0)"


def test_a_worker_refuses_a_device_of_another_toolchain(project):
    spec = next(s for s in plan(load_pipeline(project / "pipeline.toml")) if s.stage == "dev")
    other = type(spec)(**{**spec.__dict__, "toolchain": {**spec.toolchain, "slang": "0.0-other"}})
    import logging

    with pytest.raises(DeviceError, match="toolchain.*slang 0.0-other -> "):
        build(other, Cache(project / ".bakery-cache"), DevicePool(), log=logging.getLogger("test"))


def test_two_identical_gpus_on_one_driver_share_a_toolchain(monkeypatch):
    """The key names the model and driver, never one GPU: a farm of identical GPUs shares a cache."""
    gpus = tuple(vulkan_probe.PhysicalDevice(name="NVIDIA H200", uuid=bytes([i] * 16), driver_name="NVIDIA",
                                             driver_info="580.159.04", extensions=frozenset(), sm_count=132)
                 for i in (1, 2))
    monkeypatch.setattr(vulkan_probe, "physical_devices", lambda: gpus)
    first, second = (bakery.device.toolchain_of("vulkan", g.name, list(g.uuid), coopvec=True) for g in gpus)
    assert first == second and first.driver == "580.159.04"
    assert set(first.to_dict()) == FIELDS


def test_a_cached_rebake_opens_no_device(project, monkeypatch):
    """The key's toolchain comes from listing adapters and reading their drivers' properties,
    so a bake whose tasks are all cached never creates a device."""
    assert CliRunner().invoke(bake_cmd, ["pipeline.toml", "--only", "dev"]).exit_code == 0

    def boom(*a, **k):
        raise AssertionError("device opened for a cached re-bake")

    monkeypatch.setattr("bakery.device.open_device", boom)
    monkeypatch.setattr("bakery.device._create", boom)
    r = CliRunner().invoke(bake_cmd, ["pipeline.toml", "--only", "dev"])
    assert r.exit_code == 0 and "0 built, 3 cached" in r.output, r.output
