#!/usr/bin/env python3
"""Benchmark: the default pipeline baked twice locally and once through Ray, byte for byte.

Copies pipeline.toml and assets/ into a work folder, then runs the README's bake with
``--verify-determinism`` (every task baked again in a fresh process and compared file by
file with the first bake's cache entry: exit 1 names the first task and file that differ),
and, with ``--ray``, the same bake again through ``--runner ray --shared-cache --force`` (a local Ray
cluster) whose outputs are compared file by file with the local bake's. Prints per stage
the tasks, files and how many files agree, with the wall time of each bake; writes
bench/out/determinism.json.

    python3 bench/determinism.py [--ray] [--device auto] [--only STAGE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def snapshot(out: Path) -> dict[str, str]:
    """sha256 of every bundle file under ``out`` (the report and logs hold timings)."""
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file()
            and not p.relative_to(out).as_posix().startswith("logs/")
            and p.name not in ("bake-report.json", "report.html", ".bakery.lock")}


def bake(folder: Path, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    env.setdefault("RAY_AUTH_MODE", "disabled")
    env.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "bakery", "bake", "pipeline.toml", *args], cwd=folder, env=env,
                       capture_output=True, text=True)
    seconds = time.perf_counter() - start
    print(f"bake {' '.join(args)}: exit {r.returncode} in {seconds:.1f} s", flush=True)
    if r.returncode:
        print(r.stderr[-3000:], flush=True)
    report = json.loads((folder / "out" / "bake-report.json").read_text())
    return {"args": list(args), "exit": r.returncode, "seconds": round(seconds, 1), "stderr_tail": r.stderr[-600:],
            "determinism": report.get("determinism"), "device": report.get("device")}


def by_stage(files: dict[str, str], other: dict[str, str] | None) -> dict[str, dict]:
    stages: dict[str, dict] = {}
    for name, digest in files.items():
        s = stages.setdefault(name.split("/")[0], {"tasks": set(), "files": 0, "same": 0})
        s["tasks"].add("/".join(name.split("/")[:-1]))
        s["files"] += 1
        s["same"] += int(other is not None and other.get(name) == digest)
    return {k: {"tasks": len(v["tasks"]), "files": v["files"], "same": v["same"]} for k, v in sorted(stages.items())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto")
    p.add_argument("--ray", action="store_true", help="also bake through --runner ray and compare")
    p.add_argument("--only", action="append", default=[], metavar="STAGE", help="bake only these stages")
    p.add_argument("--work", default=None, help="work folder (default: a temporary one)")
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "determinism.json"))
    a = p.parse_args()
    work = Path(a.work or tempfile.mkdtemp(prefix="bakery-determinism-"))
    shutil.rmtree(work / "default", ignore_errors=True)
    folder = work / "default"
    shutil.copytree(ROOT / "assets", folder / "assets")
    (folder / "pipeline.toml").write_text((ROOT / "pipeline.toml").read_text()
                                          .replace('device = "auto"', f'device = "{a.device}"'))
    result = {"benchmark": "determinism", "device_kind": a.device}
    only = [x for stage in a.only for x in ("--only", stage)]
    local = result["local"] = bake(folder, "--verify-determinism", *only)
    result["device"] = local["device"]
    first = snapshot(folder / "out")
    check = local["determinism"] or {}
    print(f"device: {local['device']}")
    print(f"--verify-determinism: {check.get('tasks')} tasks baked twice; first difference: "
          f"{check.get('difference') or 'none'}", flush=True)
    ray_files = None
    if a.ray:
        # workers read the sources where they lie (one machine): the shipped mode does not
        # carry the files a fit spec names besides itself
        result["ray"] = bake(folder, "--runner", "ray", "--shared-cache", "--force", *only)
        ray_files = snapshot(folder / "out")
        result["ray"]["differing_files"] = sorted(k for k in set(first) | set(ray_files)
                                                  if first.get(k) != ray_files.get(k))
    stages = result["stages"] = by_stage(first, ray_files)
    print("\n| stage | tasks | files | local twice (verify) | ray = local |\n| --- | --- | --- | --- | --- |")
    diff = check.get("difference")
    for name, s in stages.items():
        twice = ("differs: " + diff["task"] + " " + diff["file"]) if diff and diff["task"].startswith(name + "/") \
            else ("same" if check and not diff else "not reached" if diff else "not run")
        ray = ("bake failed" if result["ray"]["exit"] else f"{s['same']}/{s['files']}") if ray_files is not None \
            else "not run"
        print(f"| {name} | {s['tasks']} | {s['files']} | {twice} | {ray} |")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=2))
    same = local["exit"] == 0 and not diff and (ray_files is None or (result["ray"]["exit"] == 0
                                                                        and not result["ray"]["differing_files"]))
    print(f"\nall bytes identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
