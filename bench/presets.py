"""Benchmark: what ``auto`` gives neural_texture per quality tier on this device.

Through the real stage (``run_task``) on the sample textures (assets/textures/*.png,
256^2) and, unless ``--small``, a 1024^2 tile of them: per quality tier (preview,
production, final) the params ``auto`` resolved to, the stage's wall time (compile,
training, outputs) and the whole-image PSNR. The baseline row is the old fixed defaults
(2000 steps, batch 65536, 3x64) - what every device got before presets. Prints a table
and writes bench/out/presets.json.

    python3 bench/presets.py --device vulkan              # the H200 run
    python3 bench/presets.py --device software --small    # a quick check on the CPU (preview only, one texture)
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bakery.device import open_device  # noqa: E402
from bakery.formats.images import encode_png, load_image  # noqa: E402
from bakery.pipeline.task import run_task, settings_for  # noqa: E402
from bakery.stages import StageInput, get_stage  # noqa: E402

BASELINE = {"steps": 2000, "batch": 1 << 16, "width": 64, "layers": 3}


def run(dev, image: Path, params: dict, out: Path) -> dict:
    t0 = time.perf_counter()
    stage, inputs = get_stage("neural_texture"), [StageInput(image.stem, {"image": image})]
    m = run_task(stage, inputs, settings_for(stage, params, inputs, device_class=dev.device_class), seed=1,
                 device_provider=lambda: dev, out_dir=out, log=logging.getLogger("bench"))
    seconds = time.perf_counter() - t0
    resolved = m.get("resolved_params", {}).get("values", params)
    return {"image": image.name, "params": {k: resolved.get(k) for k in ("quality", *BASELINE)},
            "seconds": round(seconds, 2), "psnr_db": m["metrics"]["psnr_db"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--small", action="store_true", help="preview tier, one 256^2 texture, no baseline")
    args = ap.parse_args()
    dev = open_device(args.device)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        images = [ROOT / "assets" / "textures" / "rust.png"]
        if not args.small:
            images.append(ROOT / "assets" / "textures" / "wood.png")
            big = np.tile(load_image(images[0]), (4, 4, 1))
            (tmp / "rust_1024.png").write_bytes(encode_png(big))
            images.append(tmp / "rust_1024.png")
        tiers = ("preview",) if args.small else ("preview", "production", "final")
        for image in images:
            for tier in tiers:
                rows.append({"case": tier, **run(dev, image, {"quality": tier}, tmp / f"{image.stem}_{tier}")})
            if not args.small:
                rows.append({"case": "old defaults", **run(dev, image, dict(BASELINE), tmp / f"{image.stem}_base")})
    info = dev.info.to_dict()
    print(f"device: {info}")
    print(f"{'image':14} {'case':13} {'steps':>6} {'batch':>7} {'net':>5} {'seconds':>8} {'PSNR dB':>8}")
    for r in rows:
        p = r["params"]
        print(f"{r['image']:14} {r['case']:13} {p['steps']:>6} {p['batch']:>7} {p['layers']}x{p['width']:<3} "
              f"{r['seconds']:>8.2f} {r['psnr_db']:>8.2f}")
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "presets.json").write_text(json.dumps({"device": info, "small": args.small, "rows": rows}, indent=1))
    print(f"wrote {out / 'presets.json'}")


if __name__ == "__main__":
    main()
