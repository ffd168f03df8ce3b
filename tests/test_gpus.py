"""Matching the GPU a scheduler assigned (CUDA_VISIBLE_DEVICES) to a Vulkan adapter."""

from collections import namedtuple

import pytest

from bakery.gpus import assigned_gpu_uuid, parse_smi_uuids, pick_adapter, uuid_bytes

Adapter = namedtuple("Adapter", "name luid")

UUIDS = {0: "GPU-6f0c2a1e-0b7d-4c3a-9e55-1f2a3b4c5d6e",
         1: "GPU-a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90",
         2: "GPU-00112233-4455-6677-8899-aabbccddeeff"}


def adapter(name, uuid):
    return Adapter(name, list(uuid_bytes(uuid)))  # slangpy gives the luid as a list of ints


HOST = [adapter("NVIDIA H200", UUIDS[2]), adapter("NVIDIA H200", UUIDS[0]), adapter("NVIDIA H200", UUIDS[1]),
        Adapter("llvmpipe (LLVM 15.0.6, 256 bits)", list(b"mesa25.0.7-2~bp\0"))]


def test_uuid_forms():
    raw = uuid_bytes(UUIDS[0])
    assert len(raw) == 16 and raw.hex() == "6f0c2a1e0b7d4c3a9e551f2a3b4c5d6e"
    assert uuid_bytes(raw.hex()) == raw
    with pytest.raises(ValueError):
        uuid_bytes("GPU-1234")


def test_picks_the_adapter_of_the_assigned_gpu_whatever_the_vulkan_order():
    for uuid in UUIDS.values():
        assert bytes(pick_adapter(HOST, software=False, gpu_uuid=uuid).luid) == uuid_bytes(uuid)


def test_unpinned_and_software_picks():
    assert pick_adapter(HOST, software=False) is HOST[0]
    assert pick_adapter(HOST, software=True).name.startswith("llvmpipe")
    cpu_only = HOST[3:]
    assert pick_adapter(cpu_only, software=True, gpu_uuid=UUIDS[0]) is cpu_only[0]  # one software adapter


def test_no_adapter_for_the_assigned_gpu_says_what_was_found():
    with pytest.raises(LookupError, match="no adapter has the UUID.*NVIDIA H200"):
        pick_adapter(HOST[:2], software=False, gpu_uuid=UUIDS[1])
    assert pick_adapter(HOST[:1], software=False, gpu_uuid=UUIDS[1]) is HOST[0]  # one GPU: no choice to make
    with pytest.raises(LookupError, match="no hardware adapter.*llvmpipe"):
        pick_adapter(HOST[3:], software=False)


def test_assigned_gpu_from_cuda_visible_devices():
    table = lambda: dict(UUIDS)  # noqa: E731
    assert assigned_gpu_uuid("1", table) == UUIDS[1]
    assert assigned_gpu_uuid("2,0", table) == UUIDS[2]  # a process uses the first one
    assert assigned_gpu_uuid(UUIDS[0], table) == UUIDS[0]  # UUID entries pass through
    for none in ("", "-1", None):
        assert assigned_gpu_uuid(none if none is not None else "", table) is None
    with pytest.raises(LookupError, match="GPU 7"):
        assigned_gpu_uuid("7", table)
    assert assigned_gpu_uuid("0", lambda: {}) is None  # logical GPUs on a host without a driver


def test_parse_nvidia_smi():
    text = f"0, {UUIDS[0]}\n1, {UUIDS[1]}\n\nNo devices were found\n"
    assert parse_smi_uuids(text) == {0: UUIDS[0], 1: UUIDS[1]}
