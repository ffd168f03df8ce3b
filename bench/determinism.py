#!/usr/bin/env python3
"""Benchmark: the default pipeline baked twice locally and once through Ray, byte for byte.

Copies pipeline.toml and assets/ into a work folder, then runs the README's bake with
``--verify-determinism`` (every task baked again in a fresh process and compared file by
file with the first bake's cache entry: exit 1 names the first task and file that differ),
and, with ``--ray``, the same bake again through ``--runner ray --shared-cache --force`` (a local Ray
cluster) whose outputs are compared file by file with the local bake's. Prints which
stages the run covers first, each task's line as it ends, each bake's line, and the per
stage table (tasks, files, how many agree) as soon as a bake gives one; rewrites
bench/out/determinism.json then. ``--only STAGE`` (repeatable) bakes those stages alone;
``--each-stage`` bakes the stages one at a time (local, then Ray), each stage's row printed
and saved as it ends, so a run cut at its time limit keeps every stage it finished.

    python3 bench/determinism.py [--ray] [--device auto] [--only STAGE] [--each-stage]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import workloads as W

ROOT = Path(__file__).resolve().parent.parent


def snapshot(out: Path, stages: list[str] | None = None) -> dict[str, str]:
    """sha256 of every bundle file under ``out`` (the report and logs hold timings), of
    ``stages`` only where given (an earlier bake's other stages may still lie there)."""
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file()
            and not p.relative_to(out).as_posix().startswith("logs/")
            and (stages is None or p.relative_to(out).parts[0] in stages)
            and p.name not in ("bake-report.json", "report.html", ".bakery.lock")}


def bake(folder: Path, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    env.setdefault("RAY_AUTH_MODE", "disabled")
    env.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    report_path = folder / "out" / "bake-report.json"
    report_path.unlink(missing_ok=True)   # a bake that fails early must not show the last one's report
    start = time.perf_counter()
    code, log = W.run_streamed([sys.executable, "-m", "bakery", "bake", "pipeline.toml", *args], cwd=folder, env=env,
                               tail_chars=3000)
    seconds = time.perf_counter() - start
    print(f"bake {' '.join(args)}: exit {code} in {seconds:.1f} s", flush=True)
    if code:
        print(log, flush=True)
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    return {"args": list(args), "exit": code, "seconds": round(seconds, 1), "log_tail": log[-600:],
            "determinism": report.get("determinism"), "device": report.get("device")}


def by_stage(files: dict[str, str], other: dict[str, str] | None) -> dict[str, dict]:
    stages: dict[str, dict] = {}
    for name, digest in files.items():
        s = stages.setdefault(name.split("/")[0], {"tasks": set(), "files": 0, "same": 0})
        s["tasks"].add("/".join(name.split("/")[:-1]))
        s["files"] += 1
        s["same"] += int(other is not None and other.get(name) == digest)
    return {k: {"tasks": len(v["tasks"]), "files": v["files"], "same": v["same"]} for k, v in sorted(stages.items())}


def stage_rows(names: list[str], first: dict[str, str], local: dict, ray: dict | None,
               ray_files: dict[str, str] | None, ray_asked: bool) -> dict:
    """Per stage of ``names``: tasks, files, the local bake twice (--verify-determinism) and
    Ray against local (``pending`` while the Ray bake of an asked-for comparison runs)."""
    check = local["determinism"] or {}
    diff = check.get("difference")
    found = by_stage(first, ray_files)
    rows = {}
    for name in names:
        s = rows[name] = found.get(name, {"tasks": 0, "files": 0, "same": 0})
        if diff and diff["task"].startswith(name + "/"):
            s["local_twice"] = "differs: " + diff["task"] + " " + diff["file"]
        else:
            s["local_twice"] = "bake failed" if local["exit"] and not diff else \
                "not reached" if diff else "same" if check else "not run"
        if ray is None:
            s["ray_equals_local"] = "pending" if ray_asked else "not run"
        else:
            s["ray_equals_local"] = "bake failed" if ray["exit"] else f"{s['same']}/{s['files']}"
    return rows


def print_table(rows: dict, header: bool = True) -> None:
    if header:
        print("\n| stage | tasks | files | local twice (verify) | ray = local |\n| --- | --- | --- | --- | --- |")
    for name, s in rows.items():
        print(f"| {name} | {s['tasks']} | {s['files']} | {s['local_twice']} | {s['ray_equals_local']} |", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto")
    p.add_argument("--ray", action="store_true", help="also bake through --runner ray and compare")
    p.add_argument("--only", action="append", default=[], metavar="STAGE", help="bake only these stages")
    p.add_argument("--each-stage", action="store_true",
                   help="one stage at a time (local, then Ray), each stage's row as soon as it ends")
    p.add_argument("--work", default=None, help="work folder (default: a temporary one)")
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "determinism.json"))
    a = p.parse_args()
    out = Path(a.out).resolve()
    work = Path(a.work).resolve() if a.work else Path(tempfile.mkdtemp(prefix="bakery-determinism-"))
    shutil.rmtree(work / "default", ignore_errors=True)
    folder = work / "default"
    shutil.copytree(ROOT / "assets", folder / "assets")
    text = (ROOT / "pipeline.toml").read_text()
    (folder / "pipeline.toml").write_text(text.replace('device = "auto"', f'device = "{a.device}"'))
    every = list(tomllib.loads(text)["stages"])
    unknown = sorted(set(a.only) - set(every))
    if unknown:
        p.error(f"--only {', '.join(unknown)}: pipeline.toml has no such stage (it has {', '.join(every)})")
    covered = [s for s in every if s in a.only] if a.only else every
    left_out = [s for s in every if s not in covered]
    print(f"stages covered: {', '.join(covered)}"
          + (f"; NOT covered (--only): {', '.join(left_out)}" if left_out else " (all of pipeline.toml's)"), flush=True)
    result = {"benchmark": "determinism", "device_kind": a.device, "stages_covered": covered,
              "stages_not_covered": left_out, "stages": {}}

    def save() -> None:
        W.save_json(out, result)

    save()
    groups = [[s] for s in covered] if a.each_stage else [covered]
    verdicts = []
    for i, names in enumerate(groups):
        if a.each_stage:
            print(f"\n-- stage {names[0]} ({i + 1}/{len(groups)}) --", flush=True)
        stages = names if (a.each_stage or left_out) else None
        only = [x for stage in stages or () for x in ("--only", stage)]
        bakes = result.setdefault("bakes", {})[names[0] if a.each_stage else "all"] = {}
        local = bakes["local"] = bake(folder, "--verify-determinism", *only)
        result["device"] = result.get("device") or local["device"]
        first = snapshot(folder / "out", stages)
        check = local["determinism"] or {}
        diff = check.get("difference")
        print(f"--verify-determinism: {check.get('tasks')} tasks baked twice; first difference: "
              f"{diff or 'none'}", flush=True)
        rows = stage_rows(names, first, local, None, None, a.ray)
        result["stages"].update(rows)
        save()
        print_table(rows)                      # the local verdicts now; Ray's column follows
        ok = local["exit"] == 0 and not diff
        if a.ray:
            # workers read the sources where they lie (one machine): the shipped mode does not
            # carry the files a fit spec names besides itself
            ray = bakes["ray"] = bake(folder, "--runner", "ray", "--shared-cache", "--force", *only)
            ray_files = snapshot(folder / "out", stages)
            ray["differing_files"] = sorted(k for k in set(first) | set(ray_files) if first.get(k) != ray_files.get(k))
            rows = stage_rows(names, first, local, ray, ray_files, True)
            result["stages"].update(rows)
            save()
            print_table(rows)
            ok = ok and ray["exit"] == 0 and not ray["differing_files"]
        verdicts.append(ok)
    if a.each_stage:
        print("\nall stages:")
        print_table(result["stages"])
    print(f"device: {result.get('device')}")
    same = all(verdicts)
    result["all_identical"] = same
    save()
    print(f"\nall bytes identical: {same} (stages covered: {', '.join(covered)}"
          + (f"; not covered: {', '.join(left_out)})" if left_out else ")"))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
