"""Seeded fuzz of the bundle reader and ``bakery decompress``'s decoder (issue 45).

Crafted manifests (path-like names, wrong types, missing keys, huge sizes) and damaged
containers (truncations, flipped bytes, forged weights/DDS headers, a KTX2 zstd bomb)
over a small valid NTC bundle. For every case: only :class:`BundleError` (or a usage
error) comes out, no traceback; nothing is written anywhere; no file outside the case's
bundle is opened (an audit hook sees every ``open``); and the process's peak memory
stays bounded. The cases run in a child process so its memory can be measured alone.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SEED = 45
CASES = 240
SECONDS = 40.0
PEAK_RSS_MB = 700

VALUES = [None, True, False, -1, 0, 1, 7, 2 ** 31, 2 ** 63, 10 ** 30, 1.5, float("nan"), "", "nan", "..", ".",
          "../x", "../../outside.bin", "/etc/passwd", "a/b/c", "x\ny", "manifest.json", "weights.bin",
          "latents.bin", "latents.dds", "extra.ktx2", "CON", "albedo", "normal", [], {}, [0, 3], [1, 2, 3],
          {"a": 1}, ["../x"], {"../x": [0, 3]}, "a" * 300]


def _paths(obj, prefix=(), depth=0):
    """Every (key path) in a JSON value, up to a depth."""
    yield prefix
    if depth >= 6:
        return
    if isinstance(obj, dict):
        for k in list(obj):
            yield from _paths(obj[k], prefix + (k,), depth + 1)
    elif isinstance(obj, list):
        for i in range(min(len(obj), 4)):
            yield from _paths(obj[i], prefix + (i,), depth + 1)


def _parent(obj, path):
    for k in path[:-1]:
        obj = obj[k]
    return obj


def _mutate_manifest(m: dict, rng: random.Random) -> str:
    paths = [p for p in _paths(m) if p]
    path = rng.choice(paths)
    parent, key = _parent(m, path), path[-1]
    kind = rng.random()
    if kind < 0.2 and isinstance(parent, dict):
        del parent[key]
        return f"delete {path}"
    if kind < 0.3 and isinstance(parent, dict):
        value = parent.pop(key)
        new = rng.choice([v for v in VALUES if isinstance(v, str)])
        parent[new] = value
        return f"rename {path} -> {new!r}"
    value = copy.deepcopy(rng.choice(VALUES))
    parent[key] = value
    return f"set {path} = {value!r}"[:120]


def _relist(folder: Path, m: dict, name: str) -> None:
    data = (folder / name).read_bytes()
    for e in m.get("files", []):
        if isinstance(e, dict) and e.get("name") == name:
            e["bytes"], e["sha256"] = len(data), hashlib.sha256(data).hexdigest()


def _mutate_container(folder: Path, m: dict, rng: random.Random) -> str:
    import struct

    name = rng.choice([n for n in ("weights.bin", "latents.bin", "latents.dds", "extra.ktx2") if (folder / n).exists()])
    data = bytearray((folder / name).read_bytes())
    kind = rng.choice(["truncate", "flip", "append", "u32", "bomb"]) if len(data) >= 4 else "append"
    if kind == "truncate":
        data = data[:rng.randrange(len(data))]
    elif kind == "flip":
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == "append":
        data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif kind == "u32":
        off = rng.randrange(0, max(1, min(len(data), 160) - 4)) & ~3
        struct.pack_into("<I", data, off, rng.choice([0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 65536, 1 << 20]))
    elif name == "extra.ktx2" and len(data) >= 104:  # a zstd level that claims to inflate to gigabytes
        from bakery.formats.ktx2 import HEADER, LEVEL

        fields = list(HEADER.unpack_from(data, 0))
        fields[3] = fields[4] = rng.choice([4096, 16384, 32768, 65536])
        HEADER.pack_into(data, 0, *fields)
        off, length, _ = LEVEL.unpack_from(data, HEADER.size)
        LEVEL.pack_into(data, HEADER.size, off, length, fields[3] * fields[4] * 8)
    (folder / name).write_bytes(bytes(data))
    if rng.random() < 0.85:  # mostly keep the checksums right, so the parsers themselves are reached
        _relist(folder, m, name)
    return f"{kind} {name}"


def fuzz(root: Path, seed: int, cases: int, seconds: float) -> dict:
    """Runs the cases under ``root``; returns what went wrong (empty lists when nothing)."""
    import click
    import numpy as np

    sys.path.insert(0, str(TESTS))
    from ntc_bundles import write_ntc_bundle

    from bakery.errors import UsageError
    from bakery.formats.bundle import BundleWriter  # noqa: F401  (imports done before the hook)
    from bakery.formats.ktx2 import write_ktx2
    from bakery.formats.texture import make_texture
    from bakery.stages.ntc.cli import decompress_bundle
    import bakery.formats.ntc_manifest  # noqa: F401
    import bakery.stages.ntc.bc4  # noqa: F401
    import zstandard  # noqa: F401

    pristine = {}
    for mode in ("packed", "bc"):
        folder = write_ntc_bundle(root / f"pristine_{mode}", mode=mode, size=8)
        extra = write_ktx2(make_texture("rgba16f", [np.zeros((4, 4, 4), np.float32)]), supercompression="zstd")
        (folder / "extra.ktx2").write_bytes(extra)
        m = json.loads((folder / "manifest.json").read_text())
        m["files"].append({"name": "extra.ktx2", "role": "texture", "bytes": len(extra),
                           "sha256": hashlib.sha256(extra).hexdigest()})
        m["files"].sort(key=lambda e: e["name"])
        m.setdefault("textures", {})["extra.ktx2"] = {"format": "rgba16f", "width": 4, "height": 4, "mips": 1, "layers": 1}
        (folder / "manifest.json").write_text(json.dumps(m))
        decompress_bundle(folder)  # the pristine bundle decodes
        pristine[mode] = folder
    (root / "outside.bin").write_bytes(b"outside")
    cases_dir = root / "cases"
    cases_dir.mkdir()

    opened_outside: list[str] = []
    current: list[Path] = []
    root_real = os.path.realpath(root)

    def hook(event, args):
        if event == "open" and current and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.realpath(os.fsdecode(args[0]))
            if path.startswith(root_real + os.sep) and not path.startswith(str(current[0]) + os.sep):
                opened_outside.append(path)

    sys.addaudithook(hook)
    rng = random.Random(seed)
    failures, done, t0 = [], 0, time.monotonic()
    for i in range(cases):
        if time.monotonic() - t0 > seconds:
            break
        mode = rng.choice(sorted(pristine))
        case = cases_dir / f"{i:04d}"
        shutil.copytree(pristine[mode], case)
        m = json.loads((case / "manifest.json").read_text())
        what = []
        for _ in range(rng.randint(1, 3)):
            what.append(_mutate_container(case, m, rng) if rng.random() < 0.35 else _mutate_manifest(m, rng))
        (case / "manifest.json").write_text(json.dumps(m))
        before = {p.name: p.read_bytes() for p in case.iterdir()}
        current[:] = [Path(os.path.realpath(case))]
        try:
            decompress_bundle(case, mips=rng.random() < 0.5)
        except (UsageError, click.UsageError) as e:
            msg = e.format_message() if isinstance(e, click.UsageError) else str(e)
            if "\n" in msg.strip():
                failures.append(f"case {i} ({mode}; {what}): a message of several lines: {msg!r}")
        except BaseException:  # noqa: BLE001 - the point of the test
            failures.append(f"case {i} ({mode}; {what}):\n{traceback.format_exc()}")
        finally:
            current.clear()
        if {p.name: p.read_bytes() for p in case.iterdir()} != before:
            failures.append(f"case {i} ({mode}; {what}): the reader changed the bundle")
        shutil.rmtree(case)
        done += 1
    peak_mb = own_peak_rss_mb()
    return {"cases": done, "failures": failures, "opened_outside": sorted(set(opened_outside)), "peak_mb": peak_mb,
            "left": sorted(p.name for p in root.iterdir())}


def own_peak_rss_mb() -> float:
    """This process's own peak resident memory. Linux's ``ru_maxrss`` also counts the
    parent's at the fork (a pytest worker holding a GPU driver: 1.2 GB on the H200);
    ``VmHWM`` is the high-water mark of the address space exec gave this process."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_bundle_reader_fuzz(tmp_path):
    r = subprocess.run([sys.executable, __file__, str(tmp_path), str(SEED), str(CASES), str(SECONDS)],
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(
                           [str(TESTS), str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))},
                       capture_output=True, text=True, timeout=SECONDS + 120)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(r.stdout.splitlines()[-1])
    assert result["cases"] >= 60, result
    assert not result["failures"], "\n".join(result["failures"][:5])
    assert not result["opened_outside"], result["opened_outside"]
    assert result["peak_mb"] < PEAK_RSS_MB, result
    assert result["left"] == ["cases", "outside.bin", "pristine_bc", "pristine_packed"], result  # no writes
    assert not any((tmp_path / "cases").iterdir())
    assert (tmp_path / "outside.bin").read_bytes() == b"outside"


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    out = fuzz(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    print(json.dumps(out))
