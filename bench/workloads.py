"""Bake workloads for the runner benchmarks: the sample assets resampled into many
assets, a pipeline over them, a bake in a fresh process, and GPU utilisation and memory
sampling.

Shared by the bench scripts (run as scripts, so this folder is on sys.path).
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # this checkout's bakery, in this process as in the bakes it starts

#: Stage params small enough for a 2-core CPU (lavapipe); the GPU runs use pipeline.toml's.
TINY_PARAMS = {"neural_texture": {"steps": 20, "batch": 512, "width": 8, "layers": 1, "octaves": 2},
               "ntc": {"bpp": 8.0, "steps": 10, "batch": 512, "hidden": 8, "baseline": False}}


def _crop_resize(img: Image.Image, box: tuple[int, int, int, int], size: int) -> Image.Image:
    return img.crop(box).resize((size, size), Image.Resampling.LANCZOS)


def resample_assets(dest: Path, *, textures: int, materials: int, sizes: list[int], seed: int = 0) -> None:
    """``textures`` single images and ``materials`` PBR sets cut from assets/ at random
    squares and resized to ``sizes`` in turn (every role of a material cut alike)."""
    rng = np.random.default_rng(seed)
    tex_src = sorted((REPO / "assets" / "textures").glob("*.png"))
    mat_src = sorted(p for p in (REPO / "assets" / "materials").iterdir() if p.is_dir())

    def box(w: int, h: int) -> tuple[int, int, int, int]:
        side = int(rng.integers(min(w, h) // 2, min(w, h) + 1))
        x, y = int(rng.integers(0, w - side + 1)), int(rng.integers(0, h - side + 1))
        return x, y, x + side, y + side

    for i in range(textures):
        img = Image.open(tex_src[i % len(tex_src)])
        out = dest / "textures" / f"t{i:03d}.png"
        out.parent.mkdir(parents=True, exist_ok=True)
        _crop_resize(img, box(*img.size), sizes[i % len(sizes)]).save(out)
    for j in range(materials):
        folder = mat_src[j % len(mat_src)]
        roles = sorted(folder.glob("*.png"))
        first = Image.open(roles[0])
        b, size = box(*first.size), sizes[j % len(sizes)]
        for role in roles:
            out = dest / "materials" / f"m{j:03d}" / role.name
            out.parent.mkdir(parents=True, exist_ok=True)
            img = _crop_resize(Image.open(role), b, size)
            if role.stem == "normal":
                img = _unit_normals(img)  # resampling shortens normals; stages reject those
            img.save(out)


def _unit_normals(img: Image.Image) -> Image.Image:
    """A tangent-space normal map (n * 0.5 + 0.5) with every texel renormalised."""
    n = np.asarray(img.convert("RGB"), np.float32) / 127.5 - 1.0
    n /= np.maximum(np.linalg.norm(n, axis=-1, keepdims=True), 1e-6)
    return Image.fromarray(np.clip(np.round((n + 1.0) * 127.5), 0, 255).astype(np.uint8))


def copy_sample_assets(dest: Path) -> None:
    shutil.copytree(REPO / "assets", dest, dirs_exist_ok=True)


def write_pipeline(folder: Path, *, small: bool, device: str = "auto", stages: set[str] | None = None,
                   overrides: dict[str, dict] | None = None) -> Path:
    """pipeline.toml's stages (or the named ones) over ``folder``'s textures/ and
    materials/ (tiny params with ``small``, then ``overrides`` per stage name, "*" for all); its Slang
    compile cache is shared through XDG_CACHE_HOME."""
    default = tomllib.loads((REPO / "pipeline.toml").read_text())
    lines = ["[project]", 'name = "bench"', 'out = "out"', 'cache = "cache"', f'device = "{device}"', "seed = 1", "",
             "[assets.textures]", 'image = "textures/*.png"', "", "[assets.materials]", 'material = "materials/*"', ""]
    for name, stage in default["stages"].items():
        if not set(stage["inputs"]) <= {"textures", "materials"}:
            continue  # stages over other assets (fit specs) have nothing to resample
        if stages is not None and name not in stages:
            continue
        params = TINY_PARAMS.get(stage["type"], stage.get("params", {})) if small else stage.get("params", {})
        params = {**params, **(overrides or {}).get("*", {}), **(overrides or {}).get(name, {})}
        inline = ", ".join(f"{k} = {json.dumps(v)}" for k, v in params.items())
        lines += [f"[stages.{name}]", f'type = "{stage["type"]}"', f"inputs = {json.dumps(stage['inputs'])}",
                  f"params = {{ {inline} }}", ""]
    path = folder / "pipeline.toml"
    path.write_text("\n".join(lines))
    return path


def bake_env(work: Path) -> dict[str, str]:
    """One Slang compile cache for every bake of a run (local, pool and Ray workers alike),
    and the checkout first on the path."""
    env = dict(os.environ)
    env["XDG_CACHE_HOME"] = str(work / "xdg")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("RAY_AUTH_MODE", "disabled")
    env.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # a bake's own Ray cluster listens on loopback
    return env


def link_compile_cache(folder: Path, work: Path) -> None:
    """Points the pipeline's device cache at the shared one (bake_env's XDG_CACHE_HOME)."""
    shared = work / "xdg" / "bakery"
    shared.mkdir(parents=True, exist_ok=True)
    (folder / "cache").mkdir(parents=True, exist_ok=True)
    link = folder / "cache" / "device"
    if not link.exists():
        link.symlink_to(shared, target_is_directory=True)


#: The line a bake logs as each task ends (bakery.progress.StageProgress.finished, without a TTY).
TASK_DONE = re.compile(r"\[\d+/\d+\] (?P<stage>[^/\s]+)/(?P<asset>\S+) (?P<status>built|cached|failed|skipped)\b"
                       r"(?: in (?P<seconds>[\d.]+) s)?")
#: The bake's line saying how many worker processes ``--jobs`` (auto) resolved to.
WORKERS = re.compile(r"\d+ tasks at once, in worker processes")


def run_streamed(cmd: list[str], *, cwd: Path, env: dict[str, str], echo: str | None = "    ",
                 tail_chars: int = 4000, on_task=None) -> tuple[int, str]:
    """Runs ``cmd``, echoing each task-finished line of a bake as it comes (prefixed with
    ``echo``; None: silent), so a run cut at its time limit still shows what it finished,
    and handing it to ``on_task(line)`` where given; returns the exit code and the tail of
    its output (stdout and stderr together)."""
    tail: collections.deque[str] = collections.deque()
    size = 0
    with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as p:
        for line in p.stdout:
            done = TASK_DONE.search(line)
            if (done or WORKERS.search(line)) and echo is not None:
                print(echo + line.rstrip(), flush=True)
            if done and on_task is not None:
                on_task(line)
            tail.append(line)
            size += len(line)
            while size > tail_chars and len(tail) > 1:
                size -= len(tail.popleft())
        code = p.wait()
    return code, "".join(tail)[-tail_chars:]


def run_bake(pipeline: Path, work: Path, *args: str, echo: str | None = "    ") -> dict:
    """Bakes in a fresh process (each task's end echoed as it comes); returns wall time,
    exit code and the bake report. Paths are made absolute first: the bake runs in the
    pipeline's folder, not in the caller's working directory."""
    pipeline, work = Path(pipeline).resolve(), Path(work).resolve()
    report = pipeline.parent / "bench-report.json"
    report.unlink(missing_ok=True)   # a failed bake must not show the last one's report
    t0 = time.perf_counter()
    code, log = run_streamed([sys.executable, "-m", "bakery", "bake", str(pipeline), "--report", str(report), *args],
                             cwd=pipeline.parent, env=bake_env(work), echo=echo)
    wall = time.perf_counter() - t0
    rep = json.loads(report.read_text()) if report.is_file() else {}
    return {"wall_s": wall, "exit": code, "report": rep, "log": log}


def save_json(path: Path, data: dict) -> None:
    """Writes ``data`` atomically (a run killed mid-write keeps the previous file whole);
    the benchmarks call it after every row, so a run cut at its time limit keeps its rows."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def verify(out: Path) -> bool:
    out = Path(out).resolve()
    p = subprocess.run([sys.executable, "-m", "bakery", "verify", str(out)], capture_output=True, text=True,
                       env=bake_env(out.parent))
    return p.returncode == 0


def task_seconds(report: dict) -> float:
    return sum(t.get("seconds") or 0.0 for t in report.get("tasks", []))


class GpuSampler:
    """Each NVIDIA GPU's utilisation and memory while a bake runs: one background
    ``nvidia-smi --query-gpu=index,utilization.gpu,memory.used -lms 200``, read into
    ``samples`` (epoch s, GPU index, utilisation %, MiB used). The first reading, taken
    before ``with`` returns, is the idle level memory peaks are measured from. Without
    nvidia-smi (a CPU machine), or when it prints nothing, every figure is None: never
    a made-up number."""

    QUERY = ["--query-gpu=index,utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-lms", "200"]

    def __init__(self, first_reading_s: float = 10.0):
        self.samples: list[tuple[float, int, float, float]] = []
        self.idle_mib: dict[int, float] = {}
        self._first_reading_s = first_reading_s
        self._first = threading.Event()
        self._proc = None
        self._thread = None

    def __enter__(self):
        exe = shutil.which("nvidia-smi")
        if exe:
            self._proc = subprocess.Popen([exe, *self.QUERY], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          text=True)
            self._thread = threading.Thread(target=self._read, daemon=True)
            self._thread.start()
            self._first.wait(self._first_reading_s)   # the idle reading comes before the bake starts
        return self

    def _read(self):
        for line in self._proc.stdout:   # "0, 87, 12345"
            try:
                idx, util, mib = (float(v) for v in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.time(), int(idx), util, mib))
            self.idle_mib.setdefault(int(idx), mib)
            self._first.set()
        self._first.set()

    def __exit__(self, *exc):
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
            self._thread.join(timeout=5)

    def _of(self, index: int, windows: list[tuple[float, float]] | None = None) -> list[tuple[float, float]]:
        return [(u, m) for t, i, u, m in self.samples
                if i == index and (windows is None or any(a <= t <= b for a, b in windows))]

    def count(self, index: int = 0) -> int:
        return len(self._of(index))

    def busy(self) -> dict[int, float] | None:
        """Mean busy share (0-1) per GPU index over the whole run."""
        shares = {i: round(float(np.mean([u for u, _ in self._of(i)])) / 100.0, 3)
                  for i in sorted({i for _, i, _, _ in self.samples})}
        return shares or None

    def busy_percent(self, windows: list[tuple[float, float]] | None = None, index: int = 0) -> float | None:
        """Mean utilisation % of one GPU over the run, or over the samples inside ``windows`` (epoch s)."""
        util = [u for u, _ in self._of(index, windows)]
        return round(float(np.mean(util)), 1) if util else None

    def peak_mib(self, index: int = 0) -> float | None:
        """Most memory one GPU used during the run, above its idle reading."""
        mib = [m for _, m in self._of(index)]
        return round(max(mib) - self.idle_mib[index], 1) if mib else None


def outputs(out: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every bundle file (reports and logs left out)."""
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not p.relative_to(out).as_posix().startswith("logs/")
            and p.name not in ("bake-report.json", "report.html")}


def machine() -> dict:
    import platform

    gpus = []
    exe = shutil.which("nvidia-smi")
    if exe:
        q = subprocess.run([exe, "--query-gpu=name,uuid", "--format=csv,noheader"], capture_output=True, text=True)
        gpus = [line.strip() for line in q.stdout.splitlines() if line.strip()]
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "gpus": gpus, "host": platform.node(),
            "vulkan_adapter_of_each_gpu": adapter_matches()}


def adapter_matches() -> dict[str, str]:
    """For each NVIDIA GPU, the Vulkan adapter its UUID picks (the Ray workers' pinning)."""
    from bakery.gpus import nvidia_smi_uuids, pick_adapter, uuid_bytes

    found = {}
    try:
        import slangpy as spy

        adapters = spy.Device.enumerate_adapters(spy.DeviceType.vulkan)
    except Exception as e:  # noqa: BLE001 - no loader: say so in the JSON
        return {"error": f"{type(e).__name__}: {e}"}
    for index, uuid in nvidia_smi_uuids().items():
        try:
            a = pick_adapter(adapters, software=False, gpu_uuid=uuid)
            how = "UUID match" if bytes(a.luid)[:16] == uuid_bytes(uuid) else "ONLY GPU, UUID NOT MATCHED"
            found[f"{index} {uuid}"] = f"{a.name} luid={bytes(a.luid).hex()} ({how})"
        except LookupError as e:
            found[f"{index} {uuid}"] = f"NO MATCH: {e}"
    return found
