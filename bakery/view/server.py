"""``bakery view OUT``: a local web page that draws every bundle under OUT with three.js.

The server binds 127.0.0.1 on a free port and serves only: the page (bakery/view/static),
three.js from the npm install beside the package (package.json pins it; nothing is
fetched at run time), the bundle list with metrics, and the files each bundle's manifest
lists (checked against the manifest's sha256 when the bundle is read; never a path outside
that bundle, never through a link), and only to requests naming 127.0.0.1 or localhost as
their Host (a page of another site whose name it points at 127.0.0.1 gets 403). Textures (DDS/KTX2) are served decoded, level by level,
as raw RGBA8 (``/level/...``): browsers have no DDS loader, and the page uploads each level
as the engine would, without regenerating mips.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import threading
from dataclasses import dataclass
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np

from bakery.safe_files import MAX_METADATA_BYTES, read_regular

STATIC = Path(__file__).resolve().parent / "static"
#: URL prefix -> folder under node_modules: three.js, as the page's import map names it.
VENDOR = {"three": ("three", "build")}


def node_modules() -> Path | None:
    """``node_modules`` of the checkout (``npm ci`` in scripts/setup.sh), if installed."""
    root = Path(__file__).resolve().parents[2]
    folder = root / "node_modules"
    return folder if (folder / "three" / "build" / "three.module.js").is_file() else None


@dataclass
class ViewedBundle:
    id: str
    path: Path
    manifest: dict

    def summary(self) -> dict:
        m = self.manifest
        return {"id": self.id, "type": m["stage"]["type"], "stage": self.id.split("/")[0],
                "asset": "/".join(self.id.split("/")[1:]), "metrics": m.get("metrics", {}),
                "metric_names": metric_names(m["stage"]["type"], m.get("metrics", {})),
                "files": {f["name"]: f["role"] for f in m["files"]}, "manifest": m}


def metric_names(stage_type: str, metrics: dict) -> dict[str, list[str]]:
    """Each flattened metric's readable name and one-line explanation, as the report shows
    them (the stage's ``metric_docs``; a stage not registered here gets the names made
    readable)."""
    from bakery.errors import UsageError
    from bakery.reporting import describe_metric, flatten
    from bakery.stages import get_stage

    try:
        docs = get_stage(stage_type).metric_docs
    except UsageError:
        docs = {}
    return {k: list(describe_metric(k, docs)) for k in flatten(metrics)}


def find_bundles(out: Path) -> tuple[list[ViewedBundle], list[str]]:
    """Every verified bundle under ``out`` (``<stage>/<asset>/manifest.json``, any depth);
    also one line per folder that is not a readable bundle."""
    from bakery.formats.errors import BundleError
    from bakery.formats.reader import read_bundle

    bundles, problems = [], []
    for manifest in sorted(out.rglob("manifest.json")):
        folder = manifest.parent
        rel = folder.relative_to(out)
        if any(p.startswith(".") for p in rel.parts) or any(p.is_symlink() for p in [folder, *folder.parents][:len(rel.parts)]):
            continue   # staging folders and links bakery did not make
        link = _link_in(folder)
        if link is not None:   # never read through it, not even to check a sum
            problems.append(f"{link}: a link bakery did not make; bundle not shown")
            continue
        try:
            b = read_bundle(folder)
        except BundleError as e:
            problems.append(str(e))
            continue
        bundles.append(ViewedBundle(rel.as_posix(), folder, b.manifest))
    return bundles, problems


def _link_in(folder: Path) -> Path | None:
    """The bundle's manifest or first listed file (or its sub-folder) that is a link."""
    manifest = folder / "manifest.json"
    if manifest.is_symlink():
        return manifest
    try:
        names = [f["name"] for f in json.loads(read_regular(manifest, limit=MAX_METADATA_BYTES))["files"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None   # read_bundle names what is wrong with it
    for name in names:
        if isinstance(name, str) and ".." not in name.split("/"):
            for path in (folder / name, (folder / name).parent):
                if path.is_symlink():
                    return path
    return None


def texture_levels(name: str, data: bytes) -> dict:
    """A DDS/KTX2 file's bytes as raw RGBA8 levels: {width, height, layers, format, srgb,
    levels: [[bytes per layer]]}. BCn decodes through bakery.baselines.bcn."""
    from bakery.formats.dds import read_dds
    from bakery.formats.ktx2 import read_ktx2

    tex = read_dds(data) if name.lower().endswith(".dds") else read_ktx2(data)
    levels = []
    for mip, surfaces in enumerate(tex.levels):
        h, w = tex.level_shape(mip)
        layers = []
        for layer in range(len(surfaces)):
            layers.append(_rgba8(tex, mip, layer, w, h).tobytes())
        levels.append(layers)
    return {"width": tex.width, "height": tex.height, "layers": tex.layer_count, "format": tex.format.name,
            "srgb": tex.format.srgb, "levels": levels}


def _rgba8(tex, mip: int, layer: int, w: int, h: int) -> np.ndarray:
    fmt = tex.format
    if fmt.compressed:
        from bakery.baselines import bcn
        codec = fmt.name.split("_")[0]
        img = bcn.decode(tex.levels[mip][layer], codec, w, h, channels=4 if codec in ("bc1", "bc7") else None)
        img = (img * 255.0 + 0.5).astype(np.uint8)
    else:
        img = tex.array(mip, layer)
        if img.dtype != np.uint8:   # half floats: clamp to [0, 1] for display
            img = (np.clip(img.astype(np.float32), 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    out = np.zeros((h, w, 4), np.uint8)
    out[..., 3] = 255
    c = img.shape[2]
    out[..., :min(c, 4)] = img[..., :4]
    if c == 1:
        out[..., 1] = out[..., 2] = out[..., 0]
    return out


class ChangedOnDisk(Exception):
    """A listed file whose bytes are no longer those its manifest (read at start) names."""


class _Handler(BaseHTTPRequestHandler):
    server_version = "bakery-view"

    def __init__(self, *args, app: "ViewApp", **kwargs):
        self.app = app
        super().__init__(*args, **kwargs)

    def log_message(self, fmt, *args):   # the console stays quiet; the page shows errors
        pass

    def do_GET(self):
        if self.headers.get("Host") not in self.app.hosts:
            return self.send_error(403)   # another site's page reaching 127.0.0.1 (DNS rebinding)
        path = unquote(urlparse(self.path).path)
        try:
            found = self.app.resolve(path)
        except PermissionError:
            return self.send_error(403)
        except ChangedOnDisk as e:
            return self.send_error(409, str(e))
        if found is None:
            return self.send_error(404)
        body, kind = found
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)


class ViewApp:
    """What the page can ask for, by URL path."""

    def __init__(self, out: Path):
        self.out = Path(out)
        self.bundles, self.problems = find_bundles(self.out)
        self.by_id = {b.id: b for b in self.bundles}
        self.modules = node_modules()
        #: The Host headers of the page's own requests (set once the port is known).
        self.hosts: frozenset[str] = frozenset()

    def resolve(self, path: str) -> tuple[bytes, str] | None:
        if path in ("/", "/index.html"):
            return (STATIC / "index.html").read_bytes(), "text/html; charset=utf-8"
        if path == "/api/bundles.json":
            doc = {"out": self.out.name, "bundles": [b.summary() for b in self.bundles], "problems": self.problems}
            return json.dumps(doc).encode(), "application/json"
        head, _, rest = path.lstrip("/").partition("/")
        if head == "static":
            return self._file(STATIC, rest)
        if head in VENDOR:
            if self.modules is None:
                return None
            return self._file(self.modules.joinpath(*VENDOR[head]), rest)
        if head in ("bundle", "level"):
            b = next((b for b in self.bundles if rest.startswith(b.id + "/")), None)
            name = rest[len(b.id) + 1:] if b is not None else ""
            entry = next((f for f in b.manifest["files"] if f["name"] == name), None) if b is not None else None
            if entry is None:
                return None   # only what the manifest lists (names checked by read_bundle)
            try:   # never through a link, a FIFO or a folder link anywhere below the bundle
                data = read_regular(b.path / name, beneath=b.path)
            except OSError:
                raise PermissionError(name) from None
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:   # re-baked while the page is open
                raise ChangedOnDisk(f"{b.id}/{name} changed since bakery view started; restart it")
            if head == "bundle":
                return data, mimetypes.guess_type(name)[0] or "application/octet-stream"
            return _pack_levels(texture_levels(name, data)), "application/octet-stream"
        return None

    @staticmethod
    def _file(root: Path, rel: str) -> tuple[bytes, str] | None:
        if not rel or any(p in ("", ".", "..") for p in rel.split("/")):
            return None
        file = root / rel
        if file.is_symlink() or not file.is_file():
            return None
        kind = "text/javascript" if file.suffix == ".js" else mimetypes.guess_type(file.name)[0] or "text/plain"
        return file.read_bytes(), kind


def _pack_levels(doc: dict) -> bytes:
    """One response for a texture: a 4-byte length, the JSON header (sizes, format), then
    every level's layers as RGBA8, level by level."""
    levels = doc.pop("levels")
    header = json.dumps(dict(doc, level_bytes=[[len(s) for s in layers] for layers in levels])).encode()
    return len(header).to_bytes(4, "little") + header + b"".join(s for layers in levels for s in layers)


class ViewServer:
    """The page's HTTP server on 127.0.0.1 and a free port, in a background thread."""

    def __init__(self, out: Path, *, port: int = 0):
        self.app = ViewApp(out)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), partial(_Handler, app=self.app))
        self.httpd.daemon_threads = True
        port = self.httpd.server_address[1]
        self.app.hosts = frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/"

    def __enter__(self) -> "ViewServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
