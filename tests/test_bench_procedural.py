"""bench/procedural.py: a target that fails is one row naming the error, and the JSON it
writes as it goes says which targets failed, so a cut or failed run still reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_failed_target_is_one_row_and_counted_in_the_json(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "procedural.py"), "--device", "auto", "--small",
                        "--only", "checker_ramp", "--param", "lr=5", "--out", "p.json"],
                       cwd=tmp_path, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    (row,) = [line for line in p.stdout.splitlines() if line.startswith("checker_ramp")]
    assert row.split()[:3] == ["checker_ramp", "generated", "FAILED:"] and "--param.lr: 5.0 is out of range" in row
    result = json.loads((tmp_path / "p.json").read_text())
    assert result["partial"] is False and result["targets_planned"] == ["checker_ramp"]
    assert result["summary"]["failed"] == ["checker_ramp"] and result["summary"]["finished"] == 0
    assert result["summary"]["generated_recovered_35db_within_2_nodes"] == 0
    assert result["targets"][0]["error"].startswith("bakery: error: --param.lr")
