# Godot 4 EditorImportPlugin for bakery's weights.bin (see docs/FORMAT.md, section 3).
#
# UNTESTED IN GODOT HERE: written against docs/FORMAT.md and Godot 4's documented
# EditorImportPlugin API, never run in the Godot editor on bakery's machines.
#
# Register it from an EditorPlugin: add_import_plugin(preload("bakery_weights_import.gd").new())
# It checks the header and the sha256 in the sibling manifest.json, then saves a Resource
# with the layer table and the raw bytes (upload them unchanged as a storage buffer for
# decoder.glsl).
@tool
extends EditorImportPlugin

func _get_importer_name(): return "bakery.weights"
func _get_visible_name(): return "bakery network weights"
func _get_recognized_extensions(): return ["bin"]
func _get_save_extension(): return "res"
func _get_resource_type(): return "Resource"
func _get_preset_count(): return 1
func _get_preset_name(_i): return "Default"
func _get_import_options(_path, _preset): return []
func _get_priority(): return 1.0
func _get_import_order(): return 0

func _import(source_file, save_path, _options, _variants, _gen_files):
	var data := FileAccess.get_file_as_bytes(source_file)
	var err := _check_manifest(source_file, data)
	if err != "":
		push_error("%s: %s" % [source_file, err])
		return ERR_FILE_CORRUPT
	if data.size() < 16 or data.slice(0, 4).get_string_from_ascii() != "BKNN":
		push_error("%s: not a bakery weights.bin (wrong magic)" % source_file)
		return ERR_FILE_UNRECOGNIZED
	var version := data.decode_u16(4)
	var dtype := data.decode_u16(6)
	var layers := data.decode_u32(8)
	if version != 1 or not (dtype in [1, 2]) or data.decode_u32(12) != data.size() or 16 + 32 * layers > data.size():
		push_error("%s: unsupported or truncated weights.bin" % source_file)
		return ERR_FILE_CORRUPT
	var table := []
	for i in layers:
		var r := 16 + 32 * i
		table.append({"in": data.decode_u32(r), "out": data.decode_u32(r + 4),
			"activation": data.decode_u32(r + 8), "weight_offset": data.decode_u32(r + 16),
			"bias_offset": data.decode_u32(r + 24)})
	var res := Resource.new()
	res.set_meta("dtype", "float16" if dtype == 1 else "float32")
	res.set_meta("layers", table)
	res.set_meta("bytes", data)
	return ResourceSaver.save(res, "%s.%s" % [save_path, _get_save_extension()])

func _check_manifest(source_file: String, data: PackedByteArray) -> String:
	var manifest_path := source_file.get_base_dir().path_join("manifest.json")
	var manifest = JSON.parse_string(FileAccess.get_file_as_string(manifest_path))
	if typeof(manifest) != TYPE_DICTIONARY or manifest.get("schema_version") != 2:
		return "manifest.json missing or of an unknown schema version"
	var ctx := HashingContext.new()
	ctx.start(HashingContext.HASH_SHA256)
	ctx.update(data)
	var digest := ctx.finish().hex_encode()
	for entry in manifest["files"]:
		if entry["name"] == source_file.get_file():
			if int(entry["bytes"]) != data.size() or entry["sha256"] != digest:
				return "size or checksum differs from manifest.json"
			return ""
	return "not listed in manifest.json"
