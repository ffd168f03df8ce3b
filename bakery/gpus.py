"""Which GPU a worker was given, and which Vulkan adapter that GPU is.

Cluster schedulers (Ray, Slurm, Kubernetes device plugins) hand a process its GPU
through ``CUDA_VISIBLE_DEVICES``. CUDA honours it; Vulkan does not, and lists every GPU
of the host. The link between the two is the device UUID: NVIDIA's Vulkan driver reports
the same 16 bytes as ``VkPhysicalDeviceIDProperties::deviceUUID`` that NVML and
``nvidia-smi`` print as ``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``, and slangpy's
``AdapterInfo.luid`` carries that UUID on Linux (where Vulkan reports no LUID).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Callable, Sequence


def uuid_bytes(uuid: str) -> bytes:
    """The 16 bytes of a GPU UUID written as ``GPU-6f0c...`` (NVML) or bare hex."""
    text = uuid.strip()
    for prefix in ("GPU-", "MIG-"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    raw = bytes.fromhex(text.replace("-", ""))
    if len(raw) != 16:
        raise ValueError(f"not a 16-byte GPU UUID: {uuid!r}")
    return raw


def parse_smi_uuids(text: str) -> dict[int, str]:
    """``nvidia-smi --query-gpu=index,uuid --format=csv,noheader`` output -> index: UUID."""
    found = {}
    for line in text.splitlines():
        index, sep, uuid = line.partition(",")
        if sep and index.strip().isdigit():
            found[int(index)] = uuid.strip()
    return found


def nvidia_smi_uuids() -> dict[int, str]:
    """Index -> UUID of every NVIDIA GPU of this host (NVML order; {} without a driver)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {}
    try:
        out = subprocess.run([exe, "--query-gpu=index,uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_smi_uuids(out)


def assigned_gpu_uuid(visible: str | None = None,
                      uuids: Callable[[], dict[int, str]] = nvidia_smi_uuids) -> str | None:
    """The UUID of the first GPU in ``CUDA_VISIBLE_DEVICES`` (``visible``), or None when
    no GPU is assigned or the host has no NVIDIA driver (use the default adapter).

    Entries are UUIDs or indices; an index is looked up in NVML order, which equals
    CUDA's on hosts of identical GPUs (set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` on mixed ones).
    """
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    first = (visible or "").split(",")[0].strip()
    if not first or first == "-1" or first.lower() == "nodevfiles":
        return None
    if not first.isdigit():
        return first
    table = uuids()
    if not table:
        return None  # no NVIDIA driver here: the GPUs Ray counted are logical ones
    if int(first) not in table:
        raise LookupError(f"CUDA_VISIBLE_DEVICES names GPU {first} but nvidia-smi lists "
                          f"{sorted(table) or 'no GPU'}")
    return table[int(first)]


def is_software_adapter(name: str) -> bool:
    name = name.lower()
    return "llvmpipe" in name or "lavapipe" in name


def pick_adapter(adapters: Sequence, *, software: bool, gpu_uuid: str | None = None):
    """The adapter to open: the first hardware (or software) one, or with ``gpu_uuid``
    the hardware adapter whose UUID it is (the only one, on a one-GPU host). Raises
    LookupError naming what was there."""
    candidates = [a for a in adapters if is_software_adapter(a.name) == software]
    if not candidates:
        raise LookupError(f"no {'software' if software else 'hardware'} adapter "
                          f"(found: {', '.join(a.name for a in adapters) or 'none'})")
    if gpu_uuid is None or software:
        return candidates[0]
    want = uuid_bytes(gpu_uuid)
    for a in candidates:
        if bytes(a.luid)[:16] == want:
            return a
    if len(candidates) == 1:
        return candidates[0]  # one GPU: nothing to choose (e.g. a driver reporting a LUID instead)
    raise LookupError(f"no adapter has the UUID of the assigned GPU {gpu_uuid} "
                      f"(found: {', '.join(f'{a.name} {bytes(a.luid).hex()}' for a in candidates)})")
