"""The `bakery view` server without a browser: bound to 127.0.0.1, it serves the files a
bundle's manifest lists and nothing else (no path outside a bundle, no link)."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from urllib.parse import urlparse

import pytest


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""


def _get_as_host(url: str, host: str) -> int:
    """The status of a request naming another Host, as a page of another site would send
    after pointing its name at 127.0.0.1."""
    u = urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.putrequest("GET", u.path, skip_host=True)
    c.putheader("Host", f"{host}:{u.port}")
    c.endheaders()
    return c.getresponse().status


def test_serves_listed_bundle_files_only(tiny_out, tmp_path):
    from bakery.view.server import ViewServer

    extra, link = tiny_out / "texture" / "rust" / "extra.txt", tiny_out / "texture" / "rust" / "link.png"
    planted = tiny_out / "texture" / "planted"   # a bundle whose manifest is a link to another's
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    extra.write_text("not in the manifest")
    try:
        link.symlink_to(outside)
        planted.mkdir()
        (planted / "manifest.json").symlink_to(tiny_out / "texture" / "rust" / "manifest.json")
    except OSError:
        pytest.skip("no symlinks here")
    try:
        _check(ViewServer, tiny_out)
    finally:   # the out/ folder is shared by the session's other tests
        extra.unlink()
        link.unlink()
        (planted / "manifest.json").unlink()
        planted.rmdir()


def _check(ViewServer, tiny_out):
    with ViewServer(tiny_out) as server:
        assert server.url.startswith("http://127.0.0.1:")
        status, body = _get(server.url + "api/bundles.json")
        doc = json.loads(body)
        ids = {b["id"] for b in doc["bundles"]}
        assert status == 200 and "texture/rust" in ids and "compress/bricks" in ids and "texture/planted" not in ids
        assert any("planted/manifest.json: a link" in p for p in doc["problems"])
        # metrics under the names and explanations the report gives them
        ntc = next(b for b in doc["bundles"] if b["id"] == "compress/bricks")
        assert ntc["metric_names"]["margin_db"][0] == "vs BCn at equal bytes (dB)"
        assert ntc["metric_names"]["psnr_db.albedo"] == ["PSNR albedo (dB)", "PSNR of the decoded albedo texture against its source"]
        assert _get(server.url + "bundle/texture/planted/preview.png")[0] == 404
        assert _get_as_host(server.url + "api/bundles.json", "rebound.example.com") == 403
        assert _get(server.url + "bundle/texture/rust/preview.png")[0] == 200
        for bad in ("bundle/texture/rust/extra.txt", "bundle/texture/rust/link.png", "bundle/texture/rust/../rust/x",
                    "bundle/texture/../../secret.txt", "static/../server.py", "three/../../package.json",
                    "bundle/nothing/preview.png"):
            assert _get(server.url + bad)[0] in (403, 404), bad
        preview = tiny_out / "texture" / "rust" / "preview.png"
        kept = preview.read_bytes()
        preview.write_bytes(kept + b"re-baked")   # bytes that are no longer the manifest's
        try:
            assert _get(server.url + "bundle/texture/rust/preview.png")[0] == 409
        finally:
            preview.write_bytes(kept)
        status, body = _get(server.url + "level/mips/bricks/albedo.dds")
        n = int.from_bytes(body[:4], "little")
        head = json.loads(body[4:4 + n])
        assert status == 200 and head["format"] == "bc7_srgb" and len(body) == 4 + n + sum(map(sum, head["level_bytes"]))


def test_snapshot_writes_only_into_its_own_folder(tmp_path):
    """--snapshot DIR: a new, empty or earlier snapshot's folder only; it replaces only the
    files its index lists and never writes through a link."""
    from bakery.errors import UsageError
    from bakery.view.snapshot import INDEX_NAME, SnapshotDir

    dest = tmp_path / "snap"
    SnapshotDir(dest).write("ntc/bricks/albedo.png", b"one")
    again = SnapshotDir(dest)   # a second snapshot replaces what the first wrote
    again.write("ntc/bricks/albedo.png", b"two")
    assert (dest / "ntc" / "bricks" / "albedo.png").read_bytes() == b"two"
    assert json.loads((dest / INDEX_NAME).read_text())["files"] == ["ntc/bricks/albedo.png"]

    mine = dest / "ntc" / "bricks" / "notes.txt"
    mine.write_text("a person's notes")
    with pytest.raises(UsageError, match="notes.txt.*not written by a bakery snapshot"):
        SnapshotDir(dest).write("ntc/bricks/notes.txt", b"x")
    assert mine.read_text() == "a person's notes"

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "README.md").write_text("keep")
    with pytest.raises(UsageError, match="not a bakery snapshot"):
        SnapshotDir(docs)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    try:
        (dest / "planted").symlink_to(elsewhere, target_is_directory=True)
        (tmp_path / "linked").symlink_to(dest, target_is_directory=True)
    except OSError:
        pytest.skip("no symlinks here")
    with pytest.raises(UsageError, match="planted.*link"):
        SnapshotDir(dest).write("planted/bricks/view.png", b"x")
    with pytest.raises(UsageError, match="link"):
        SnapshotDir(tmp_path / "linked")
    assert not any(elsewhere.iterdir())


def test_view_of_a_missing_folder_is_one_line_and_exit_2(tmp_path):
    from click.testing import CliRunner

    from bakery.cli import main

    r = CliRunner().invoke(main, ["view", str(tmp_path / "nothing")])
    assert r.exit_code == 2, r.output
    assert "nothing: no such folder" in r.output and len(r.output.strip().splitlines()) == 1


def test_the_snapshot_record_in_out_replaces_only_its_own_file(tmp_path):
    """OUT/view-snapshot.json (where the report finds the last snapshot) is written only
    where absent or bakery's; a person's file or a link of that name stays as it is."""
    from bakery.view.snapshot import RECORD_NAME, browser_snapshot, record_snapshot

    out, shots = tmp_path / "out", tmp_path / "shots"
    (out / "ntc" / "bricks").mkdir(parents=True)
    (out / "ntc" / "bricks" / "manifest.json").write_text("{}")
    assert record_snapshot(out, shots) == out / RECORD_NAME
    assert json.loads((out / RECORD_NAME).read_text()) == {"snapshot": "../shots"}
    assert browser_snapshot(out, out / "ntc" / "bricks") is None   # nothing snapshot there yet

    (out / RECORD_NAME).write_text("a person's notes")
    assert record_snapshot(out, shots) is None
    assert (out / RECORD_NAME).read_text() == "a person's notes"
    (out / RECORD_NAME).unlink()
    (out / RECORD_NAME).symlink_to(tmp_path / "elsewhere.json")
    assert record_snapshot(out, shots) is None and not (tmp_path / "elsewhere.json").exists()


def test_view_snapshot_records_its_folder_for_the_report(tmp_path, monkeypatch):
    """`bakery view OUT --snapshot DIR` writes OUT/view-snapshot.json naming DIR (the
    browser itself is tested in tests/test_view.py); a foreign file of that name stays."""
    from click.testing import CliRunner

    import bakery.view.snapshot as snapshot
    from bakery.cli import main
    from bakery.view.server import node_modules

    if node_modules() is None:
        pytest.skip("three.js is not installed (npm ci)")
    monkeypatch.setattr(snapshot, "write_snapshot", lambda url, bundles, dest: [])
    out = tmp_path / "out"
    out.mkdir()
    r = CliRunner().invoke(main, ["view", str(out), "--snapshot", str(tmp_path / "shots")])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "view-snapshot.json").read_text()) == {"snapshot": "../shots"}
    (out / "view-snapshot.json").write_text("mine")
    r = CliRunner().invoke(main, ["view", str(out), "--snapshot", str(tmp_path / "shots")])
    assert r.exit_code == 0 and "was not written by bakery" in r.output
    assert (out / "view-snapshot.json").read_text() == "mine"
