"""Benchmark: how long a newcomer waits, with cold and with warm shader caches.

Issue 16's budget for a CPU device: `bakery run` of any stage on a 256^2 input under a
minute, and the default pipeline under five. The first run on a fresh machine also
compiles every kernel (Slang to SPIR-V, then, on lavapipe, SPIR-V through LLVM), so each
command runs twice as a subprocess: first with an empty cache folder (XDG_CACHE_HOME: no
Slang module cache, no Mesa shader cache), then again with the caches it left. Prints a
table and writes bench/out/cold_start.json.

    python3 bench/cold_start.py --device software               # every stage, then the default bake
    python3 bench/cold_start.py --device software --no-pipeline # the stages only (~4 minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"

#: One 256^2 input per stage: what `bakery run STAGE INPUT` is given.
RUNS = {
    "ntc": ASSETS / "materials" / "bricks",
    "neural_texture": ASSETS / "textures" / "rust.png",
    "neural_material": ASSETS / "materials" / "bricks",
    "mipmap": ASSETS / "materials" / "bricks",
    "procedural": ASSETS / "textures" / "rust.png",
    "fit": ASSETS / "fit" / "rainbow.toml",
}


#: Variables that would move a cache out of XDG_CACHE_HOME (and keep a "cold" run warm).
CACHE_VARIABLES = ("MESA_SHADER_CACHE_DIR", "MESA_GLSL_CACHE_DIR", "MESA_SHADER_CACHE_DISABLE")


def timed(cmd: list[str], cwd: Path, cache: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES}
    env.update(XDG_CACHE_HOME=str(cache), PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed (exit {done.returncode}):\n{done.stdout[-2000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="software", choices=("auto", "vulkan", "cuda", "software"))
    ap.add_argument("--stages", default=",".join(RUNS), help="comma-separated stages to run")
    ap.add_argument("--no-pipeline", action="store_true", help="skip the default pipeline's bake")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "cold_start.json")
    a = ap.parse_args()
    unknown = sorted(set(a.stages.split(",")) - set(RUNS))
    if unknown:
        ap.error(f"--stages: unknown {', '.join(unknown)} (known: {', '.join(RUNS)})")
    py = sys.executable
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for stage in a.stages.split(","):
            cache = tmp / f"cache-{stage}"
            cmd = [py, "-m", "bakery", "run", stage, str(RUNS[stage]), "--device", a.device]
            cold = timed(cmd + ["-o", str(tmp / f"{stage}-cold")], ROOT, cache)
            warm = timed(cmd + ["-o", str(tmp / f"{stage}-warm")], ROOT, cache)
            rows.append({"command": f"bakery run {stage} {RUNS[stage].relative_to(ROOT)}", "cold_s": round(cold, 1),
                         "warm_s": round(warm, 1), "budget_s": 60})
            print(f"{rows[-1]['command']:<48} cold {cold:6.1f} s  warm {warm:6.1f} s", flush=True)
        if not a.no_pipeline:
            work = tmp / "pipeline"
            work.mkdir()
            shutil.copy(ROOT / "pipeline.toml", work)
            shutil.copytree(ASSETS, work / "assets")
            cache = tmp / "cache-pipeline"
            cmd = [py, "-m", "bakery", "bake", "pipeline.toml", "--device", a.device]
            cold = timed(cmd, work, cache)
            timed([py, "-m", "bakery", "clean", "pipeline.toml"], work, cache)  # outputs and content cache only
            warm = timed(cmd, work, cache)
            rows.append({"command": "bakery bake pipeline.toml (default)", "cold_s": round(cold, 1),
                         "warm_s": round(warm, 1), "budget_s": 300})
            print(f"{rows[-1]['command']:<48} cold {cold:6.1f} s  warm {warm:6.1f} s", flush=True)

    print(f"\ndevice {a.device}, {os.cpu_count()} CPUs; wall s of the whole command (start-up, compile, "
          "training, outputs); cold = empty XDG_CACHE_HOME\n")
    print("| command | cold s | warm s | budget s | within |")
    print("| --- | ---: | ---: | ---: | --- |")
    for r in rows:
        print(f"| `{r['command']}` | {r['cold_s']} | {r['warm_s']} | {r['budget_s']} | "
              f"{'yes' if r['cold_s'] < r['budget_s'] else 'NO'} |")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"device": a.device, "cpus": os.cpu_count(), "rows": rows}, indent=1) + "\n")
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
