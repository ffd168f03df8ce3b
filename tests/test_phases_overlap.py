"""A task's host seconds per phase (bakery.phases) and the work it runs beside training
(bakery.overlap): the record each task logs is present and adds up, side work changes no
byte of a bundle, fails where its result is taken, and never holds a bake open past a signal."""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import threading
from pathlib import Path

import numpy as np
import pytest

from bakery import overlap, phases
from bakery.formats.images import encode_png
from bakery.pipeline.task import run_task, settings_for
from bakery.stages import StageInput, get_stage
from tests.stage_tasks import material

REPO = Path(__file__).resolve().parent.parent
#: ntc with the BCn comparison (computed beside training) steering by margins, and the
#: source/baseline PNGs it ships; mipmap with BCn chains (level 0 encoded beside training).
TASKS = {
    "ntc": {"quality": "preview", "steps": 12, "bpp": 12, "batch": 512, "hidden": 8, "layers": 1,
            "baseline": True, "weighting": "margin"},
    "mipmap": {"quality": "preview", "steps": 10, "pairs": 2, "eval_pairs": 4},
    "neural_material": {"quality": "preview", "steps": 10, "batch": 256, "hidden": 16, "encoder_hidden": 16,
                        "eval_directions": 3},
}


#: A file each task writes from work done beside training.
SHIPS = {"ntc": "baseline_albedo.png", "mipmap": "albedo.dds", "neural_material": "latents.ktx2"}


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _bake(stage_type: str, inputs_dir: Path, out: Path, device) -> tuple[dict, list[str]]:
    stage = get_stage(stage_type)
    inputs = [StageInput("m", material(inputs_dir, 32) if not inputs_dir.exists() else _files(inputs_dir))]
    settings = settings_for(stage, TASKS[stage_type], inputs, device_class=device.device_class)
    log = logging.getLogger(f"test.phases.{stage_type}.{out.name}")
    handler = _Lines()
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        run_task(stage, inputs, settings, seed=3, device_provider=lambda: device, out_dir=out, log=log)
    finally:
        log.removeHandler(handler)
    return _sums(out), handler.lines


def _files(folder: Path) -> dict[str, Path]:
    from bakery.pipeline.config import role_files

    return role_files(folder, ("albedo", "normal", "roughness", "metalness", "ao", "height"))


def _sums(bundle: Path) -> dict[str, str]:
    return {p.relative_to(bundle).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(bundle.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("stage_type", sorted(TASKS))
def test_side_work_gives_the_serial_bytes_and_phases_add_up(stage_type, tmp_path, device, monkeypatch):
    inputs = tmp_path / "inputs"
    beside, lines = _bake(stage_type, inputs, tmp_path / "overlapped", device)
    monkeypatch.setattr(overlap, "default_workers", lambda: 0)   # every item run at once, in order
    serial, _ = _bake(stage_type, inputs, tmp_path / "serial", device)
    assert beside == serial and SHIPS[stage_type] in beside

    records = [phases.parse_log(line) for line in lines if phases.PHASES_LOG_PREFIX in line]
    assert len(records) == 1, lines
    rec = records[0]
    on = rec["phases"]
    assert set(on) <= set(phases.PHASES) | {"other"} and set(rec["overlapped"]) <= set(phases.PHASES)
    assert all(v >= 0 for v in on.values()) and all(v >= 0 for v in rec["overlapped"].values())
    for phase in ("load", "training", "metrics", "encoding", "writing"):
        assert on.get(phase, 0) > 0, (phase, rec)
    assert on["other"] < 0.25 * rec["wall_s"], rec   # the stage marks nearly all of its time
    assert on["training"] < rec["wall_s"]
    side = "baselines" if stage_type == "ntc" else "encoding"   # the BCn comparison; level 0's blocks, the KTX2
    assert side in rec["overlapped"], rec


def test_nested_phases_count_once_and_other_threads_apart():
    now = [0.0]
    clock = phases.PhaseClock(now=lambda: now[0])

    def beside():
        with clock.time("baselines"):
            now[0] += 4.0

    with clock.time("encoding"):
        now[0] += 1.0
        with clock.time("writing"):
            now[0] += 2.0
        now[0] += 0.5
    worker = threading.Thread(target=beside)
    worker.start()
    worker.join()
    now[0] += 1.0
    rec = clock.record()
    assert rec == {"wall_s": 8.5, "phases": {"encoding": 1.5, "writing": 2.0, "other": 5.0},
                   "overlapped": {"baselines": 4.0}}
    with pytest.raises(ValueError, match="unknown phase"):
        with clock.time("compiling"):
            pass
    with phases.time("load"):   # outside a task: nothing is recorded, nothing fails
        pass
    with phases.recording() as task:   # inside one: the task's clock counts it
        with phases.time("load"):
            pass
    assert set(task.record()["phases"]) == {"load", "other"}


def test_side_work_raises_where_the_result_is_taken_and_close_drops_the_queue():
    release = threading.Event()
    with overlap.SideWork(workers=1) as side:
        blocked = side.submit("encoding", release.wait)
        queued = side.submit("encoding", lambda: "never")
    # left while the first item still runs: the queued one is dropped, nothing waited for
    assert queued.future.cancelled() and not blocked.done()
    release.set()
    assert blocked.result() is True

    with overlap.SideWork(workers=2) as side:
        failing = side.submit("baselines", lambda: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            failing.result()
    with pytest.raises(ZeroDivisionError):   # serial mode: the same, raised at the same place
        overlap.SideWork(workers=0).submit("baselines", lambda: 1 / 0).result()


def _niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="per-thread nice is a POSIX/Linux notion")
def test_side_work_and_bcn_bands_run_below_the_task_thread(monkeypatch):
    """Eight tasks' encodes must not starve the threads feeding the device: side work and
    the BCn encoder's bands lower their own priority, the task's thread keeps its own."""
    from bakery.baselines import bcn

    own = _niceness()
    lowered = max(own, overlap.SIDE_NICENESS)
    with overlap.SideWork(workers=1) as side:
        assert side.submit("encoding", _niceness).result() == lowered
    seen = []
    real = bcn._compress
    monkeypatch.setattr(bcn, "encode_threads", lambda: 2)   # bands on threads, even on a 2-core host
    monkeypatch.setattr(bcn, "_compress", lambda a, fmt, profile: (seen.append(_niceness()), real(a, fmt, profile))[1])
    blocks = bcn.encode(np.zeros((1024, 1024, 3), np.float32), "bc1")
    assert len(blocks) == bcn.encoded_size("bc1", 1024, 1024)
    assert seen == [lowered, lowered]
    assert _niceness() == own


STUCK_STAGE = '''\
import os, threading
from pathlib import Path
from bakery.overlap import SideWork
from bakery.stages.base import Stage, register

@register
class StuckBeside(Stage):
    """Waits for side work that never ends (an encode of a huge map, as far as a signal knows)."""
    type_name = "test_stuck_beside"
    uses_device = False

    def run(self, ctx, inputs, params):
        with SideWork(workers=1) as side:
            pending = side.submit("encoding", threading.Event().wait)
            Path(os.environ["BAKERY_TEST_STARTED"]).touch()
            pending.result()
'''


def test_sigterm_stops_a_bake_waiting_on_side_work_within_seconds(tmp_path):
    """A signal ends a bake by raising in the task's thread; the process must then exit at
    once with an encode still running beside it (side threads are daemons)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.png").write_bytes(encode_png(np.full((8, 8, 3), 0.5, np.float32)))
    (tmp_path / "stuck_stage.py").write_text(STUCK_STAGE)
    (tmp_path / "pipeline.toml").write_text('[project]\nout = "out"\ncache = "cache"\nplugins = ["stuck_stage"]\n'
                                            '[assets.photos]\nimage = "src/*.png"\n'
                                            '[stages.stuck]\ntype = "test_stuck_beside"\ninputs = ["photos"]\n')
    started = tmp_path / "started"
    from pipeline_helpers import bake_until_started

    p = bake_until_started(tmp_path, {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])), "BAKERY_TEST_STARTED": str(started)})
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=20)   # a pool that joined its threads would hang here
    assert p.returncode == 143 and "interrupted" in err and "Traceback" not in err
    assert not list(tmp_path.rglob(".*staging*"))
