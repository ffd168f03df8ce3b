"""The one writer every stage uses for its output folder, and its atomic publish.

A bundle is a folder: ``manifest.json`` plus the files the stage wrote through
:class:`BundleWriter`. The manifest lists every file with its size and sha256 and, for
each named network (``decoder``, ``encoder``, ...), its architecture and the layout of
its own weights file, so an engine importer can check
everything before using it. Output is deterministic: same inputs, same bytes (no
timestamps, sorted keys, files listed by name).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Sequence

import numpy as np

import bakery
from bakery import phases
from bakery.formats import canonical_json, weights as weights_format
from bakery.formats.publish import atomic_publish  # noqa: F401  (re-exported: the writer's other half)
from bakery.formats.texture import Texture, make_texture
from bakery.nn.network import NetworkSpec

SCHEMA_VERSION = 2  # 2: "networks" by name (1 had one "network")
#: The network a single-network stage writes, and the one generated decoders read.
DEFAULT_NETWORK = "decoder"
MANIFEST_NAME = "manifest.json"
#: Keys the writer owns; stage fields may not override them.
RESERVED_KEYS = ("schema_version", "bakery_version", "files", "networks", "textures")
#: Keys every manifest has (the reader refuses a manifest without them).
REQUIRED_KEYS = ("schema_version", "bakery_version", "stage", "params", "seed", "device", "metrics", "files")

_NETWORK_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)?$")
TEXTURE_CONTAINERS = (".dds", ".ktx2")


def check_file_name(name: str) -> str:
    """Bundle file names: relative, at most one sub-folder, portable characters only."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name or name == MANIFEST_NAME:
        raise ValueError(f"bad bundle file name {name!r} (use letters, digits, '._-', at most one '/')")
    return name


class BundleWriter:
    """Writes a bundle's files into ``staging_dir`` and records them for the manifest."""

    def __init__(self, staging_dir: Path, *, symbol_prefix: str = "bakery"):
        #: Prefix of every global name in the generated decoder shaders (see
        #: :func:`symbol_prefix`), so two bundles' decoders can live in one shader.
        self.symbol_prefix = symbol_prefix
        self.dir = Path(staging_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, dict] = {}
        self._networks: dict[str, dict] = {}
        self._textures: dict[str, dict] = {}
        self._finalized = False

    # -- plain files -------------------------------------------------------------------
    def write_bytes(self, name: str, data: bytes, *, role: str = "data") -> Path:
        if self._finalized:
            raise RuntimeError("bundle already finalized")
        check_file_name(name)
        if name in self._files:
            raise ValueError(f"bundle file {name!r} written twice")
        data = bytes(data)
        path = self.dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with phases.time("writing"):
            try:
                path.write_bytes(data)
            except OSError as e:
                from bakery.formats.publish import name_path

                raise name_path(e, path) from None
            digest = hashlib.sha256(data).hexdigest()
        self._files[name] = {"name": name, "role": str(role), "bytes": len(data), "sha256": digest}
        return path

    def write_json(self, name: str, obj, *, role: str = "data") -> Path:
        return self.write_bytes(name, canonical_json.dumps(obj), role=role)

    def write_png(self, name: str, image: np.ndarray, *, role: str = "preview") -> Path:
        from bakery.formats.images import encode_png
        with phases.time("encoding"):
            data = encode_png(image)
        return self.write_bytes(name, data, role=role)

    # -- networks ----------------------------------------------------------------------
    def write_weights(self, name: str, spec: NetworkSpec, params: np.ndarray, *, dtype: str = "float16",
                      network: str = DEFAULT_NETWORK) -> Path:
        """Writes one network's weights file (see bakery.formats.weights) and records it in
        the manifest's ``networks`` under ``network``; a bundle may hold several
        (``encoder``, ``decoder``), each in its own file."""
        if network in self._networks:
            raise ValueError(f"network {network!r} written twice")
        if not _NETWORK_NAME.match(network):
            raise ValueError(f"bad network name {network!r} (letters, digits, '_')")
        with phases.time("encoding"):
            data = weights_format.encode_weights(spec, params, dtype)
        path = self.write_bytes(name, data, role="weights")
        self._networks[network] = network_record(name, spec, dtype)
        return path

    def write_decoder_artifacts(self, spec: NetworkSpec, *, onnx: bool = True,
                                shaders: Sequence[str] = ("slang", "hlsl", "glsl", "webgl"),
                                params: np.ndarray | None = None, prefix: str = "decoder",
                                network: str = DEFAULT_NETWORK, onnx_opset: int | None = None) -> list[Path]:
        """Generated decoder shaders (``decoder.slang``/``.hlsl``/``.glsl``, the GLSL one an
        include with a compilable compute wrapper ``decoder.comp``; ``decoder.webgl.glsl``,
        GLSL ES 3.00 for a WebGL2 fragment shader) and ``decoder.onnx``
        (``onnx_opset``, default :data:`bakery.formats.onnx_export.OPSET`) for ``network``,
        written before by :meth:`write_weights`. Shader symbols start with the bundle's
        :attr:`symbol_prefix`. ONNX needs ``params`` and the onnx package."""
        record = self._networks.get(network)
        if record is None:
            raise ValueError(f"write_weights for {network!r} first: the decoders bake in its layout")
        from bakery.formats import shadergen
        symbols = self.symbol_prefix if network == DEFAULT_NETWORK else f"{self.symbol_prefix}_{network}"
        record["shader_prefix"] = symbols
        written = []
        for lang in shaders:
            text = shadergen.generate(spec, lang, dtype=record["dtype"], prefix=symbols)
            written.append(self.write_bytes(f"{prefix}.{shadergen.EXTENSIONS[lang]}", text.encode(), role="shader"))
            if lang == "glsl":
                wrapper = shadergen.glsl_compute_wrapper(spec, f"{prefix}.glsl", prefix=symbols)
                written.append(self.write_bytes(f"{prefix}.comp", wrapper.encode(), role="shader"))
        if onnx:
            if params is None:
                raise ValueError("ONNX export needs the params")
            from bakery.formats.onnx_export import OPSET, export_onnx_bytes
            quant = _as_stored(params, record["dtype"])
            data = export_onnx_bytes(spec, quant, opset=onnx_opset or OPSET)
            written.append(self.write_bytes(f"{prefix}.onnx", data, role="onnx"))
            record["onnx_opset"] = onnx_opset or OPSET
        return written

    # -- textures ----------------------------------------------------------------------
    def write_texture(self, name: str, format: str | None = None, mips: Sequence | None = None, *,
                      texture: Texture | None = None, width: int | None = None, height: int | None = None,
                      array: bool | None = None, role: str = "texture", supercompression: str = "none") -> Path:
        """Writes a DDS (``.dds``) or KTX2 (``.ktx2``) texture, chosen by the name's extension.

        Either pass a :class:`Texture` or ``format`` + ``mips`` as for
        :func:`bakery.formats.texture.make_texture` (uncompressed: arrays [H, W, C] or
        [layers, H, W, C] per mip, floats in [0, 1] quantised for UNORM; BCn: bytes per
        mip, or a list of bytes per layer, with ``width``/``height``). ``supercompression``
        (``"none"`` or ``"zstd"``) applies to ``.ktx2`` only; DDS has no supercompression.
        """
        from bakery.formats.dds import write_dds
        from bakery.formats.ktx2 import write_ktx2
        suffix = Path(name).suffix.lower()
        if suffix not in TEXTURE_CONTAINERS:
            raise ValueError(f"texture {name!r} must end in .dds or .ktx2")
        if suffix == ".dds" and supercompression != "none":
            raise ValueError(f"texture {name!r}: DDS has no supercompression ({supercompression!r} needs .ktx2)")
        with phases.time("encoding"):
            if texture is None:
                if format is None or mips is None:
                    raise ValueError("write_texture needs texture= or format and mips")
                texture = make_texture(format, mips, width=width, height=height, array=array)
            data = write_dds(texture) if suffix == ".dds" else write_ktx2(texture, supercompression=supercompression)
        path = self.write_bytes(name, data, role=role)
        self._textures[name] = texture_record(texture)
        return path

    # -- manifest ----------------------------------------------------------------------
    def finalize(self, fields: dict) -> dict:
        """Writes ``manifest.json`` and returns it as a dict (already normalised to JSON types)."""
        if self._finalized:
            raise RuntimeError("bundle already finalized")
        clash = [k for k in RESERVED_KEYS if k in fields]
        if clash:
            raise ValueError(f"manifest fields may not set {', '.join(clash)}")
        manifest = {"schema_version": SCHEMA_VERSION, "bakery_version": bakery.__version__, **fields,
                    "files": [self._files[n] for n in sorted(self._files)]}
        if self._networks:
            manifest["networks"] = dict(sorted(self._networks.items()))
        if self._textures:
            manifest["textures"] = dict(sorted(self._textures.items()))
        missing = [k for k in REQUIRED_KEYS if k not in manifest]
        if missing:
            raise ValueError(f"manifest fields lack {', '.join(missing)}")
        data = canonical_json.dumps(manifest)
        with phases.time("writing"):
            try:
                (self.dir / MANIFEST_NAME).write_bytes(data)
            except OSError as e:
                from bakery.formats.publish import name_path

                raise name_path(e, self.dir / MANIFEST_NAME) from None
        self._finalized = True
        return canonical_json.normalize(manifest)


def symbol_prefix(stage_type: str, asset: str, params: dict | None = None) -> str:
    """``bk_ntc_bricks_3f9c2a``: a shader-identifier prefix from the stage type and asset
    name, and a short hash of both and of the resolved params, so the decoders of two
    bundles never clash in one program (the same asset baked by two stages of one type
    differs in its params; ``a_b``/``c`` and ``a``/``b_c`` differ in the hash). Characters
    other than letters and digits become one ``_`` (GLSL reserves double underscores)."""
    words = re.findall(r"[A-Za-z0-9]+", f"{stage_type} {asset}")
    ident = json.dumps([stage_type, asset, params or {}], sort_keys=True, default=str)
    return "_".join(["bk", *words, hashlib.sha256(ident.encode()).hexdigest()[:6]]).lower()


def network_record(weights_name: str, spec: NetworkSpec, dtype: str) -> dict:
    """One entry of the manifest's ``networks``: architecture, dtype and byte layout of its weights file."""
    layers, total = weights_format.layout(spec, dtype)
    d = spec.to_dict()
    d["layers"] = [{**ld, "weight_offset": l.weight_offset, "bias_offset": l.bias_offset}
                   for ld, l in zip(d["layers"], layers)]
    d.update({"file": weights_name, "dtype": dtype, "layout": "row_major_out_in", "matrix_align": weights_format.MATRIX_ALIGN,
              "bias_align": weights_format.BIAS_ALIGN, "weights_bytes": total})
    return d


def texture_record(tex: Texture) -> dict:
    return {"format": tex.format.name, "width": tex.width, "height": tex.height, "mips": tex.level_count,
            "layers": tex.layer_count, "array": tex.is_array, "dxgi_format": tex.format.dxgi, "vk_format": tex.format.vk}


def _as_stored(params: np.ndarray, dtype: str) -> np.ndarray:
    """The parameters as the weights file stores them (fp16 rounding), back in fp32."""
    return np.asarray(params, dtype=np.float32).astype(dtype).astype(np.float32)
