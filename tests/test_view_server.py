"""The `bakery view` server without a browser: bound to 127.0.0.1, it serves the files a
bundle's manifest lists and nothing else (no path outside a bundle, no link)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""


def test_serves_listed_bundle_files_only(tiny_out, tmp_path):
    from bakery.view.server import ViewServer

    extra, link = tiny_out / "texture" / "rust" / "extra.txt", tiny_out / "texture" / "rust" / "link.png"
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    extra.write_text("not in the manifest")
    try:
        link.symlink_to(outside)
    except OSError:
        pytest.skip("no symlinks here")
    try:
        _check(ViewServer, tiny_out)
    finally:   # the out/ folder is shared by the session's other tests
        extra.unlink()
        link.unlink()


def _check(ViewServer, tiny_out):
    with ViewServer(tiny_out) as server:
        assert server.url.startswith("http://127.0.0.1:")
        status, body = _get(server.url + "api/bundles.json")
        ids = {b["id"] for b in json.loads(body)["bundles"]}
        assert status == 200 and "texture/rust" in ids and "compress/bricks" in ids
        assert _get(server.url + "bundle/texture/rust/preview.png")[0] == 200
        for bad in ("bundle/texture/rust/extra.txt", "bundle/texture/rust/link.png", "bundle/texture/rust/../rust/x",
                    "bundle/texture/../../secret.txt", "static/../server.py", "three/../../package.json",
                    "bundle/nothing/preview.png"):
            assert _get(server.url + bad)[0] in (403, 404), bad
        status, body = _get(server.url + "level/mips/bricks/albedo.dds")
        n = int.from_bytes(body[:4], "little")
        head = json.loads(body[4:4 + n])
        assert status == 200 and head["format"] == "bc7_srgb" and len(body) == 4 + n + sum(map(sum, head["level_bytes"]))
