"""bench/studio_library.py from another working directory, with relative paths: the bakes
run in the set folders, so every path the benchmark hands them must be absolute (the H200
run once failed every row on a relative --work). Each row prints and lands in the JSON as
its bake ends, so a run cut at its time limit keeps what it measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import workloads  # noqa: E402


def test_runs_from_another_cwd_and_reuses_its_sets(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    cmd = [sys.executable, str(ROOT / "bench" / "studio_library.py"), "--size", "40", "--small", "--device", "auto",
           "--stages", "mipmap", "--work", "work", "--out", "result.json"]
    first = subprocess.run([*cmd, "--sets", "unreal"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "sets: two 40^2 six-map sets made" in first.stdout
    assert "mipmap/lib/rock built" in first.stdout            # the bake's task line, echoed as it ended
    # the baseline set in a second run: the sets are reused, the first run's row kept
    second = subprocess.run([*cmd, "--sets", "plain"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "sets: reusing the 40^2 sets" in second.stdout
    rows = json.loads((tmp_path / "result.json").read_text())["rows"]
    assert [(r["stage"], r["set"], r["exit"]) for r in rows] == [("mipmap", "unreal", 0), ("mipmap", "plain", 0)]
    assert rows[1]["same_bytes_as_other_set"] is True      # mipmap is deterministic: detection costs no byte
    assert rows[1]["phases_s"]["training"] > 0 and rows[1]["task_s"] <= rows[1]["wall_s"]
    assert (tmp_path / "work" / "plain" / "out").is_dir()   # baked where --work said, relative to the cwd


def test_a_bakes_task_lines_are_echoed_as_they_come(capsys, tmp_path):
    script = ("import sys\nprint('bake: loading')\nprint('bake: [1/2] mips/lib/a built in 1.00 s (new)', flush=True)\n"
              "print('bake: [2/2] mips/lib/b failed in 0.10 s', file=sys.stderr)\nsys.exit(3)\n")
    code, tail = workloads.run_streamed([sys.executable, "-c", script], cwd=tmp_path, env=dict(os.environ), echo="> ")
    assert code == 3
    shown = capsys.readouterr().out.splitlines()
    assert shown == ["> bake: [1/2] mips/lib/a built in 1.00 s (new)", "> bake: [2/2] mips/lib/b failed in 0.10 s"]
    assert "bake: loading" in tail
