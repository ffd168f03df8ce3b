"""The standalone bundle reader: numpy only, the reference for engine import scripts.

:func:`read_bundle` checks everything before returning anything: the manifest's JSON,
schema version and required keys, every listed file's size and sha256, the
``weights.bin`` header against the manifest's network, and every texture's header
against its manifest record. Any problem raises :class:`BundleError` with one line
naming the file; no other exception type escapes for bad input.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bakery.formats.bundle import DEFAULT_NETWORK, MANIFEST_NAME, REQUIRED_KEYS, SCHEMA_VERSION, check_file_name
from bakery.formats.errors import BundleError
from bakery.formats.publish import ASIDE_SUFFIX
from bakery.formats.texture import Texture
from bakery.formats.weights import DTYPES, WeightsFile, decode_weights
from bakery.nn.network import NetworkSpec
from bakery.safe_files import MAX_FILE_BYTES, MAX_METADATA_BYTES, RefusedFile, read_regular

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_TYPES = {"schema_version": int, "bakery_version": str, "stage": dict, "params": dict, "seed": int,
          "device": dict, "metrics": dict, "files": list}
#: A stage that never opened a device records ``"device": null``.
_NULLABLE = ("device",)
_NETWORK_KEYS = ("file", "dtype", "encoding", "layers", "weights_bytes")
_TEXTURE_KEYS = ("format", "width", "height", "mips", "layers")


@dataclass
class Bundle:
    """A verified bundle: its manifest, networks by name and textures, all in memory.

    ``network``/``weights`` are the bundle's ``decoder`` network (or its only one), what
    single-network stages write and generated decoders read.
    """

    path: Path
    manifest: dict
    files: dict[str, bytes] = field(repr=False)
    networks: dict[str, tuple[NetworkSpec, WeightsFile]] = field(default_factory=dict)
    textures: dict[str, Texture] = field(default_factory=dict)
    #: The checked ``ntc`` object of an NTC bundle (bakery.formats.ntc_manifest.NtcRecord).
    ntc: object | None = None

    def _main(self) -> tuple[NetworkSpec, WeightsFile] | tuple[None, None]:
        if DEFAULT_NETWORK in self.networks:
            return self.networks[DEFAULT_NETWORK]
        return next(iter(self.networks.values())) if len(self.networks) == 1 else (None, None)

    @property
    def network(self) -> NetworkSpec | None:
        return self._main()[0]

    @property
    def weights(self) -> WeightsFile | None:
        return self._main()[1]

    def by_role(self, role: str) -> dict[str, bytes]:
        """The bundle's files of one role (``weights``, ``texture``, ``preview``, ...) by name."""
        names = {e["name"] for e in self.manifest["files"] if e["role"] == role}
        return {n: self.files[n] for n in sorted(names)}

    @property
    def params(self) -> np.ndarray | None:
        """Canonical flat fp32 parameters (as stored: fp16-rounded for float16 bundles)."""
        return None if self.weights is None else self.weights.params

    def decode(self, x: np.ndarray) -> np.ndarray:
        """The network's output for raw inputs ``x`` [N, n_inputs], on the CPU (float64)."""
        if self.network is None:
            raise BundleError("bundle has no network", where=str(self.path / MANIFEST_NAME))
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.network.n_inputs:
            raise ValueError(f"decode takes [N, {self.network.n_inputs}] inputs, got {x.shape}")
        return self.network.forward(self.weights.params, x)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_manifest(manifest, where: str) -> None:
    if not isinstance(manifest, dict):
        raise BundleError("manifest is not a JSON object", where=where)
    version = manifest.get("schema_version")
    if "schema_version" in manifest and version != SCHEMA_VERSION:
        raise BundleError(f"unknown schema version {version!r} (this reader knows {SCHEMA_VERSION})", where=where)
    for key in REQUIRED_KEYS:
        if key not in manifest:
            raise BundleError(f"manifest is missing key {key!r}", where=where)
        want = _TYPES[key]
        ok = _is_int(manifest[key]) if want is int else isinstance(manifest[key], want)
        if key in _NULLABLE and manifest[key] is None:
            ok = True
        if not ok:
            raise BundleError(f"manifest key {key!r} should be a {want.__name__}", where=where)
    stage = manifest["stage"]
    if not isinstance(stage.get("type"), str) or not isinstance(stage.get("version"), str):
        raise BundleError("manifest 'stage' needs string 'type' and 'version'", where=where)


def _check_file_entries(entries: list, where: str) -> dict[str, dict]:
    out = {}
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise BundleError(f"files[{i}] is not an object", where=where)
        name, size, digest = e.get("name"), e.get("bytes"), e.get("sha256")
        try:
            check_file_name(name)
        except ValueError:
            raise BundleError(f"files[{i}] has a bad name {name!r}", where=where) from None
        if not isinstance(e.get("role"), str) or not _is_int(size) or size < 0 \
                or not isinstance(digest, str) or not _SHA256.match(digest):
            raise BundleError(f"files[{i}] ({name}) needs string role, integer bytes and a sha256", where=where)
        if name in out:
            raise BundleError(f"file {name!r} listed twice", where=where)
        out[name] = e
    return out


def _read_listed_file(folder: Path, entry: dict) -> bytes:
    path = folder / entry["name"]
    if entry["bytes"] > MAX_FILE_BYTES:
        raise BundleError(f"manifest says {entry['bytes']} bytes, more than the {MAX_FILE_BYTES} a bundle file may hold",
                          where=str(path))
    try:
        data = read_regular(path, limit=entry["bytes"], beneath=folder)
    except FileNotFoundError:
        raise BundleError("listed in the manifest but missing", where=str(path)) from None
    except RefusedFile as e:
        if "more than" in e.why or "grew past" in e.why:
            raise BundleError(f"larger than the {entry['bytes']} bytes the manifest says", where=str(path)) from None
        raise BundleError(e.why, where=e.path) from None
    except OSError as e:
        raise BundleError(f"cannot read ({e.strerror or type(e).__name__})", where=str(path)) from None
    if len(data) != entry["bytes"]:
        raise BundleError(f"size mismatch: {len(data)} bytes, manifest says {entry['bytes']} (truncated?)", where=str(path))
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise BundleError("checksum mismatch: sha256 differs from the manifest", where=str(path))
    return data


def _load_network(folder: Path, record, files: dict[str, bytes], where: str,
                  net: str) -> tuple[NetworkSpec, WeightsFile]:
    if not isinstance(record, dict) or any(k not in record for k in _NETWORK_KEYS):
        raise BundleError(f"manifest 'networks.{net}' needs keys {', '.join(_NETWORK_KEYS)}", where=where)
    name = record["file"]
    if not isinstance(name, str) or name not in files:
        raise BundleError(f"network file {name!r} is not listed in 'files'", where=where)
    if not isinstance(record["dtype"], str) or record["dtype"] not in DTYPES:
        raise BundleError(f"unknown network dtype {record['dtype']!r}", where=where)
    try:
        spec = NetworkSpec.from_dict(record)
        spec_layers = spec.layers
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, OverflowError) as e:
        raise BundleError(f"manifest 'networks.{net}' is not a valid network description ({type(e).__name__}: {e})",
                          where=where) from None
    layer_records = record["layers"]
    wpath = str(folder / name)
    weights = decode_weights(files[name], where=wpath)
    if weights.dtype != record["dtype"]:
        raise BundleError(f"dtype {weights.dtype} but the manifest says {record['dtype']}", where=wpath)
    if not weights.matches(spec) or len(layer_records) != len(spec_layers):
        raise BundleError("layer sizes or activations differ from the manifest's network", where=wpath)
    for i, (lr, lay) in enumerate(zip(layer_records, weights.layers)):
        if not isinstance(lr, dict) or lr.get("weight_offset") != lay.weight_offset or lr.get("bias_offset") != lay.bias_offset:
            raise BundleError(f"layer {i} offsets differ from the manifest's network", where=wpath)
        _check_layer_record(i, lr, lay, where, net)
    _check_network_fields(record, spec, where, net)
    if record["weights_bytes"] != len(files[name]):
        raise BundleError(f"size differs from the manifest's networks.{net}.weights_bytes", where=wpath)
    return spec, weights


#: Every per-layer field docs/FORMAT.md section 2.1 gives, with what the header must agree on.
_LAYER_FIELDS = {"in": "n_in", "out": "n_out", "activation": "activation",
                 "weight_offset": "weight_offset", "bias_offset": "bias_offset"}


def _check_layer_record(i: int, record: dict, layout, where: str, net: str) -> None:
    """A manifest layer must carry every documented field, each agreeing with weights.bin
    (the decoder shaders and ONNX are generated from the manifest, not the header)."""
    for key, attr in _LAYER_FIELDS.items():
        if key not in record:
            raise BundleError(f"networks.{net} layer {i} is missing {key!r}", where=where)
        value, want = record[key], getattr(layout, attr)
        if (isinstance(want, int) and not _is_int(value)) or value != want:
            raise BundleError(f"networks.{net} layer {i} {key!r} is {value!r} but the weights file says {want!r}",
                              where=where)


def _check_network_fields(record: dict, spec: NetworkSpec, where: str, net: str) -> None:
    """The network-wide fields bakery writes, where present, must describe this layout."""
    from bakery.formats.weights import BIAS_ALIGN, MATRIX_ALIGN

    expected = {"layout": "row_major_out_in", "matrix_align": MATRIX_ALIGN, "bias_align": BIAS_ALIGN,
                "param_count": spec.param_count}
    for key, want in expected.items():
        if key in record and (record[key] != want or isinstance(record[key], bool)):
            raise BundleError(f"networks.{net} {key!r} is {record[key]!r}, expected {want!r}", where=where)


def _load_texture(folder: Path, name: str, record, files: dict[str, bytes], where: str) -> Texture:
    from bakery.formats.dds import read_dds
    from bakery.formats.ktx2 import read_ktx2

    if not isinstance(name, str) or name not in files:
        raise BundleError(f"texture {name!r} is not listed in 'files'", where=where)
    if not isinstance(record, dict) or any(k not in record for k in _TEXTURE_KEYS):
        raise BundleError(f"texture record {name!r} needs keys {', '.join(_TEXTURE_KEYS)}", where=where)
    path = str(folder / name)
    if name.lower().endswith(".dds"):
        tex = read_dds(files[name], where=path)
    elif name.lower().endswith(".ktx2"):
        tex = read_ktx2(files[name], where=path)
    else:
        raise BundleError(f"texture {name!r} is neither .dds nor .ktx2", where=where)
    got = {"format": tex.format.name, "width": tex.width, "height": tex.height, "mips": tex.level_count,
           "layers": tex.layer_count}
    want = {k: record[k] for k in _TEXTURE_KEYS}
    if got != want:
        raise BundleError(f"header says {got}, manifest says {want}", where=path)
    return tex


def read_bundle(path: str | Path) -> Bundle:
    """Loads and fully verifies the bundle folder at ``path``."""
    folder = Path(path)
    where = str(folder / MANIFEST_NAME)
    try:
        raw = read_regular(folder / MANIFEST_NAME, limit=MAX_METADATA_BYTES)
    except FileNotFoundError:
        raise BundleError("not a bundle: manifest.json not found", where=str(folder)) from None
    except RefusedFile as e:
        raise BundleError(e.why, where=e.path) from None
    except OSError as e:
        raise BundleError(f"cannot read ({e.strerror or type(e).__name__})", where=where) from None
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise BundleError(f"manifest is not valid JSON ({type(e).__name__})", where=where) from None
    _check_manifest(manifest, where)
    entries = _check_file_entries(manifest["files"], where)
    files = {name: _read_listed_file(folder, e) for name, e in entries.items()}
    bundle = Bundle(folder, manifest, files)
    networks = manifest.get("networks", {})
    if not isinstance(networks, dict):
        raise BundleError("manifest 'networks' should be an object", where=where)
    for name, record in networks.items():
        bundle.networks[name] = _load_network(folder, record, files, where, name)
    textures = manifest.get("textures", {})
    if not isinstance(textures, dict):
        raise BundleError("manifest 'textures' should be an object", where=where)
    for name, record in textures.items():
        bundle.textures[name] = _load_texture(folder, name, record, files, where)
    if "ntc" in manifest:
        from bakery.formats.ntc_manifest import check_ntc

        spec = bundle.network
        bundle.ntc = check_ntc(manifest["ntc"], set(files), where, spec.layers[-1].n_out if spec else None)
    return bundle


def find_bundles(root: str | Path) -> list[Path]:
    """Every folder under ``root`` (itself included) that holds a manifest.json, sorted."""
    root = Path(root)
    return sorted(p.parent for p in root.rglob(MANIFEST_NAME) if p.is_file())


def find_interrupted(root: str | Path) -> list[Path]:
    """Aside-folders an interrupted publish left behind (see bakery.formats.publish)."""
    return sorted(p for p in Path(root).rglob("*" + ASIDE_SUFFIX) if p.is_dir())
