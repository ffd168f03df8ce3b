"""bench/determinism.py given some stages says which it covered (and which it left out), in
the console before any bake and in the JSON, and works from another working directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_run_of_some_stages_names_them_and_the_rest(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "determinism.py"), "--device", "auto",
                        "--only", "shader_fit", "--work", "work", "--out", "det.json"],
                       cwd=tmp_path, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    others = [s for s in tomllib.loads((ROOT / "pipeline.toml").read_text())["stages"] if s != "shader_fit"]
    lines = p.stdout.splitlines()
    assert lines[0] == f"stages covered: shader_fit; NOT covered (--only): {', '.join(others)}"
    assert any(line.startswith("| shader_fit | ") and line.endswith("| same | not run |") for line in lines)
    assert lines[-1].startswith("all bytes identical: True (stages covered: shader_fit; not covered: ")
    result = json.loads((tmp_path / "det.json").read_text())
    assert result["stages_covered"] == ["shader_fit"] and result["stages_not_covered"] == others
    assert list(result["stages"]) == ["shader_fit"] and result["all_identical"] is True
