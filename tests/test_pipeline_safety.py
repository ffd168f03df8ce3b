"""Crash safety and locking, with real bake subprocesses."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline_helpers import SLEEP_TOML, make_project, tree_snapshot

from bakery.pipeline.lock import LockBusy, OutputLock

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent



def _env(started: Path | None = None, release: Path | None = None) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(REPO), env.get("PYTHONPATH", "")])
    if started:
        env["BAKERY_TEST_STARTED"] = str(started)
    if release:
        env["BAKERY_TEST_RELEASE"] = str(release)
    return env


def _bake_proc(root: Path, *args: str, started: Path | None = None, release: Path | None = None,
               stderr=subprocess.PIPE) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "from bakery.pipeline.cli import bake_cmd; bake_cmd()", "pipeline.toml", *args],
        cwd=root, env=_env(started, release), stdout=subprocess.PIPE, stderr=stderr, text=True)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60.0, text: str | None = None) -> None:
    """Until ``path`` exists (and holds ``text``, if given); fails if ``proc`` ends first."""
    t0 = time.monotonic()
    while not path.exists() or (text is not None and text not in path.read_text()):
        if proc.poll() is not None:
            raise AssertionError(f"bake ended early: {proc.communicate()}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            raise AssertionError(f"bake never got there: {path.name}" + (f" holding {text!r}" if text else ""))
        time.sleep(0.02)


def test_sigkill_mid_task_keeps_previous_outputs_and_rerun_succeeds(tmp_path):
    make_project(tmp_path, SLEEP_TOML.format(seconds=0.0, tag="old"), images=("a", "b"))
    first = _bake_proc(tmp_path)
    assert first.wait(timeout=30) == 0, first.communicate()
    before = tree_snapshot(tmp_path / "out" / "slow")
    assert (tmp_path / "out/slow/photos/a/data.txt").read_text() == "photos/a old"

    # new params: both tasks rebuild; kill while the first one sleeps
    (tmp_path / "pipeline.toml").write_text(SLEEP_TOML.format(seconds=30.0, tag="new"))
    started = tmp_path / "started"
    victim = _bake_proc(tmp_path, started=started)
    _wait_for(started, victim)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    assert victim.returncode == -signal.SIGKILL
    assert tree_snapshot(tmp_path / "out" / "slow") == before  # byte-identical previous outputs

    (tmp_path / "pipeline.toml").write_text(SLEEP_TOML.format(seconds=0.0, tag="new"))
    rerun = _bake_proc(tmp_path)
    out, err = rerun.communicate(timeout=30)
    assert rerun.returncode == 0, err
    assert "2 built" in out
    assert "staging folder(s) left by an interrupted bake" in err
    assert (tmp_path / "out/slow/photos/a/data.txt").read_text() == "photos/a new"
    leftovers = [p for p in tmp_path.rglob(".*staging*")]
    assert leftovers == []


def test_concurrent_bakes_are_serialised(tmp_path):
    # A handshake, not a sleep: the first bake's task holds until the test writes `release`,
    # which it does only once the second bake says it is waiting for the lock.
    make_project(tmp_path, SLEEP_TOML.format(seconds=0.0, tag="x"), images=("a",))
    started, release, log2 = tmp_path / "started", tmp_path / "release", tmp_path / "second.err"
    first = _bake_proc(tmp_path, started=started, release=release)
    try:
        _wait_for(started, first)
        busy = _bake_proc(tmp_path, "--no-wait")
        _, err = busy.communicate(timeout=60)
        assert busy.returncode == 2, err
        assert "another bake is running on this output folder" in err and "--no-wait" in err
        with log2.open("w") as sink:
            second = _bake_proc(tmp_path, stderr=sink)
            _wait_for(log2, second, text="waiting for another bake on")
            assert first.poll() is None  # still holding the lock while the second waits
            release.touch()
            out2, _ = second.communicate(timeout=60)
        out1, _ = first.communicate(timeout=60)
    finally:
        release.touch()  # never leave the first bake holding on a failure above
    assert first.returncode == 0 and second.returncode == 0, log2.read_text()
    assert "1 built" in out1 and "1 cached" in out2  # the second waited, then found the cache
    report = json.loads((tmp_path / "out/bake-report.json").read_text())
    assert report["totals"]["cached"] == 1


def test_lock_in_process(tmp_path):
    out = tmp_path / "out"
    with OutputLock(out):
        fd_holder = subprocess.run(
            [sys.executable, "-c",
             "import sys; from pathlib import Path; from bakery.pipeline.lock import OutputLock, LockBusy\n"
             "try:\n    OutputLock(Path(sys.argv[1]), wait=False).__enter__()\nexcept LockBusy as e:\n"
             "    print(e); sys.exit(3)", str(out)],
            env=_env(), capture_output=True, text=True, timeout=30)
        assert fd_holder.returncode == 3 and f"pid {os.getpid()}" in fd_holder.stdout
    with OutputLock(out, wait=False):  # released: taking it again works
        pass
    assert issubclass(LockBusy, Exception)


@pytest.mark.parametrize("dry", [True])
def test_dry_run_in_subprocess_writes_nothing(tmp_path, dry):
    make_project(tmp_path, SLEEP_TOML.format(seconds=0.0, tag="x"), images=("a",))
    before = tree_snapshot(tmp_path)
    p = _bake_proc(tmp_path, "--dry-run")
    out, err = p.communicate(timeout=30)
    assert p.returncode == 3, err  # something would build
    assert "would-build" in out and tree_snapshot(tmp_path) == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["pipeline.toml", "src"]


def test_ctrl_c_mid_task_exits_130_keeps_outputs_and_reports(tmp_path):
    make_project(tmp_path, SLEEP_TOML.format(seconds=0.0, tag="old"), images=("a", "b"))
    assert _bake_proc(tmp_path).wait(timeout=30) == 0
    before = tree_snapshot(tmp_path / "out" / "slow")
    (tmp_path / "pipeline.toml").write_text(SLEEP_TOML.format(seconds=30.0, tag="new"))
    started = tmp_path / "started"
    p = _bake_proc(tmp_path, started=started)
    _wait_for(started, p)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)  # a loaded machine (14 test workers) needs time to report
    assert p.returncode == 130 and "interrupted" in err
    assert tree_snapshot(tmp_path / "out" / "slow") == before
    rep = json.loads((tmp_path / "out/bake-report.json").read_text())
    assert [t["reason"] for t in rep["tasks"]] == ["interrupted", "interrupted"]
    assert not list(tmp_path.rglob(".*staging*"))


#: A bake whose report sections, drawn beside it (html_report.SectionsAhead), never finish:
#: it touches ``started`` when the bake waits for them at its end.
STUCK_SECTIONS = """\
import sys, threading
from pathlib import Path
from bakery.pipeline import html_report
real_body, real_finish = html_report._bundle_body, html_report.SectionsAhead.finish
def body(*a):
    if threading.current_thread() is not threading.main_thread():
        threading.Event().wait()   # the side thread's drawing never ends
    return real_body(*a)
def finish(self, *, cancel=False):
    Path(sys.argv[1]).touch()
    return real_finish(self, cancel=cancel)
html_report._bundle_body, html_report.SectionsAhead.finish = body, finish
from bakery.pipeline.cli import bake_cmd
bake_cmd(["pipeline.toml"])
"""


def test_a_signal_while_the_report_is_drawn_still_writes_the_report(tmp_path):
    """Every task built, the bake waiting for report sections drawn beside it: SIGTERM
    ends it within seconds, with bake-report.json and report.html written."""
    make_project(tmp_path, images=("a", "b"))
    started = tmp_path / "waiting-for-sections"
    p = subprocess.Popen([sys.executable, "-c", STUCK_SECTIONS, str(started)], cwd=tmp_path, env=_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(started, p)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    rep = json.loads((tmp_path / "out/bake-report.json").read_text())
    assert [t["status"] for t in rep["tasks"]] == ["built"] * 4
    assert (tmp_path / "out/report.html").read_text().count("<section class='task'") == 4
