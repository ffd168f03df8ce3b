"""run_task: params checked first, outputs published atomically, failures leave nothing."""

import json
import logging

import pytest

from pipeline_helpers import BlurStage, DeviceStage, FailStage, tree_snapshot, write_image

from bakery.errors import TaskError, UsageError
from bakery.pipeline.task import run_task
from bakery.stages import StageInput

LOG = logging.getLogger("test")


def _inputs(tmp_path):
    return [StageInput("a", {"image": write_image(tmp_path / "a.png")})]


def test_publishes_bundle_with_manifest(tmp_path):
    out = tmp_path / "out" / "blur" / "a"
    m = run_task(BlurStage, _inputs(tmp_path), {"radius": 2}, seed=3, device_provider=None,
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
        run_task(BlurStage, _inputs(tmp_path), {"radius": 99}, seed=0, device_provider=None,
                 out_dir=out, log=LOG)
    assert not (tmp_path / "out").exists()


def test_failure_keeps_previous_output_and_cleans_staging(tmp_path):
    out = tmp_path / "out" / "a"
    run_task(BlurStage, _inputs(tmp_path), {}, seed=0, device_provider=None, out_dir=out, log=LOG)
    before = tree_snapshot(tmp_path / "out")
    with pytest.raises(TaskError) as e:
        run_task(FailStage, _inputs(tmp_path), {}, seed=0, device_provider=None, out_dir=out,
                 log=LOG, where="fail/a")
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

    m = run_task(DeviceStage, _inputs(tmp_path), {}, seed=0, device_provider=provider,
                 out_dir=tmp_path / "d", log=LOG)
    assert m["device"]["adapter"] == "fake" and m["toolchain"]["driver"] == "1.0" and opened == [1]
    m = run_task(BlurStage, _inputs(tmp_path), {}, seed=0, device_provider=provider,
                 out_dir=tmp_path / "b", log=LOG)
    assert m["device"] is None and m["toolchain"] is None and opened == [1]
