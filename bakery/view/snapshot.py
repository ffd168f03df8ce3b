"""``bakery view OUT --snapshot DIR``: the page rendered in headless Chromium, and what the
browser computed written as PNGs.

ntc: ``DIR/<stage>/<asset>/<role>.png`` decoded by the bundle's WebGL decoder at mip 0 and
``<role>_mip<L>.png`` for the other mips (the layout of ``bakery decompress``, so the two
compare file by file); every other bundle: its section of the page as
``DIR/<stage>/<asset>/view.png``; the whole page as ``DIR/viewer.png``.

Chromium is the system's (Debian ``chromium``, WebGL2 through SwiftShader on a machine
without a GPU), driven by Playwright; Playwright's own browser download is never used.
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import numpy as np

#: Chromium flags for WebGL2 without a GPU (SwiftShader through ANGLE).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader"]


def chromium_path() -> str | None:
    """The system Chromium (``BAKERY_CHROMIUM`` overrides), or None."""
    for name in (os.environ.get("BAKERY_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and (path := shutil.which(name)):
            return path
    return None


def launch(playwright):
    path = chromium_path()
    if path is None:
        raise RuntimeError("no Chromium found (Debian: apt-get install chromium)")
    return playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)


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
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch(p)
        try:
            page, console, _ = open_page(browser, url)
            return save_snapshot(page, console, bundles, dest)
        finally:
            browser.close()


def save_snapshot(page, console, bundles, dest: Path) -> list[Path]:
    """Writes what the open page computed under ``dest``; refuses a page that reported
    errors (``console``: its messages so far)."""
    from bakery.formats.images import encode_png

    errors = [text for kind, text in console if kind in ("error", "pageerror")]
    errors += page.evaluate("() => window.bakeryView.state.errors")
    if errors:
        raise RuntimeError("the page reported errors: " + "; ".join(errors[:3]))
    written = []

    def save(path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
        written.append(path)

    for b in bundles:
        folder = dest / b.id
        if b.manifest["stage"]["type"] == "ntc":
            ntc = b.manifest["ntc"]
            for role, (_, n) in ntc["material"]["channels"].items():
                for mip in range(len(ntc["latents"]["color_mips"])):
                    img = ntc_decode(page, b.id, role, mip, n)
                    save(folder / (f"{role}.png" if mip == 0 else f"{role}_mip{mip}.png"), encode_png(img))
        save(folder / "view.png", page.locator(f"section[data-bundle='{b.id}']").screenshot())
    save(dest / "viewer.png", page.screenshot(full_page=True))
    return written
