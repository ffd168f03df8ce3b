"""``bakery view OUT --snapshot DIR``: the page rendered in headless Chromium, and what the
browser computed written as PNGs.

ntc: ``DIR/<stage>/<asset>/<role>.png`` decoded by the bundle's WebGL decoder at mip 0 and
``<role>_mip<L>.png`` for the other mips (the layout of ``bakery decompress``, so the two
compare file by file); every other bundle: its section of the page as
``DIR/<stage>/<asset>/view.png``; the whole page as ``DIR/viewer.png``.

Chromium is the system's (Debian ``chromium``, WebGL2 through SwiftShader on a machine
without a GPU), driven by Playwright; Playwright's own browser download is never used.

DIR is often a folder a person chose (docs/, a review share): a snapshot writes only into
a new or empty DIR or one a previous snapshot wrote (``DIR/snapshot.json`` lists its
files), replaces only the files that list names, and never writes through a link.

The snapshot also records DIR in ``OUT/view-snapshot.json`` (a file bakery owns), and the
index keeps each bundle's manifest sum: the next ``out/report.html`` shows, beside each
bundle's section, what the browser computed for it, only while the bundle is the one the
browser drew, reading only regular files the index lists, never through a link.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bakery.errors import BakeryError, UsageError

#: The list of files a snapshot wrote, in DIR: what the next snapshot may replace.
INDEX_NAME = "snapshot.json"
#: In OUT: where the last snapshot of OUT was written (for out/report.html).
RECORD_NAME = "view-snapshot.json"

#: Chromium flags for WebGL2 without a GPU (SwiftShader through ANGLE).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader"]


def chromium_path() -> str | None:
    """The system Chromium (``BAKERY_CHROMIUM`` overrides), or None."""
    for name in (os.environ.get("BAKERY_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and (path := shutil.which(name)):
            return path
    return None


def require_chromium() -> str:
    """:func:`chromium_path`, or the one line that says how to install it."""
    path = chromium_path()
    if path is None:
        raise UsageError("no Chromium found (Debian: apt-get install chromium)", key="--snapshot")
    return path


def launch(playwright):
    return playwright.chromium.launch(executable_path=require_chromium(), args=CHROMIUM_ARGS)


def open_page(browser, url: str, *, timeout_s: float = 300.0):
    """A page at ``url`` once the viewer has drawn every bundle; also the console messages
    and every URL requested, for callers that check them."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    console, requests = [], []
    page.on("console", lambda m: console.append((m.type, m.text)))
    page.on("pageerror", lambda e: console.append(("pageerror", str(e))))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(url)
    page.wait_for_function("() => window.bakeryView !== undefined", timeout=timeout_s * 1000)
    page.evaluate("() => window.bakeryView.ready")
    return page, console, requests


def pixels(page, call: str) -> np.ndarray:
    """``call`` (a JS expression giving {width, height, pixels}) as [H, W, 4] uint8."""
    r = page.evaluate(f"async () => {{ const r = await {call}; "
                      "return {width: r.width, height: r.height, data: window.bakeryView.b64(r.pixels)}; }")
    return np.frombuffer(base64.b64decode(r["data"]), np.uint8).reshape(r["height"], r["width"], 4)


def ntc_decode(page, bundle_id: str, role: str, mip: int, channels: int) -> np.ndarray:
    """One role of one mip as the browser's WebGL decoder gives it, [H, W, channels] in [0, 1]."""
    rgba = pixels(page, f"window.bakeryView.decodeNtc({bundle_id!r}, {role!r}, {mip})")
    return rgba[..., :min(channels, 4)].astype(np.float32) / 255.0


def write_snapshot(url: str, bundles, dest: Path) -> list[Path]:
    """Renders the page at ``url`` in a fresh headless Chromium and writes the snapshot."""
    try:
        from playwright.sync_api import Error as BrowserError, sync_playwright
    except ImportError:
        raise UsageError("needs Playwright for Python (pip install playwright; it drives the system Chromium)",
                         key="--snapshot") from None
    SnapshotDir(dest)   # refuse a DIR that is not ours before starting a browser
    require_chromium()
    try:
        with sync_playwright() as p:
            browser = launch(p)
            try:
                page, console, _ = open_page(browser, url)
                return save_snapshot(page, console, bundles, dest)
            finally:
                browser.close()
    except BrowserError as e:   # Chromium crashed or the page never finished drawing
        raise BakeryError(f"the browser failed: {str(e).splitlines()[0]}", key="--snapshot") from None


class SnapshotDir:
    """DIR as a snapshot may write it: new, empty, or a previous snapshot's (its index
    lists the files it wrote; only those are replaced). Nothing is written through a link."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.owned: set[str] = set()
        #: bundle id -> sha256 of the manifest.json the browser drew.
        self.bundles: dict[str, str] = {}
        if self.root.is_symlink() or (self.root.exists() and not self.root.is_dir()):
            raise UsageError("is a link or not a folder; choose a new or empty folder", where=str(self.root),
                             key="--snapshot")
        doc = _json_or_bytes(self.root / INDEX_NAME)
        files = doc.get("files") if isinstance(doc, dict) else None
        if isinstance(files, list) and all(isinstance(f, str) for f in files):
            self.owned = set(files)
            self.bundles = _read_index(self.root).bundles
            return
        if self.root.is_dir() and any(self.root.iterdir()):
            raise UsageError(f"exists and is not a bakery snapshot (no {INDEX_NAME}); a snapshot replaces only its "
                             "own files: choose a new or empty folder", where=str(self.root), key="--snapshot")

    def write(self, rel: str, data: bytes) -> Path:
        """Writes ``DIR/rel`` atomically, claiming it in the index first (so a snapshot cut
        short still owns what it wrote)."""
        from bakery.formats.publish import write_atomic

        path = self._target(rel)
        if rel not in self.owned:
            self.owned.add(rel)
            self.write_index()
        write_atomic(path, data)
        return path

    def drew(self, bundle_id: str, manifest_sha256: str) -> None:
        """Records which bundle the browser drew (its manifest's sum) before its files."""
        if self.bundles.get(bundle_id) != manifest_sha256:
            self.bundles[bundle_id] = manifest_sha256
            self.write_index()

    def write_index(self) -> None:
        from bakery.formats.publish import write_atomic

        write_atomic(self._target(INDEX_NAME), json.dumps(
            {"files": sorted(self.owned), "bundles": dict(sorted(self.bundles.items()))}, indent=1).encode())

    def _target(self, rel: str) -> Path:
        path = self.root
        for part in rel.split("/")[:-1]:
            path = path / part
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                raise UsageError("is a link or not a folder; bakery does not write through it", where=str(path),
                                 key="--snapshot")
            path.mkdir(parents=True, exist_ok=True)
        path = path / rel.split("/")[-1]
        if path.is_symlink() or (path.exists() and rel != INDEX_NAME and rel not in self.owned):
            raise UsageError("exists and was not written by a bakery snapshot; refusing to replace it",
                             where=str(path), key="--snapshot")
        return path


def save_snapshot(page, console, bundles, dest: Path) -> list[Path]:
    """Writes what the open page computed under ``dest``; refuses a page that reported
    errors (``console``: its messages so far)."""
    from bakery.formats.images import encode_png

    errors = [text for kind, text in console if kind in ("error", "pageerror")]
    errors += page.evaluate("() => window.bakeryView.state.errors")
    if errors:
        raise BakeryError("the page reported errors: " + "; ".join(errors[:3]), key="--snapshot")
    target = SnapshotDir(dest)
    written = []
    for b in bundles:
        target.drew(b.id, hashlib.sha256((b.path / "manifest.json").read_bytes()).hexdigest())
        if b.manifest["stage"]["type"] == "ntc":
            ntc = b.manifest["ntc"]
            for role, (_, n) in ntc["material"]["channels"].items():
                for mip in range(len(ntc["latents"]["color_mips"])):
                    img = ntc_decode(page, b.id, role, mip, n)
                    name = f"{role}.png" if mip == 0 else f"{role}_mip{mip}.png"
                    written.append(target.write(f"{b.id}/{name}", encode_png(img)))
        written.append(target.write(f"{b.id}/view.png",
                                    page.locator(f"section[data-bundle='{b.id}']").screenshot()))
    written.append(target.write("viewer.png", page.screenshot(full_page=True)))
    return written


# -- the record in OUT, and what the report reads back ----------------------------------
def record_snapshot(out: Path, dest: Path) -> Path | None:
    """Writes ``OUT/view-snapshot.json`` naming ``dest`` (relative to OUT where it can);
    None, writing nothing, where a file of that name is not one bakery wrote."""
    from bakery.formats.publish import write_atomic

    record = Path(out) / RECORD_NAME
    if record.is_symlink() or (record.exists() and _recorded_dir(record) is None):
        return None
    try:
        where = os.path.relpath(Path(dest).resolve(), Path(out).resolve())
    except ValueError:   # another drive
        where = str(Path(dest).resolve())
    write_atomic(record, json.dumps({"snapshot": Path(where).as_posix()}, indent=1).encode())
    return record


@dataclass
class BrowserSnapshot:
    """One bundle's files in the recorded snapshot: ``images`` (regular PNG files under
    DIR/<bundle id>/), and whether the browser drew the bundle now in OUT (``current``)."""

    root: Path
    images: list[Path]
    current: bool

    def read_bytes(self, path: Path) -> bytes:
        """One of ``images``' bytes: a regular file reached through no link below DIR
        (bakery.safe_files)."""
        from bakery.safe_files import read_regular

        return read_regular(path, beneath=self.root)

    @staticmethod
    def decode(path: Path, data: bytes) -> np.ndarray:
        """Those bytes as float [H, W, C], at most MAX_SIDE a side."""
        import io

        from PIL import Image

        from bakery.formats.images import MAX_SIDE

        with Image.open(io.BytesIO(data)) as im:
            if max(im.size) > MAX_SIDE:
                raise ValueError(f"{path}: {im.width}x{im.height} is larger than bakery reads")
            return np.asarray(im.convert("RGB"), np.float32) / 255.0


@dataclass
class _Index:
    files: list[str]
    bundles: dict[str, str]


def browser_snapshot(out: Path, bundle: Path) -> BrowserSnapshot | None:
    """What the last ``bakery view OUT --snapshot DIR`` wrote for the bundle folder
    ``bundle`` under ``out``; None when OUT records no snapshot or it holds nothing for it."""
    out = Path(out)
    root = _recorded_dir(out / RECORD_NAME)
    if root is None:
        return None
    root = out / root
    if root.is_symlink() or not root.is_dir():
        return None
    try:
        bundle_id = Path(bundle).resolve().relative_to(out.resolve()).as_posix()
    except ValueError:
        return None
    index = _read_index(root)
    names = [f for f in index.files if f.endswith(".png") and f.rpartition("/")[0] == bundle_id]
    images = [root / f for f in sorted(names) if _regular_under(root, f)]
    if not images:
        return None
    manifest = _json_or_bytes(Path(bundle) / "manifest.json", parse=False)
    current = manifest is not None and index.bundles.get(bundle_id) == hashlib.sha256(manifest).hexdigest()
    return BrowserSnapshot(root, images, current)


def _json_or_bytes(path: Path, *, parse: bool = True):
    """A small regular file's JSON (or bytes), never through a link; None where it is not one."""
    from bakery.safe_files import MAX_METADATA_BYTES, read_regular

    try:
        data = read_regular(path, limit=MAX_METADATA_BYTES)
        return json.loads(data) if parse else data
    except (OSError, ValueError):
        return None


def is_snapshot_record(path: Path) -> bool:
    """``path`` is a record :func:`record_snapshot` wrote (for ``bakery clean``)."""
    doc = _json_or_bytes(path)
    return isinstance(doc, dict) and set(doc) == {"snapshot"} and _recorded_dir(path) is not None


def _recorded_dir(record: Path) -> str | None:
    doc = _json_or_bytes(record)
    where = doc.get("snapshot") if isinstance(doc, dict) else None
    return where if isinstance(where, str) and where else None


def _read_index(root: Path) -> _Index:
    doc = _json_or_bytes(root / INDEX_NAME)
    doc = doc if isinstance(doc, dict) else {}
    files, bundles = doc.get("files"), doc.get("bundles")
    files = [f for f in files if isinstance(f, str)] if isinstance(files, list) else []
    bundles = {k: v for k, v in bundles.items() if isinstance(v, str)} if isinstance(bundles, dict) else {}
    return _Index(files, bundles)


def _regular_under(root: Path, rel: str) -> bool:
    """``root/rel`` is a regular file reached through no link and no ``..``."""
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return False
    path = root
    for part in parts:
        path = path / part
        if path.is_symlink():
            return False
    return path.is_file()
