#!/usr/bin/env python3
"""Benchmark: wall time of a fully cached re-bake of a pipeline (default: pipeline.toml).

What a pre-submit hook pays when nothing changed: process start, imports, validation,
hashing every input and cache entry, device opening for GPU stages, report writing.
Bakes once to fill the cache (untimed), then times ``--runs`` re-bakes as fresh
processes and checks each one reports every task cached. Prints a table and writes
bench/out/rebake.json. Target: under 2 s on a 2-core CPU machine.

    python3 bench/rebake.py [--pipeline pipeline.toml] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BAKE = "from bakery.pipeline.cli import bake_cmd; bake_cmd()"


def run_bake(pipeline: Path, report: Path) -> tuple[float, int, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", BAKE, str(pipeline), "--report", str(report)],
                       cwd=pipeline.parent, env=env, capture_output=True, text=True)
    return time.perf_counter() - t0, p.returncode, p.stdout + p.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipeline", type=Path, default=REPO / "pipeline.toml")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    args = ap.parse_args()
    pipeline = args.pipeline.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    report_path = args.out / "rebake-report.json"

    fill_s, rc, log = run_bake(pipeline, report_path)
    if rc != 0:
        print(f"filling the cache failed (exit {rc}):\n{log}", file=sys.stderr)
        return 1
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
    result = {
        "benchmark": "cached_rebake",
        "pipeline": str(pipeline.relative_to(REPO) if pipeline.is_relative_to(REPO) else pipeline),
        "tasks": t["total"],
        "runs": args.runs,
        "fill_bake_s": round(fill_s, 3),
        "wall_s": {"median": round(statistics.median(times), 3), "min": round(min(times), 3),
                   "max": round(max(times), 3)},
        "bake_s_in_process": {"median": round(statistics.median(in_process), 3)},
        "device": rep.get("device"),
        "target_s": 2.0,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
    }
    rows = [("pipeline", result["pipeline"]), ("tasks (all cached)", str(t["total"])),
            ("first bake (fills cache)", f"{fill_s:.2f} s"),
            ("cached re-bake, wall, median", f"{result['wall_s']['median']:.3f} s"),
            ("cached re-bake, wall, min..max", f"{result['wall_s']['min']:.3f}..{result['wall_s']['max']:.3f} s"),
            ("  of which bake() itself", f"{result['bake_s_in_process']['median']:.3f} s"),
            ("device opened", (rep.get("device") or {}).get("adapter", "no")),
            ("target", "< 2 s")]
    w = max(len(r[0]) for r in rows)
    print("| " + "metric".ljust(w) + " | value |")
    print("|" + "-" * (w + 2) + "|-------|")
    for k, v in rows:
        print(f"| {k.ljust(w)} | {v} |")
    (args.out / "rebake.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out / 'rebake.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
