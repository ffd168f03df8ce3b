"""Stages for the runner tests: each dies by SIGKILL the first time it runs (a worker lost
mid-task) and builds normally once retried. Imported by worker processes through
``[project] plugins = ["runner_stages"]`` with ``tests/`` on their path."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from bakery.stages import Param, Stage, StageResult, register


def _die_first_time(marker: str) -> None:
    path = Path(marker)
    if not path.exists():
        path.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)


@register
class CrashOnceStage(Stage):
    """A CPU stage whose worker dies mid-task on the first attempt."""

    type_name = "test_crash_once"
    version = "1"
    uses_device = False
    input_roles = ("image",)
    params = (Param("marker", str, ""),)

    def run(self, ctx, inputs, params):
        ctx.out.write_bytes("half.txt", b"written before the crash")
        _die_first_time(params["marker"])
        ctx.out.write_bytes("done.txt", inputs[0].name.encode())
        return StageResult()


@register
class DeviceCrashOnceStage(Stage):
    """A device stage whose worker dies after opening its device, on the first attempt."""

    type_name = "test_device_crash_once"
    version = "1"
    uses_device = True
    input_roles = ("image",)
    params = (Param("marker", str, ""),)

    def run(self, ctx, inputs, params):
        device_class = ctx.device.device_class
        _die_first_time(params["marker"])
        ctx.out.write_json("device.json", {"class": device_class, "asset": inputs[0].name})
        return StageResult()
