"""run_task: settings checked and resolved first, outputs published atomically, failures leave nothing."""

import json
import logging

import pytest

from pipeline_helpers import BlurStage, DeviceStage, FailStage, tree_snapshot, write_image

from bakery.errors import TaskError, UsageError
from bakery.pipeline.task import run_task, settings_for
from bakery.stages import StageInput

LOG = logging.getLogger("test")


def _inputs(tmp_path):
    return [StageInput("a", {"image": write_image(tmp_path / "a.png")})]


def _run(stage, inputs, params, **kw):
    return run_task(stage, inputs, settings_for(stage, params, inputs, device_class=None), **kw)


def test_publishes_bundle_with_manifest(tmp_path):
    out = tmp_path / "out" / "blur" / "a"
    m = _run(BlurStage, _inputs(tmp_path), {"radius": 2}, seed=3, device_provider=None,
                 out_dir=out, log=LOG, where="blur/a")
    assert (out / "blurred.png").is_file()
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk["stage"] == {"type": "test_blur", "version": "1"}
    assert on_disk["params"] == {"radius": 2, "gain": 1.0} == m["params"]
    assert on_disk["seed"] == 3 and on_disk["device"] is None
    assert "mean" in on_disk["metrics"]
    # nothing but the published folder is left beside it
    assert [p.name for p in out.parent.iterdir()] == ["a"]


def test_bad_param_fails_before_any_work(tmp_path):
    out = tmp_path / "out" / "a"
    with pytest.raises(UsageError, match=r"params.radius: 99 is out of range"):
        _run(BlurStage, _inputs(tmp_path), {"radius": 99}, seed=0, device_provider=None, out_dir=out, log=LOG)
    with pytest.raises(TypeError, match="Settings"):  # raw parameters never reach a stage unchecked
        run_task(BlurStage, _inputs(tmp_path), {"radius": 99}, seed=0, device_provider=None, out_dir=out, log=LOG)
    assert not (tmp_path / "out").exists()


def test_failure_keeps_previous_output_and_cleans_staging(tmp_path):
    out = tmp_path / "out" / "a"
    _run(BlurStage, _inputs(tmp_path), {}, seed=0, device_provider=None, out_dir=out, log=LOG)
    before = tree_snapshot(tmp_path / "out")
    with pytest.raises(TaskError) as e:
        _run(FailStage, _inputs(tmp_path), {}, seed=0, device_provider=None, out_dir=out, log=LOG, where="fail/a")
    assert str(e.value) == "fail/a: RuntimeError: boom on a"
    assert tree_snapshot(tmp_path / "out") == before
    assert [p.name for p in out.parent.iterdir()] == ["a"]


def test_device_recorded_only_when_opened(tmp_path):
    class Info:
        def to_dict(self):
            return {"backend": "vulkan", "adapter": "fake", "cooperative_vector": False, "software": True}

    from bakery.device import Toolchain

    class Dev:
        info, device_class = Info(), "fake-class"
        toolchain = Toolchain("0", "0", "vulkan", "fake", "1.0", False)

    opened = []

    def provider():
        opened.append(1)
        return Dev()

    m = _run(DeviceStage, _inputs(tmp_path), {}, seed=0, device_provider=provider,
                 out_dir=tmp_path / "d", log=LOG)
    assert m["device"]["adapter"] == "fake" and m["toolchain"]["driver"] == "1.0" and opened == [1]
    m = _run(BlurStage, _inputs(tmp_path), {}, seed=0, device_provider=provider,
             out_dir=tmp_path / "b", log=LOG)
    assert m["device"] is None and m["toolchain"] is None and opened == [1]


def test_a_device_of_another_class_than_the_settings_were_resolved_for_is_refused(tmp_path):
    """``auto`` values are a device class's: a task resolved for a CPU device that opens a
    GPU (or the reverse) fails before the stage runs, leaving nothing."""
    from bakery.stages import Param, Stage, StageResult
    from bakery.stages.params import AUTO, QUALITY, Presets

    class Sized(Stage):
        type_name = "test_sized"
        presets = Presets({c: {q: {"steps": n} for q in ("preview", "production", "final")}
                           for c, n in (("cpu", 3), ("gpu", 300))})
        params = (QUALITY, Param("steps", int, AUTO, min=1))

        def run(self, ctx, inputs, params):
            ctx.device
            ctx.out.write_json("steps.json", {"steps": params["steps"]})
            return StageResult()

    from bakery.device import Toolchain

    class Dev:
        def __init__(self, adapter):
            self.device_class = f"vulkan:{adapter}"
            self.info = type("Info", (), {"to_dict": lambda self: {"adapter": adapter}})()
            self.toolchain = Toolchain("0", "0", "vulkan", adapter, "1.0", False)

    settings = settings_for(Sized, {}, _inputs(tmp_path), device_class="vulkan:llvmpipe (LLVM 15)")
    assert (settings["steps"], settings.device_class, settings.auto) == (3, "cpu", ["steps"])
    with pytest.raises(TaskError, match="opened a gpu device but the parameters were resolved for a cpu one"):
        run_task(Sized, _inputs(tmp_path), settings, seed=0, device_provider=lambda: Dev("NVIDIA H200"),
                 out_dir=tmp_path / "gpu", log=LOG)
    assert not (tmp_path / "gpu").exists()
    m = run_task(Sized, _inputs(tmp_path), settings, seed=0, device_provider=lambda: Dev("llvmpipe (LLVM 15)"),
                 out_dir=tmp_path / "cpu", log=LOG)
    assert m["params"] == {"quality": "production", "steps": "auto"}
    assert m["resolved_params"] == {"device_class": "cpu", "quality": "production", "auto": ["steps"],
                                    "values": {"quality": "production", "steps": 3}}
