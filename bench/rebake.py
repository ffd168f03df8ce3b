#!/usr/bin/env python3
"""Benchmark: wall time of a fully cached re-bake of a pipeline (default: pipeline.toml).

What a pre-submit hook pays when nothing changed: process start, imports, validation,
hashing every input and cache entry, report writing (no device is opened). Bakes once
to fill the cache, then times ``--runs`` re-bakes as fresh processes and checks each one
reports every task cached, then splits one more re-bake into its phases (imports,
loading the pipeline, code fingerprints, the device probe, the bake itself). Prints
tables and writes bench/out/rebake.json. Targets: under 2 s on a 2-core CPU machine and
on the GPU machine.

With ``--fresh`` the pipeline file and the asset folders it names are copied to an empty
folder first, so the filling bake is a cold one (the default pipeline: ≤ 60 s on the
H200 is the target): its wall per stage, and what the task logs say each stage compiled
(Slang modules, kernels linked, kernels reused within a process), are reported too; and
after the re-bakes that cold bake runs once more with only Slang's compile cache kept
(``<cache>/device``): what a nightly bake of new assets pays.

    python3 bench/rebake.py [--pipeline pipeline.toml] [--runs 5] [--fresh]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import workloads as W

REPO = Path(__file__).resolve().parent.parent
BAKE = "from bakery.pipeline.cli import bake_cmd; bake_cmd()"


#: One cached re-bake in a fresh process, timed phase by phase: what `bakery bake` imports,
#: loading the pipeline, every stage's code fingerprint (through the cache's memo, as a bake
#: reads them), the device probe (adapters listed,
#: toolchain read: what planning needs of the device), then the bake itself (planning again
#: from those, cache checks, report). Prints JSON: seconds per phase, build-only modules loaded.
PHASES = """
import json, sys, time
t = [time.perf_counter()]
import bakery.cli
t.append(time.perf_counter())
from pathlib import Path
from bakery.pipeline.config import load_pipeline
pipe = load_pipeline(Path(sys.argv[1]))
t.append(time.perf_counter())
from bakery.pipeline.fingerprint import FINGERPRINT_MEMO, stage_fingerprint
for stage in pipe.stages.values():
    stage_fingerprint(stage.stage_cls, pipe.cache / FINGERPRINT_MEMO)
t.append(time.perf_counter())
from bakery.device import probe_device_class, probe_toolchain
probe_toolchain(pipe.device) if probe_device_class(pipe.device) else None
t.append(time.perf_counter())
from bakery.pipeline.executor import BakeOptions, bake
report = bake(pipe, BakeOptions(report=Path(sys.argv[2])))
t.append(time.perf_counter())
names = ("imports", "load pipeline", "code fingerprints", "device probe", "bake (plan, cache checks, report)")
print(json.dumps({"phases": {n: round(b - a, 3) for n, a, b in zip(names, t, t[1:])},
                  "build_only_modules": sorted({m.split(".")[0] for m in sys.modules}
                                               & {"slangpy", "matplotlib", "flip_evaluator", "onnx", "ray"}),
                  "all_cached": report.totals()["cached"] == report.totals()["total"]}))
"""
KERNELS = re.compile(r"kernels: (\d+) Slang module\(s\) compiled, (\d+) kernel\(s\) linked, (\d+) reused")


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def run_bake(pipeline: Path, report: Path, echo: str | None = None,
             ended: list[float] | None = None) -> tuple[float, int, str]:
    """A bake in a fresh process: wall s, exit code, output; with ``echo``, each task's line as
    it ends; ``ended`` gets the seconds from the start at which each task's line came."""
    t0 = time.perf_counter()
    on_task = None if ended is None else (lambda line: ended.append(time.perf_counter() - t0))
    code, log = W.run_streamed([sys.executable, "-c", BAKE, str(pipeline), "--report", str(report)],
                               cwd=pipeline.parent, env=_env(), echo=echo, tail_chars=20000, on_task=on_task)
    return time.perf_counter() - t0, code, log


def run_phases(pipeline: Path, report: Path) -> tuple[float, dict]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", PHASES, str(pipeline), str(report)], cwd=pipeline.parent, env=_env(),
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"the phased re-bake failed (exit {p.returncode}):\n{p.stdout}{p.stderr}")
    return wall, json.loads(p.stdout.strip().splitlines()[-1])


def fresh_copy(pipeline: Path, into: Path) -> Path:
    """The pipeline file and the top folders its asset globs name, copied into ``into``."""
    spec = tomllib.loads(pipeline.read_text())
    tops = {Path(v).parts[0] for table in spec.get("assets", {}).values() for v in table.values()
            if isinstance(v, str) and not Path(v).is_absolute()}
    for top in sorted(tops):
        if (pipeline.parent / top).is_dir():
            shutil.copytree(pipeline.parent / top, into / top)
    shutil.copy2(pipeline, into / pipeline.name)
    return into / pipeline.name


def per_stage(report: dict, base: Path) -> dict:
    """Wall seconds and compile counts (from the task logs; paths in the report are
    relative to ``base``, the folder the bake ran in) per stage of a bake."""
    stages: dict = {}
    for t in report["tasks"]:
        row = stages.setdefault(t["stage"], {"tasks": 0, "seconds": 0.0, "modules": 0, "kernels": 0, "reused": 0})
        row["tasks"] += 1
        row["seconds"] = round(row["seconds"] + (t.get("seconds") or 0.0), 3)
        log = base / t["log"] if t.get("log") else None
        if log is not None and log.is_file():
            for m in KERNELS.finditer(log.read_text(errors="replace")):
                row["modules"] += int(m.group(1))
                row["kernels"] += int(m.group(2))
                row["reused"] += int(m.group(3))
    return stages


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipeline", type=Path, default=REPO / "pipeline.toml")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    ap.add_argument("--fresh", action="store_true",
                    help="bake a copy in an empty folder first: the filling bake is a cold one")
    args = ap.parse_args()
    pipeline = args.pipeline.resolve()
    args.out = args.out.resolve()   # the bakes run in the pipeline's folder
    args.out.mkdir(parents=True, exist_ok=True)
    report_path = args.out / "rebake-report.json"
    scratch = None
    if args.fresh:
        scratch = Path(tempfile.mkdtemp(prefix="bakery-rebake-"))
        pipeline = fresh_copy(pipeline, scratch)
    try:
        return measure(args, pipeline, report_path)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def measure(args, pipeline: Path, report_path: Path) -> int:
    """Each part's table prints, and the JSON is rewritten, as soon as the part ends: the
    cold filling bake alone can take most of a benchmark call's time."""
    result = {"benchmark": "cached_rebake",
              "pipeline": str(pipeline.relative_to(REPO) if pipeline.is_relative_to(REPO) else args.pipeline),
              "fresh": args.fresh, "runs": args.runs, "target_s": 2.0,
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}}

    def save() -> None:
        tmp = args.out / ".rebake.json.tmp"
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        os.replace(tmp, args.out / "rebake.json")

    ended: list[float] = []
    fill_s, rc, log = run_bake(pipeline, report_path, echo="    ", ended=ended)
    if rc != 0:
        print(f"filling the cache failed (exit {rc}):\n{log}", file=sys.stderr)
        return 1
    fill_report = json.loads(report_path.read_text())
    stages = per_stage(fill_report, pipeline.parent)
    fill_device = fill_report.get("device")
    # where a cold bake's wall goes beside its tasks: the process before its bake clock, the
    # tasks, and what follows the last (report sections, the report, workers' exit)
    timeline = {"first_task_ended_s": round(min(ended), 3) if ended else None,
                "last_task_ended_s": round(max(ended), 3) if ended else None,
                "bake_clock_s": fill_report.get("seconds"), "process_wall_s": round(fill_s, 3)}
    result.update(tasks=fill_report["totals"]["total"], fill_bake_s=round(fill_s, 3), fill_device=fill_device,
                  fill_stages=stages, fill_timeline=timeline)
    save()
    print(f"filling bake: {fill_s:.2f} s wall ({'cold: fresh folder' if args.fresh else 'in place'}), "
          f"{result['tasks']} tasks, device {(fill_device or {}).get('adapter', 'none opened')}", flush=True)
    if ended:
        print(f"  timeline: first task ended at {min(ended):.2f} s, the last at {max(ended):.2f} s, the process "
              f"exited at {fill_s:.2f} s; the bake's own clock (plan to report written) "
              f"{fill_report.get('seconds', float('nan')):.2f} s", flush=True)
    print_stages(stages)

    times, in_process = [], []
    for _ in range(args.runs):
        wall, rc, log = run_bake(pipeline, report_path)
        rep = json.loads(report_path.read_text())
        t = rep["totals"]
        if rc != 0 or t["cached"] != t["total"]:
            print(f"re-bake was not fully cached (exit {rc}, totals {t}):\n{log}", file=sys.stderr)
            return 1
        times.append(wall)
        in_process.append(rep["seconds"])
        print(f"cached re-bake {len(times)}/{args.runs}: {wall:.3f} s wall", flush=True)
    result.update(wall_s={"median": round(statistics.median(times), 3), "min": round(min(times), 3),
                          "max": round(max(times), 3)},
                  bake_s_in_process={"median": round(statistics.median(in_process), 3)}, device=rep.get("device"))
    save()
    rows = [("pipeline", result["pipeline"]), ("tasks (all cached)", str(t["total"])),
            ("first bake (fills cache)", f"{fill_s:.2f} s"),
            ("cached re-bake, wall, median", f"{result['wall_s']['median']:.3f} s"),
            ("cached re-bake, wall, min..max", f"{result['wall_s']['min']:.3f}..{result['wall_s']['max']:.3f} s"),
            ("  of which bake() itself", f"{result['bake_s_in_process']['median']:.3f} s"),
            ("device opened", (rep.get("device") or {}).get("adapter", "no")),
            ("target", "< 2 s")]
    w = max(len(r[0]) for r in rows)
    print("\n| " + "metric".ljust(w) + " | value |")
    print("|" + "-" * (w + 2) + "|-------|")
    for k, v in rows:
        print(f"| {k.ljust(w)} | {v} |")

    phases_wall, phased = run_phases(pipeline, report_path)
    result["phases"] = dict(phased["phases"],
                            **{"process start and exit": round(phases_wall - sum(phased["phases"].values()), 3)})
    result["phased_rebake"] = {"wall_s": round(phases_wall, 3), "build_only_modules": phased["build_only_modules"],
                               "all_cached": phased["all_cached"]}
    save()
    print("\n| phase of one cached re-bake | s |")
    print("|---|---:|")
    for name, sec in result["phases"].items():
        print(f"| {name} | {sec:.3f} |")
    print(f"| total (wall) | {phases_wall:.3f} |")
    print(f"build-only modules loaded: {', '.join(phased['build_only_modules']) or 'none'}", flush=True)

    if args.fresh:  # the same cold bake once more, only Slang's compile cache kept (cache/device)
        cache = pipeline.parent / tomllib.loads(pipeline.read_text()).get("project", {}).get("cache", ".bakery-cache")
        dropped = [p for p in cache.iterdir() if p.is_dir() and p.name != "device"]
        for p in dropped + [pipeline.parent / fill_report["out"]]:
            shutil.rmtree(p)  # entries, records, report memo; out/ (bakery marks the new one)
        warm_s, rc, log = run_bake(pipeline, report_path, echo="    ")
        if rc != 0:
            print(f"the bake with a warm Slang cache failed (exit {rc}):\n{log}", file=sys.stderr)
            return 1
        warm_stages = per_stage(json.loads(report_path.read_text()), pipeline.parent)
        for name, row in stages.items():
            row["seconds_warm_slang"] = warm_stages.get(name, {}).get("seconds")
        result["cold_bake_warm_slang_s"] = round(warm_s, 3)
        save()
        print(f"\nthe filling bake again with only Slang's compile cache kept: {warm_s:.2f} s", flush=True)
        print_stages(stages)
    print(f"wrote {args.out / 'rebake.json'}")
    return 0


def print_stages(stages: dict) -> None:
    print("\n| stage (filling bake) | tasks | wall s | again, warm Slang cache | Slang modules compiled "
          "| kernels linked | kernels reused |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, row in stages.items():
        again = row.get("seconds_warm_slang")
        print(f"| {name} | {row['tasks']} | {row['seconds']:.2f} | {'-' if again is None else f'{again:.2f}'} "
              f"| {row['modules']} | {row['kernels']} | {row['reused']} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
