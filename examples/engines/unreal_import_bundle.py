"""Unreal Editor Python: import one bakery bundle.

UNTESTED IN UNREAL HERE: written against docs/FORMAT.md and the documented
``unreal.AssetImportTask`` API, never run inside the editor on bakery's build machines.

Run from the editor's Python console:
    py "path/to/unreal_import_bundle.py" "D:/bakes/out/fit/rock" "/Game/Baked/rock"
It verifies every file's size and sha256, checks weights.bin's header, imports the DDS
textures (authored mips kept; data textures linear, see texture_settings) and logs the
network. An ``ntc`` bundle (latents.bin + decoder) is decoded on load: ``bakery
decompress BUNDLE -o DIR --format dds`` (the ``BAKERY`` environment variable names the
command, default ``bakery``) writes one BCn DDS per role with its full mip chain, and those
are imported (albedo BC7 sRGB, normal BC5, single channels BC4).

Decoding: decoder.hlsl's ``<prefix>_decode`` reads weights.bin through a
``StructuredBuffer<uint>``, which a material's Custom node cannot declare. Run it in a
compute pass (a global shader dispatched through the Render Dependency Graph) that binds
weights.bin as that buffer and ``#include``s decoder.hlsl, writing its outputs to a
render target the materials sample.
"""

import hashlib
import json
import os
import shlex
import struct
import subprocess
import sys
import tempfile

import unreal

ACTIVATIONS = ["relu", "leaky_relu", "tanh", "sigmoid", "exp", "identity"]


def verify(bundle):
    with open(os.path.join(bundle, "manifest.json"), "rb") as f:
        manifest = json.loads(f.read().decode("utf-8"))
    if manifest.get("schema_version") != 2:
        raise RuntimeError(f"{bundle}: unknown schema version {manifest.get('schema_version')!r}")
    for entry in manifest["files"]:
        name = entry["name"]
        if os.path.isabs(name) or ".." in name.replace("\\", "/").split("/"):
            raise RuntimeError(f"{bundle}: file {name!r} is outside the bundle")
        path = os.path.join(bundle, name)
        if os.path.islink(path) or os.path.islink(os.path.dirname(path)):
            raise RuntimeError(f"{path}: a link; a bundle holds its own files")
        with open(path, "rb") as f:
            data = f.read()
        if len(data) != entry["bytes"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise RuntimeError(f"{path}: size or checksum differs from manifest.json")
    return manifest


def read_weights_header(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, dtype, n_layers, size = struct.unpack_from("<4sHHII", data, 0)
    if magic != b"BKNN" or version != 1 or size != len(data):
        raise RuntimeError(f"{path}: not a bakery weights.bin v1")
    layers = [struct.unpack_from("<8I", data, 16 + 32 * i) for i in range(n_layers)]
    return {"dtype": {1: "float16", 2: "float32"}[dtype],
            "layers": [(l[0], l[1], ACTIVATIONS[l[2]], l[4], l[6]) for l in layers]}


def texture_settings(name, role, fmt):
    """(srgb, compression) for one bundle texture, from its manifest role and format.

    Neural latents are data, not colour: linear, and uncompressed 8-bit (Unreal's
    VectorDisplacementmap setting) rather than HDR, which would double their memory for
    nothing. Transcoded BC4/BC5 textures are single/dual-channel data (roughness, normal
    XY): linear, kept as BC4 (Alpha) and BC5 (Normalmap). Only *_srgb formats are sRGB.
    """
    C = unreal.TextureCompressionSettings
    srgb = fmt.endswith("_srgb")
    if role == "latents" or "latent" in name:
        return False, C.TC_VECTOR_DISPLACEMENTMAP
    if fmt.startswith("bc4"):
        return False, C.TC_ALPHA
    if fmt.startswith("bc5"):
        return False, C.TC_NORMALMAP
    return srgb, C.TC_DEFAULT


#: DXGI formats of the DDS files bakery writes, by number (docs/FORMAT.md).
DXGI = {10: "rgba16f", 28: "rgba8_unorm", 29: "rgba8_srgb", 71: "bc1_unorm", 72: "bc1_srgb", 80: "bc4_unorm",
        83: "bc5_unorm", 98: "bc7_unorm", 99: "bc7_srgb"}


#: Legacy-header DDS (single-layer RGBA8/BC1/BC4/BC5, for older readers): FourCC codes.
FOURCC = {b"DXT1": "bc1_unorm", b"BC4U": "bc4_unorm", b"BC5U": "bc5_unorm"}


def dds_format(path):
    """The format of a DDS file as bakery writes it (DX10 header, or the legacy header
    where the format has one), e.g. "bc7_srgb"."""
    with open(path, "rb") as f:
        head = f.read(148)
    if head[:4] != b"DDS ":
        raise RuntimeError(f"{path}: not a DDS file")
    fourcc = head[84:88]
    if fourcc == b"DX10":
        dxgi = struct.unpack_from("<I", head, 128)[0]
        if dxgi in DXGI:
            return DXGI[dxgi]
    elif fourcc in FOURCC:
        return FOURCC[fourcc]
    elif struct.unpack_from("<I", head, 88)[0] == 32:   # legacy uncompressed: RGBA8
        return "rgba8_unorm"
    raise RuntimeError(f"{path}: a DDS format bakery does not write")


def ntc_to_dds(bundle, work_dir, bakery=None):
    """Decodes an ntc bundle on load: runs ``bakery decompress --format dds`` into
    ``work_dir``; returns {file: format} of the DDS files it wrote (one per role, full mips)."""
    command = shlex.split(bakery or os.environ.get("BAKERY", "bakery"))
    subprocess.run([*command, "decompress", bundle, "-o", work_dir, "--format", "dds"], check=True,
                   capture_output=True, text=True)
    return {name: dds_format(os.path.join(work_dir, name))
            for name in sorted(os.listdir(work_dir)) if name.endswith(".dds")}


def import_files(files, destination):
    """Imports {path: (srgb, compression)} DDS files keeping their authored mips."""
    tasks = []
    for path in files:
        task = unreal.AssetImportTask()
        task.filename = path
        task.destination_path = destination
        task.automated = True
        task.replace_existing = True
        task.save = True
        tasks.append((path, task))
    unreal.AssetToolsHelpers.get_asset_tools().import_asset_tasks([t for _, t in tasks])
    for path, task in tasks:
        srgb, compression = files[path]
        for asset_path in task.imported_object_paths:
            tex = unreal.load_asset(asset_path)
            tex.set_editor_property("srgb", srgb)
            tex.set_editor_property("compression_settings", compression)
            tex.set_editor_property("mip_gen_settings", unreal.TextureMipGenSettings.TMGS_LEAVE_EXISTING_MIPS)
            unreal.EditorAssetLibrary.save_loaded_asset(tex)


def import_ntc(bundle, destination, bakery=None):
    """An ntc bundle's texture set, decoded to BCn on load, as Unreal textures."""
    work = tempfile.mkdtemp(prefix="bakery_ntc_")
    decoded = ntc_to_dds(bundle, work, bakery)
    import_files({os.path.join(work, n): texture_settings(n, "decoded", f) for n, f in decoded.items()}, destination)
    return decoded


def import_textures(bundle, manifest, destination):
    roles = {f["name"]: f["role"] for f in manifest["files"]}
    # Unreal imports DDS; KTX2 needs a plugin
    import_files({os.path.join(bundle, name): texture_settings(name, roles.get(name, ""), texture["format"])
                  for name, texture in manifest.get("textures", {}).items() if name.lower().endswith(".dds")},
                 destination)


def main(bundle, destination):
    manifest = verify(bundle)
    if manifest["stage"]["type"] == "ntc":
        decoded = import_ntc(bundle, destination)
        unreal.log(f"decoded ntc bundle {bundle} on load: {', '.join(decoded)}")
        return
    import_textures(bundle, manifest, destination)
    for network in manifest.get("networks", {}).values():
        net = read_weights_header(os.path.join(bundle, network["file"]))
        unreal.log(f"bakery network {net['dtype']}: {net['layers']}")
        unreal.log(f"decode with {network.get('shader_prefix', 'bakery')}_decode from decoder.hlsl in a compute "
                   "pass (global shader) that binds weights.bin as StructuredBuffer<uint>; a material Custom "
                   "node cannot declare that buffer")
    unreal.log(f"imported bakery bundle {bundle} ({manifest['stage']['type']} v{manifest['stage']['version']})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
