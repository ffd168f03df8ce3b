"""What the Vulkan driver says about its GPUs, read without opening a device.

slangpy lists adapters by name and UUID only; the cache key also needs the driver's
version and whether it offers cooperative vectors, and the CoopVec backend sizes its
gradient reduction from the number of multiprocessors. All of these are properties of the
physical device: a Vulkan instance (what listing adapters creates anyway) and
``vkGetPhysicalDeviceProperties2`` give them, with no logical device, queue or memory, so
planning a cached re-bake stays as cheap as listing adapters.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from dataclasses import dataclass

# Structure types and sizes from the Vulkan headers (vulkan_core.h).
_STYPE_APPLICATION_INFO = 0
_STYPE_INSTANCE_CREATE_INFO = 1
_STYPE_PROPERTIES_2 = 1000059001
_STYPE_ID_PROPERTIES = 1000071004
_STYPE_DRIVER_PROPERTIES = 1000196000
_STYPE_SM_BUILTINS_PROPERTIES_NV = 1000154001
_API_VERSION_1_2 = (1 << 22) | (2 << 12)
_MAX_NAME = 256
_EXTENSION_BYTES = _MAX_NAME + 4  # VkExtensionProperties: name, specVersion

COOPERATIVE_VECTOR_EXTENSION = "VK_NV_cooperative_vector"
COOPERATIVE_MATRIX_EXTENSION = "VK_KHR_cooperative_matrix"
SM_BUILTINS_EXTENSION = "VK_NV_shader_sm_builtins"


@dataclass(frozen=True)
class PhysicalDevice:
    """One GPU as its Vulkan driver describes it."""

    name: str
    uuid: bytes          # deviceUUID: slangpy's AdapterInfo.luid on Linux
    driver_name: str     # e.g. "NVIDIA", "llvmpipe"
    driver_info: str     # the driver's own version string, e.g. "580.159.04", "Mesa 25.0.7-2~bpo12+1"
    extensions: frozenset[str]
    sm_count: int | None  # multiprocessors (NVIDIA: VK_NV_shader_sm_builtins); None where not reported
    memory_bytes: int | None = None  # the largest device-local heap (its own memory, for a GPU)

    @property
    def cooperative_vector(self) -> bool:
        return COOPERATIVE_VECTOR_EXTENSION in self.extensions


class _AppInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("pApplicationName", ctypes.c_char_p),
                ("applicationVersion", ctypes.c_uint32), ("pEngineName", ctypes.c_char_p),
                ("engineVersion", ctypes.c_uint32), ("apiVersion", ctypes.c_uint32)]


class _InstanceInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                ("pApplicationInfo", ctypes.POINTER(_AppInfo)), ("enabledLayerCount", ctypes.c_uint32),
                ("ppEnabledLayerNames", ctypes.c_void_p), ("enabledExtensionCount", ctypes.c_uint32),
                ("ppEnabledExtensionNames", ctypes.c_void_p)]


class _Chained(ctypes.Structure):
    """The head every extensible Vulkan output structure starts with."""
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p)]


class _IdProperties(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("deviceUUID", ctypes.c_uint8 * 16),
                ("driverUUID", ctypes.c_uint8 * 16), ("deviceLUID", ctypes.c_uint8 * 8),
                ("deviceNodeMask", ctypes.c_uint32), ("deviceLUIDValid", ctypes.c_uint32)]


class _DriverProperties(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("driverID", ctypes.c_int),
                ("driverName", ctypes.c_char * _MAX_NAME), ("driverInfo", ctypes.c_char * _MAX_NAME),
                ("conformanceVersion", ctypes.c_uint8 * 4)]


class _SmBuiltins(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("shaderSMCount", ctypes.c_uint32),
                ("shaderWarpsPerSM", ctypes.c_uint32)]


class _MemoryHeap(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint64), ("flags", ctypes.c_uint32)]


class _MemoryProperties(ctypes.Structure):
    # VkPhysicalDeviceMemoryProperties: 32 memory types (propertyFlags, heapIndex), then 16 heaps.
    _fields_ = [("memoryTypeCount", ctypes.c_uint32), ("memoryTypes", ctypes.c_uint32 * 64),
                ("memoryHeapCount", ctypes.c_uint32), ("memoryHeaps", _MemoryHeap * 16)]


_HEAP_DEVICE_LOCAL = 0x1


class _Properties2(ctypes.Structure):
    # VkPhysicalDeviceProperties2: the head, then VkPhysicalDeviceProperties, whose first
    # fields are apiVersion, driverVersion, vendorID, deviceID, deviceType, deviceName; the
    # rest (limits, sparse properties: under 1 KiB) is left as room.
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("apiVersion", ctypes.c_uint32),
                ("driverVersion", ctypes.c_uint32), ("vendorID", ctypes.c_uint32), ("deviceID", ctypes.c_uint32),
                ("deviceType", ctypes.c_int), ("deviceName", ctypes.c_char * _MAX_NAME),
                ("rest", ctypes.c_uint8 * 4096)]


def _loader():
    for name in ("libvulkan.so.1", ctypes.util.find_library("vulkan")):
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                continue
    return None


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


@functools.lru_cache(maxsize=None)
def physical_devices() -> tuple[PhysicalDevice, ...]:
    """Every GPU the Vulkan loader lists (software ones too); () without a loader."""
    vk = _loader()
    if vk is None:
        return ()
    app = _AppInfo(_STYPE_APPLICATION_INFO, None, b"bakery", 0, b"bakery", 0, _API_VERSION_1_2)
    info = _InstanceInfo(_STYPE_INSTANCE_CREATE_INFO, None, 0, ctypes.pointer(app), 0, None, 0, None)
    instance = ctypes.c_void_p()
    vk.vkCreateInstance.argtypes = [ctypes.POINTER(_InstanceInfo), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    if vk.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(instance)) != 0:
        return ()
    try:
        vk.vkEnumeratePhysicalDevices.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32), ctypes.c_void_p]
        count = ctypes.c_uint32()
        vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
        handles = (ctypes.c_void_p * count.value)()
        vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), handles)
        return tuple(_describe(vk, handles[i]) for i in range(count.value))
    finally:
        vk.vkDestroyInstance.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        vk.vkDestroyInstance(instance, None)


def _extensions(vk, handle) -> frozenset[str]:
    f = vk.vkEnumerateDeviceExtensionProperties
    f.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint32), ctypes.c_void_p]
    count = ctypes.c_uint32()
    f(handle, None, ctypes.byref(count), None)
    buf = (ctypes.c_uint8 * (_EXTENSION_BYTES * count.value))()
    f(handle, None, ctypes.byref(count), buf)
    raw = bytes(buf)
    return frozenset(_text(raw[i * _EXTENSION_BYTES:i * _EXTENSION_BYTES + _MAX_NAME]) for i in range(count.value))


def _describe(vk, handle) -> PhysicalDevice:
    extensions = _extensions(vk, handle)
    ids = _IdProperties(_STYPE_ID_PROPERTIES, None)
    driver = _DriverProperties(_STYPE_DRIVER_PROPERTIES, ctypes.cast(ctypes.pointer(ids), ctypes.c_void_p))
    sm = _SmBuiltins(_STYPE_SM_BUILTINS_PROPERTIES_NV, None)
    if SM_BUILTINS_EXTENSION in extensions:  # chained only where the driver knows the structure
        ids.pNext = ctypes.cast(ctypes.pointer(sm), ctypes.c_void_p)
    props = _Properties2(_STYPE_PROPERTIES_2, ctypes.cast(ctypes.pointer(driver), ctypes.c_void_p))
    vk.vkGetPhysicalDeviceProperties2.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Properties2)]
    vk.vkGetPhysicalDeviceProperties2(handle, ctypes.byref(props))
    return PhysicalDevice(name=_text(props.deviceName), uuid=bytes(ids.deviceUUID),
                          driver_name=_text(driver.driverName), driver_info=_text(driver.driverInfo),
                          extensions=extensions, sm_count=int(sm.shaderSMCount) or None,
                          memory_bytes=_device_local_bytes(vk, handle))


def _device_local_bytes(vk, handle) -> int | None:
    memory = _MemoryProperties()
    vk.vkGetPhysicalDeviceMemoryProperties.argtypes = [ctypes.c_void_p, ctypes.POINTER(_MemoryProperties)]
    vk.vkGetPhysicalDeviceMemoryProperties(handle, ctypes.byref(memory))
    heaps = [memory.memoryHeaps[i] for i in range(min(16, memory.memoryHeapCount))]
    return max((int(h.size) for h in heaps if h.flags & _HEAP_DEVICE_LOCAL), default=None)


def find(uuid: bytes | list[int] | None = None, name: str | None = None) -> PhysicalDevice | None:
    """The GPU with this UUID (slangpy's luid), else the first one of this name."""
    found = physical_devices()
    if uuid is not None:
        match = next((d for d in found if d.uuid == bytes(uuid)), None)
        if match is not None:
            return match
    return next((d for d in found if d.name == name), None) if name is not None else None
