"""Unreal Editor Python: import one bakery bundle.

UNTESTED IN UNREAL HERE: written against docs/FORMAT.md and the documented
``unreal.AssetImportTask`` API, never run inside the editor on bakery's build machines.

Run from the editor's Python console:
    py "path/to/unreal_import_bundle.py" "D:/bakes/out/fit/rock" "/Game/Baked/rock"
It verifies every file's size and sha256, checks weights.bin's header, imports the DDS
textures (authored mips kept, latents as linear data) and logs the network.
"""

import hashlib
import json
import os
import struct
import sys

import unreal

ACTIVATIONS = ["relu", "leaky_relu", "tanh", "sigmoid", "exp", "identity"]


def verify(bundle):
    with open(os.path.join(bundle, "manifest.json"), "rb") as f:
        manifest = json.loads(f.read().decode("utf-8"))
    if manifest.get("schema_version") != 2:
        raise RuntimeError(f"{bundle}: unknown schema version {manifest.get('schema_version')!r}")
    for entry in manifest["files"]:
        path = os.path.join(bundle, entry["name"])
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


def import_textures(bundle, manifest, destination):
    tasks = []
    for name in manifest.get("textures", {}):
        if not name.lower().endswith(".dds"):
            continue                      # Unreal imports DDS; KTX2 needs a plugin
        task = unreal.AssetImportTask()
        task.filename = os.path.join(bundle, name)
        task.destination_path = destination
        task.automated = True
        task.replace_existing = True
        task.save = True
        tasks.append(task)
    unreal.AssetToolsHelpers.get_asset_tools().import_asset_tasks(tasks)
    for task in tasks:
        for asset_path in task.imported_object_paths:
            tex = unreal.load_asset(asset_path)
            if "latent" in os.path.basename(task.filename):
                tex.set_editor_property("srgb", False)
                tex.set_editor_property("compression_settings", unreal.TextureCompressionSettings.TC_HDR)
            tex.set_editor_property("mip_gen_settings", unreal.TextureMipGenSettings.TMGS_LEAVE_EXISTING_MIPS)
            unreal.EditorAssetLibrary.save_loaded_asset(tex)


def main(bundle, destination):
    manifest = verify(bundle)
    import_textures(bundle, manifest, destination)
    for network in manifest.get("networks", {}).values():
        net = read_weights_header(os.path.join(bundle, network["file"]))
        unreal.log(f"bakery network {net['dtype']}: {net['layers']}")
        unreal.log("Bind weights.bin as a raw buffer and paste decoder.hlsl into a Custom node or shader.")
    unreal.log(f"imported bakery bundle {bundle} ({manifest['stage']['type']} v{manifest['stage']['version']})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
