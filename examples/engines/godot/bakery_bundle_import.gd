# Godot 4 editor plugin: imports bakery bundles (see docs/FORMAT.md) by their manifest.
#
# UNTESTED IN GODOT HERE: written against docs/FORMAT.md and Godot 4's documented
# EditorPlugin / EditorFileSystem API, never run in the Godot editor on bakery's machines.
#
# It claims no file extension (an import plugin for ".bin" would also take an ntc bundle's
# latents.bin, and one for ".json" every JSON file in the project): it watches the project's
# files, and a file named manifest.json whose keys are a bakery manifest's (REQUIRED_KEYS)
# becomes <folder>/bundle.tres beside it, after every file the manifest lists has passed its
# size and sha256 check. The resource carries the manifest and, per network, the layer table
# and the raw weights.bin bytes (upload them unchanged as a storage buffer for decoder.glsl);
# for an ntc bundle also latents.bin's bytes and the name of ntc_decode.glsl, whose
# functions start with the manifest's ntc.files.symbol_prefix.
# Enable it as a plugin (plugin.cfg script = "bakery_bundle_import.gd").
@tool
extends EditorPlugin

const MANIFEST := "manifest.json"
const REQUIRED_KEYS := ["schema_version", "bakery_version", "stage", "params", "seed", "device", "metrics", "files"]
const SCHEMA_VERSION := 2

func _enter_tree():
	get_editor_interface().get_resource_filesystem().filesystem_changed.connect(_scan)

func _exit_tree():
	get_editor_interface().get_resource_filesystem().filesystem_changed.disconnect(_scan)

func _scan():
	_scan_dir(get_editor_interface().get_resource_filesystem().get_filesystem())

func _scan_dir(dir: EditorFileSystemDirectory):
	for i in dir.get_file_count():
		if dir.get_file(i) == MANIFEST:
			var err := import_bundle(dir.get_path())
			if err != "":
				push_error("%s: %s" % [dir.get_path().path_join(MANIFEST), err])
	for i in dir.get_subdir_count():
		_scan_dir(dir.get_subdir(i))

func is_bundle_manifest(manifest) -> bool:
	if typeof(manifest) != TYPE_DICTIONARY:
		return false
	for key in REQUIRED_KEYS:
		if not manifest.has(key):
			return false
	return int(manifest["schema_version"]) == SCHEMA_VERSION

func import_bundle(folder: String) -> String:
	var manifest = JSON.parse_string(FileAccess.get_file_as_string(folder.path_join(MANIFEST)))
	if not is_bundle_manifest(manifest):
		return ""  # some other manifest.json: not ours, left alone
	var files := {}
	for entry in manifest["files"]:
		var name: String = entry["name"]
		if name.begins_with("/") or ".." in name.split("/"):
			return "file %s is outside the bundle" % name
		var data := FileAccess.get_file_as_bytes(folder.path_join(name))
		var ctx := HashingContext.new()
		ctx.start(HashingContext.HASH_SHA256)
		ctx.update(data)
		if data.size() != int(entry["bytes"]) or ctx.finish().hex_encode() != entry["sha256"]:
			return "%s: size or checksum differs from manifest.json" % name
		files[name] = data
	var res := Resource.new()
	res.set_meta("manifest", manifest)
	var networks := {}
	for net_name in manifest.get("networks", {}):
		var net = manifest["networks"][net_name]
		var data: PackedByteArray = files[net["file"]]
		if data.size() < 16 or data.slice(0, 4).get_string_from_ascii() != "BKNN":
			return "%s: not a bakery weights file (wrong magic)" % net["file"]
		networks[net_name] = {"dtype": net["dtype"], "layers": net["layers"], "bytes": data,
			"shader_prefix": net.get("shader_prefix", "")}
	res.set_meta("networks", networks)
	if manifest["stage"]["type"] == "ntc":
		var ntc = manifest["ntc"]
		res.set_meta("latents", files[ntc["files"]["latents"]])
		res.set_meta("decoder_glsl", ntc["files"]["decoders"]["glsl"])
		res.set_meta("symbol_prefix", ntc["files"]["symbol_prefix"])
	var err := ResourceSaver.save(res, folder.path_join("bundle.tres"))
	return "" if err == OK else "cannot save bundle.tres (error %d)" % err
