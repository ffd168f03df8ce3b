"""The one place that opens a slangpy device and compiles Slang programs.

``auto`` prefers a hardware Vulkan device with cooperative vectors (the only backend on
which CoopVec runs fast on NVIDIA), then any hardware device, then a software Vulkan
device (Mesa lavapipe). Programs are compiled with ``BAKERY_COOPVEC`` set from the
device's features, so code built for a device without them never names a CoopVec type.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bakery.errors import DeviceError, TaskError, UsageError

#: The one Slang include path: the ``bakery`` package folder. Slang lives beside the Python
#: that owns it, and every ``#include`` names its file from here (``nn/mlp.slang``,
#: ``stages/ntc/ntc_fit.slang``), so an installed package compiles exactly like a checkout.
SLANG_DIR = Path(__file__).resolve().parent

DEVICE_KINDS = ("auto", "vulkan", "cuda", "software")

INSTALL_HINT = ("no Vulkan driver found: install a GPU driver, or Mesa lavapipe on CPU-only machines "
                "(Debian bookworm: apt-get install -t bookworm-backports mesa-vulkan-drivers; "
                "scripts/setup.sh does this)")


#: Seconds a single device submission may run (a command buffer of a few training steps
#: takes milliseconds on a GPU and seconds on lavapipe); pipelines override it per
#: project or stage, ``bakery run`` with ``--dispatch-timeout``.
DEFAULT_DISPATCH_TIMEOUT = 600.0
#: The longest sleep between polls of Device.wait_for: a wait ends up to this long after the
#: GPU finished, and a training loop's last wait adds that to every Trainer.train call (at
#: 5 ms, up to 5 us a step over 1000 steps: a visible share of a 0.25 ms step).
WAIT_POLL_MAX_S = 1e-3
#: Devices whose queue still runs a dispatch that timed out or was interrupted.
_WEDGED: list = []


class DispatchTimeout(TaskError):
    """A device dispatch outlived its time limit (a shader that never terminates)."""


def exit_now(code: int) -> None:
    """Ends the process with ``code`` at once when a device is wedged: a normal exit would
    wait in the driver for a dispatch that never finishes. Otherwise returns."""
    if not _WEDGED:
        return
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bakery"


@dataclass(frozen=True)
class Toolchain:
    """Everything besides bakery's own code and the inputs that shapes a GPU bake's bytes.

    In every cache key of a stage that uses a device, and in its bundle's manifest. The
    compiler (slangpy and the Slang build inside it) decides the kernels' instructions; the
    backend, CoopVec on or off, the adapter model and its driver decide how they run (the
    driver compiles SPIR-V to machine code, and float sums come out as its code orders them).
    Nothing names one GPU (no UUID, no bus slot): two identical GPUs on one driver give the
    same bytes and share a cache. ``driver``: the driver's own version string (NVIDIA's
    release number; Mesa's version on CPU-only machines, lavapipe). ``coopvec`` is None
    where the backend decides it only on opening (CUDA), where adapter and driver fix it.
    """

    slangpy: str
    slang: str
    backend: str
    adapter: str
    driver: str
    coopvec: bool | None

    def to_dict(self) -> dict:
        return asdict(self)


def compiler_versions() -> tuple[str, str]:
    """slangpy's version and the Slang compiler's build tag inside it.

    Read from the installed files: planning a cached re-bake then never loads the compiler
    (about 0.2 s on a 2-core CPU). The files say exactly what the import would
    (tests/test_startup.py checks both agree); where they cannot tell, slangpy is imported
    and asked. Either way the answer does not depend on whether this process imported
    slangpy already, so the planner's key and the worker's opened device always agree.
    """
    found = installed_compiler_versions()
    if found is not None:
        return found
    import slangpy as spy

    return str(spy.__version__), str(getattr(spy, "SLANG_BUILD_TAG", "unknown"))


def installed_compiler_versions() -> tuple[str, str] | None:
    """slangpy's version from the metadata installed beside the package ``import slangpy``
    finds, and the Slang build tag from the name of the standard-module folder the wheel
    ships (``slang-standard-module-<tag>``), without importing either; None where the
    installation does not show them unambiguously: no metadata beside the package (it was
    copied, or is an editable build), or two (``pip install --target DIR --upgrade`` leaves
    the old version's behind), or two tags."""
    import importlib.metadata
    import importlib.util

    try:
        spec = importlib.util.find_spec("slangpy")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None or not spec.submodule_search_locations:
        return None
    package = Path(spec.origin).parent
    # Only the distributions in the package's own folder: the first "slangpy" metadata on
    # sys.path may belong to another installation than the package imported.
    versions = {d.version for d in importlib.metadata.distributions(name="slangpy", path=[str(package.parent)])}
    tags = [p.name.removeprefix("slang-standard-module-") for p in package.glob("slang-standard-module-*")
            if p.is_dir()]
    return (versions.pop(), tags[0]) if len(versions) == 1 and len(tags) == 1 else None


def _nvidia_driver() -> str:
    """The NVIDIA kernel driver's version (the CUDA backend's driver), or "unknown"."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return "unknown"
    for word in text.split():
        if word.count(".") >= 1 and word.replace(".", "").isdigit():
            return word
    return "unknown"


def toolchain_of(backend: str, adapter: str, uuid=None, *, coopvec: bool | None) -> Toolchain:
    """The toolchain of ``adapter`` on ``backend``; the driver read from Vulkan without
    opening a device (bakery.vulkan_probe), or from the NVIDIA kernel driver for CUDA."""
    from bakery import vulkan_probe

    slangpy, slang = compiler_versions()
    if backend == "cuda":
        driver = _nvidia_driver()
    else:
        found = vulkan_probe.find(uuid=uuid, name=adapter)
        driver = found.driver_info if found is not None else "unknown"
    return Toolchain(slangpy=slangpy, slang=slang, backend=backend, adapter=adapter, driver=driver, coopvec=coopvec)


@dataclass
class KernelCacheStats:
    """What :meth:`Device.kernel` did in this process: Slang modules compiled from source
    (the front end: parsing, checking, each a fraction of a second on a CPU), programs
    linked into kernels (the driver builds their pipelines at first dispatch), requests
    answered from memory, and the seconds all that compiling took (benchmarks report them;
    tests count on the counts, never on timing)."""

    modules: int = 0
    kernels: int = 0
    hits: int = 0
    compile_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class DeviceInfo:
    backend: str
    adapter: str
    cooperative_vector: bool
    software: bool

    def to_dict(self) -> dict:
        return asdict(self)


class Device:
    """A slangpy device plus what bakery needs to know about it."""

    def __init__(self, spy_device, backend: str, *, portable: bool = False, luid=None):
        import slangpy as spy

        self.spy = spy_device
        # ``portable`` compiles the fp32 backend even where CoopVec exists (reference runs).
        self.coopvec = bool(spy_device.has_feature(spy.Feature.cooperative_vector)) and not portable
        self.portable_forced = portable
        # Cooperative matrices (tensor-core tiles) sum the CoopVec backend's weight gradients;
        # only with cooperative vectors (NVIDIA's extension), whose 32-lane subgroups and
        # 16x16x16 fp16 -> fp32 tiles the split-K kernel assumes.
        self.coopmat = self.coopvec and bool(spy_device.has_feature(spy.Feature.cooperative_matrix))
        self.info = DeviceInfo(backend=backend, adapter=spy_device.info.adapter_name,
                               cooperative_vector=self.coopvec,
                               software=bool(spy_device.has_feature(spy.Feature.software_device)))
        self._programs: dict = {}
        self.kernel_cache = KernelCacheStats()
        #: Seconds one submission may run before :meth:`wait_for` gives up on it; the
        #: worker sets each task's (``dispatch_timeout``, docs/PIPELINE.md).
        self.dispatch_timeout = DEFAULT_DISPATCH_TIMEOUT
        self.wedged = False
        self._last_submit: int | None = None
        #: Seconds the host has waited for the device to finish submissions (wait_for):
        #: with :attr:`kernel_cache`'s compile seconds, what a benchmark splits a task by.
        self.waited_s = 0.0
        self._luid = luid

    @functools.cached_property
    def toolchain(self) -> Toolchain:
        """This device's :class:`Toolchain`, CoopVec as opened (the manifest records it; a
        worker checks it against the one the cache key was computed for)."""
        return toolchain_of(self.info.backend, self.info.adapter, self._luid,
                            coopvec=None if self.info.backend == "cuda" else self.coopvec)

    @functools.cached_property
    def sm_count(self) -> int | None:
        """Multiprocessors of this GPU, where its Vulkan driver reports them (NVIDIA)."""
        from bakery import vulkan_probe

        found = vulkan_probe.find(uuid=self._luid, name=self.info.adapter)
        return found.sm_count if found is not None else None

    @property
    def device_class(self) -> str:
        """Short identity for cache keys: outputs may differ between these, never within.

        The backend an adapter gets (CoopVec or portable) follows from the adapter, so
        backend and adapter name identify it; :func:`probe_device_class` finds the same
        string without opening a device.
        """
        return device_class_of(self.info.backend, self.info.adapter) + (":portable" if self.portable_forced else "")

    def defines(self) -> dict[str, str]:
        return {"BAKERY_COOPVEC": "1" if self.coopvec else "0", "BAKERY_SOFTWARE": "1" if self.info.software else "0"}

    def kernel(self, source: str, entry: str):
        """Compiles entry point ``entry`` of a generated Slang source.

        The source may ``#include`` files relative to :data:`SLANG_DIR`; the backend define is prepended.
        Modules and kernels are kept per device, keyed by the source text with its defines,
        so the next task of a stage in this process reuses them (:attr:`kernel_cache`
        counts); slangpy's module and shader caches (under the cache dir) spare the code
        generation across processes.
        """
        key = self._key(source)
        k = self._programs.get((key, entry))
        if k is not None:
            self.kernel_cache.hits += 1
            return k
        module = self.module(source)
        start = time.perf_counter()
        try:
            program = self.spy.link_program([module], [module.entry_point(entry)])
            # the driver builds the pipeline at the first dispatch: linking a program a device
            # cannot run (CoopVec on lavapipe: the link-only tests) must still succeed here
            k = self.spy.create_compute_kernel(program)
        except RuntimeError as e:
            raise TaskError(f"compiling kernel {entry!r} for {self.info.adapter} failed: {_compile_error(e)}") from None
        finally:
            self.kernel_cache.compile_s += time.perf_counter() - start
        self._programs[(key, entry)] = k
        self.kernel_cache.kernels += 1
        return k

    def module(self, source: str):
        """The Slang module of a generated source (defines prepended), compiled once per
        device: for kernels, and for reading a user shader's signature."""
        key = self._key(source)
        module = self._programs.get(key)
        if module is None:
            start = time.perf_counter()
            try:
                module = self._programs[key] = self.spy.load_module_from_source(f"bakery_{key}",
                                                                                self._header() + source)
            finally:
                self.kernel_cache.compile_s += time.perf_counter() - start
            self.kernel_cache.modules += 1
        return module

    def _header(self) -> str:
        return "".join(f"#define {k} {v}\n" for k, v in sorted(self.defines().items()))

    def _key(self, source: str) -> str:
        return hashlib.sha256((self._header() + source).encode()).hexdigest()[:24]

    def submit(self, record) -> int:
        """Records dispatches with ``record(encoder)`` into one command buffer and runs it;
        returns the submission id (for :meth:`wait_for`)."""
        if self.wedged:
            raise DispatchTimeout(f"the device is still running a dispatch that exceeded its {self.dispatch_timeout:g} s "
                                  "limit; no more work can run on it in this process")
        encoder = self.spy.create_command_encoder()
        record(encoder)
        self._last_submit = self.spy.submit_command_buffer(encoder.finish())
        return self._last_submit

    def wait(self) -> None:
        """Waits for everything submitted (see :meth:`wait_for`)."""
        if self._last_submit is not None:
            self.wait_for(self._last_submit)
        self.spy.wait_for_idle()  # already idle: returns at once

    def wait_for(self, submit_id: int) -> None:
        """Waits for one submission, but never past :attr:`dispatch_timeout` seconds and
        never deaf to signals: the wait polls (sleeping 20 us, growing to WAIT_POLL_MAX_S), so
        Python signal handlers run and a shader that never terminates becomes a one-line
        :class:`DispatchTimeout` instead of a hung bake. The device is then marked wedged
        (its queue cannot be cancelled), and the process must end with :func:`exit_now`."""
        if self.spy.is_submit_finished(submit_id):
            return
        start = time.monotonic()
        deadline = start + self.dispatch_timeout
        pause = 2e-5
        try:
            while not self.spy.is_submit_finished(submit_id):
                if time.monotonic() > deadline:
                    self._wedge()
                    raise DispatchTimeout(f"a device dispatch ran longer than {self.dispatch_timeout:g} s (the task's "
                                          "dispatch_timeout); the shader may never terminate")
                time.sleep(pause)
                pause = min(pause * 2, WAIT_POLL_MAX_S)
        except KeyboardInterrupt:
            if not self.spy.is_submit_finished(submit_id):
                self._wedge()  # interrupted mid-dispatch: the queue is still busy
            raise
        finally:
            self.waited_s += time.monotonic() - start

    def _wedge(self) -> None:
        self.wedged = True
        _WEDGED.append(self)


def _compile_error(error: RuntimeError) -> str:
    """The part of a slangpy compile error a person can act on: the driver's result code
    (``VK_ERROR_...``) where it names one, else the message's first line."""
    text = str(error)
    code = re.search(r"VK_ERROR_[A-Z_]+", text)
    if code:
        return f"the driver returned {code.group(0)} creating its pipeline"
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def device_class_of(backend: str, adapter: str) -> str:
    return f"{backend}:{adapter}"


def is_software_class(device_class: str) -> bool:
    """Whether a device class (:func:`device_class_of`) names a software adapter (lavapipe)."""
    from bakery.gpus import is_software_adapter

    return is_software_adapter(device_class.partition(":")[2])


def probe_device_class(kind: str) -> str | None:
    """The class of the device :func:`open_device` would open for ``kind``, found by
    listing adapters only (no device is created; planning and dry runs use this).
    None when no such device exists, e.g. without a Vulkan loader.

    Vulkan adapters are listed through the loader directly (bakery.vulkan_probe: one
    instance, in the order slangpy lists them), so planning imports no slangpy unless it
    must ask about CUDA."""
    if kind not in DEVICE_KINDS:
        raise UsageError(f"unknown device {kind!r} (known: {', '.join(DEVICE_KINDS)})", key="--device")
    try:
        import importlib.util

        from bakery import vulkan_probe
        from bakery.gpus import is_software_adapter

        if importlib.util.find_spec("slangpy") is None:
            return None  # nothing can be opened without it

        def vulkan(software: bool) -> str | None:
            name = next((d.name for d in vulkan_probe.physical_devices() if is_software_adapter(d.name) == software),
                        None)
            return device_class_of("vulkan", name) if name else None

        def cuda() -> str | None:
            if not _cuda_driver_present():
                return None
            import slangpy as spy

            name = next((a.name for a in spy.Device.enumerate_adapters(spy.DeviceType.cuda)
                         if not is_software_adapter(a.name)), None)
            return device_class_of("cuda", name) if name else None

        if kind == "vulkan":
            return vulkan(False)
        if kind == "software":
            return vulkan(True)
        if kind == "cuda":
            return cuda()
        return vulkan(False) or cuda() or vulkan(True)
    except Exception:  # noqa: BLE001 - no slangpy, no loader: nothing can be opened
        return None


def probe_toolchain(kind: str, *, portable: bool = False) -> Toolchain | None:
    """The :class:`Toolchain` of the device :func:`open_device` would open for ``kind``,
    found as :func:`probe_device_class` finds its class: no device is created, so planning
    a cached re-bake opens none. None when no such device exists."""
    dclass = probe_device_class(kind)
    if dclass is None:
        return None
    backend, _, adapter = dclass.partition(":")
    try:
        from bakery import vulkan_probe

        if backend == "cuda":
            return toolchain_of(backend, adapter, coopvec=None)
        found = vulkan_probe.find(name=adapter)
        coopvec = bool(found is not None and found.cooperative_vector) and not portable
        return toolchain_of(backend, adapter, found.uuid if found is not None else None, coopvec=coopvec)
    except Exception:  # noqa: BLE001 - as probe_device_class: nothing can be opened
        return None


#: The compiled-pipeline cache's bound. slangpy's default (128 MiB) filled on a developer
#: machine after a few days of bakes: a full cache evicts the least recently used
#: pipelines (compiled again by the next process that needs them) and warns where a write
#: still fails (MDB_MAP_FULL). The store is sparse, so a high bound costs only what is
#: written.
SHADER_CACHE_BYTES = 4 << 30


def _create(kind: str, cache_dir: Path | None, portable: bool = False, gpu_uuid: str | None = None):
    import slangpy as spy

    from bakery.gpus import pick_adapter

    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    type_ = {"vulkan": spy.DeviceType.vulkan, "software": spy.DeviceType.vulkan,
             "cuda": spy.DeviceType.cuda}[kind]
    opts = dict(type=type_, enable_hot_reload=False,
                compiler_options={"include_paths": [str(SLANG_DIR)]},
                shader_cache_path=str(cache / "shaders" / kind), module_cache_path=str(cache / "modules"),
                shader_cache_size=SHADER_CACHE_BYTES)
    adapters = spy.Device.enumerate_adapters(type_)
    if not adapters:
        raise RuntimeError(f"no {kind} adapter")
    # Hardware first, unless software was asked for; a pinned Vulkan GPU by its UUID
    # (CUDA devices already honour CUDA_VISIBLE_DEVICES).
    chosen = pick_adapter(adapters, software=kind == "software",
                          gpu_uuid=gpu_uuid if kind == "vulkan" else None)
    dev = spy.Device(adapter_luid=chosen.luid, **opts)
    return Device(dev, "cuda" if kind == "cuda" else "vulkan", portable=portable, luid=list(chosen.luid))


def _cuda_driver_present() -> bool:
    # Probing CUDA without a driver, or with every device hidden (CUDA_VISIBLE_DEVICES
    # empty or -1), makes slangpy print to stderr; look for both first.
    import ctypes.util

    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return False
    return ctypes.util.find_library("cuda") is not None


def _try(kind: str, cache_dir, portable: bool = False, gpu_uuid: str | None = None):
    if kind == "cuda" and not _cuda_driver_present():
        return None
    try:
        return _create(kind, cache_dir, portable, gpu_uuid)
    except Exception:  # noqa: BLE001 - absence of a backend is an expected outcome here
        return None


@functools.lru_cache(maxsize=None)
def _open_cached(kind: str, cache_dir: str | None, portable: bool, gpu_uuid: str | None = None) -> Device:
    if kind not in DEVICE_KINDS:
        raise UsageError(f"unknown device {kind!r} (known: {', '.join(DEVICE_KINDS)})", key="--device")
    if kind != "auto":
        dev = _try(kind, cache_dir, portable, gpu_uuid)
        if dev is None:
            raise DeviceError(f"cannot open a {kind} device; {INSTALL_HINT}", key="--device")
        return dev
    hw = _try("vulkan", cache_dir, portable, gpu_uuid)
    if hw is not None and (hw.coopvec or portable):
        return hw
    other = hw or _try("cuda", cache_dir, portable) or _try("software", cache_dir, portable)
    if other is None:
        raise DeviceError(INSTALL_HINT)
    return other


def open_device(kind: str = "auto", *, cache_dir: Path | None = None, portable: bool = False,
                gpu_uuid: str | None = None) -> Device:
    """Opens (once per process) the device for ``kind``: auto, vulkan, cuda or software.

    ``portable`` forces the fp32 backend even on a device with cooperative vectors;
    ``gpu_uuid`` pins a Vulkan device to that GPU (a cluster worker's, bakery.gpus).
    """
    return _open_cached(kind, str(cache_dir) if cache_dir else None, portable, gpu_uuid)


def list_devices(cache_dir: Path | None = None) -> list[DeviceInfo]:
    """Every device this machine can open, for ``bakery devices``."""
    found = []
    for kind in ("vulkan", "cuda", "software"):
        dev = _try(kind, cache_dir)
        if dev is not None:
            found.append(dev.info)
    return found
