"""`bakery view` in a real browser: headless Chromium (WebGL2 through SwiftShader) draws
tiny bundles of every kind with three.js; what its generated WebGL2 decoders compute is
read back and compared with the CPU references. One browser and one page for the module;
the tests skip only where Chromium is absent (CI installs it)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest
from click.testing import CliRunner

from bakery.view.snapshot import chromium_path

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="needs Chromium (Debian: apt-get install chromium)")


@pytest.fixture(scope="module")
def out(tiny_out):
    return tiny_out


@pytest.fixture(scope="module")
def viewer(out):
    """(page, console messages, requested URLs, the server's app) over ``out``."""
    from playwright.sync_api import sync_playwright

    from bakery.view.server import ViewServer, node_modules
    from bakery.view.snapshot import launch, open_page

    assert node_modules() is not None, "three.js is not installed: run `npm ci` (scripts/setup.sh does)"
    with ViewServer(out) as server, sync_playwright() as p:
        browser = launch(p)
        page, console, requests = open_page(browser, server.url)
        yield page, console, requests, server.app
        browser.close()


def _psnr(a, b) -> float:
    from bakery.imaging import psnr
    return psnr(np.asarray(a, np.float64), np.asarray(b, np.float64))


def test_page_lists_every_bundle_with_no_console_error_and_no_request_off_the_machine(viewer, out):
    page, console, requests, app = viewer
    ids = {b.id for b in app.bundles}
    assert ids == {"compress/bricks", "compress_bc/bricks", "neural_material/bricks", "mips/bricks", "texture/rust"}
    assert page.evaluate("() => window.bakeryView.state.errors") == []
    assert [m for m in console if m[0] in ("error", "warning", "pageerror")] == []
    shown = page.eval_on_selector_all("section.bundle", "s => s.map(e => e.dataset.bundle)")
    assert set(shown) == ids
    for section in shown:   # every bundle drew something (a canvas or an image of its kind)
        assert page.locator(f"section[data-bundle='{section}'] canvas, section[data-bundle='{section}'] img").count()
    against = page.eval_on_selector_all("section[data-bundle='compress/bricks'] select", "s => s.map(e => "
                                        "[...e.options].map(o => o.value))")
    assert ["source", "baseline", "preview"] in against   # the split's right side: source, BCn, preview
    hosts = {urlparse(u).hostname for u in requests}
    assert hosts == {"127.0.0.1"}, hosts
    assert any(u.endswith("/three/three.module.js") for u in requests)


@pytest.mark.parametrize("stage", ["compress", "compress_bc"])
def test_ntc_browser_decode_equals_decompress_on_every_texture_and_mip(viewer, out, tmp_path, stage):
    """The WebGL2 decoder, per texel in the fragment shader, reading latents.bin as an
    integer texture (packed) or latents.dds as BC4 blocks filtered by the GPU (bc), against
    `bakery decompress` (the numpy reference): >= 45 dB on every role at every mip."""
    from bakery.cli import main
    from bakery.formats.images import load_image
    from bakery.view.snapshot import ntc_decode

    page = viewer[0]
    bundle = out / stage / "bricks"
    r = CliRunner().invoke(main, ["decompress", str(bundle), "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    ntc = json.loads((bundle / "manifest.json").read_text())["ntc"]
    mips = len(ntc["latents"]["color_mips"])
    assert mips == 7   # 64 x 32: every level down to 1 x 1
    for role, (_, n) in ntc["material"]["channels"].items():
        for mip in range(mips):
            want = load_image(tmp_path / (f"{role}.png" if mip == 0 else f"{role}_mip{mip}.png"))
            got = ntc_decode(page, f"{stage}/bricks", role, mip, n)
            assert got.shape == want.shape, (role, mip)
            assert _psnr(got, want) >= 45.0, (role, mip, _psnr(got, want))


def test_neural_material_browser_equals_the_numpy_forward(viewer, out):
    """The bundle's material_eval.webgl.glsl over its latents (mip 0) under the manifest's
    held-out directions, against the numpy forward of the same decoder: >= 40 dB."""
    from bakery.formats.reader import read_bundle
    from bakery.stages.neural_material.objective import OUTPUT_GAIN, display_value, encode_directions
    from bakery.view.snapshot import pixels

    page = viewer[0]
    b = read_bundle(out / "neural_material" / "bricks")
    nm = b.manifest["neural_material"]
    tex = b.textures["latents.dds"]
    h, w = tex.level_shape(0)
    stored = np.concatenate([tex.array(0, layer) for layer in range(tex.layer_count)], axis=-1) / 255.0
    z = (np.asarray(nm["latents"]["bias"]) + np.asarray(nm["latents"]["scale"]) * stored).reshape(-1, nm["latents"]["channels"])
    for wi, wo in nm["evaluation"]["directions"]:
        wi, wo = np.asarray(wi) / np.linalg.norm(wi), np.asarray(wo) / np.linalg.norm(wo)
        x = np.concatenate([z, encode_directions(np.broadcast_to(wi, (len(z), 3)), np.broadcast_to(wo, (len(z), 3)),
                                                 z, nm["directions"])], axis=-1)
        f = np.maximum(np.exp(b.decode(x)) - 1.0, 0.0) / OUTPUT_GAIN
        want = display_value(f).reshape(h, w, 3)
        call = f"window.bakeryView.renderMaterial('neural_material/bricks', {json.dumps(wi.tolist())}, {json.dumps(wo.tolist())})"
        got = pixels(page, call)
        score = _psnr(got[..., :3] / 255.0, np.clip(want, 0, 1))
        assert score >= 40.0, (wi, wo, score)


def test_each_mip_level_shown_is_the_dds_level(viewer, out):
    """The viewer uploads every authored level of the mipmap bundle's DDS files (it never
    regenerates mips); level L drawn from the uploaded chain equals level L of the file."""
    from bakery.baselines import bcn
    from bakery.formats.dds import read_dds
    from bakery.view.snapshot import pixels

    page = viewer[0]
    for name in ("albedo.dds", "normal.dds", "roughness.dds"):
        tex = read_dds((out / "mips" / "bricks" / name).read_bytes())
        codec = tex.format.name.split("_")[0]
        assert tex.level_count >= 3   # 64 x 32 down to the 4 x 4 block-compressed level
        for level in range(tex.level_count):
            h, w = tex.level_shape(level)
            want = bcn.decode(tex.levels[level][0], codec, w, h)
            want = np.round(want * 255)
            got = pixels(page, f"window.bakeryView.mipLevel('mips/bricks', '{name}', {level})")
            got = got[..., :want.shape[-1]].astype(np.float64)
            if want.shape[-1] == 1:
                got = got[..., :1]
            assert got.shape == want.shape and np.abs(got - want).max() <= 1, (name, level)


def test_the_toksvig_level_shown_is_the_shipped_level(viewer, out):
    """The mipmap view sets the trained chain against the Toksvig chain the bundle ships
    (toksvig_<map>.dds, the stage's baseline) as well as box: chosen in the page, each
    Toksvig level drawn equals that level of the file, and its roughness is not box's."""
    import base64

    from bakery.baselines import bcn
    from bakery.formats.dds import read_dds
    from bakery.view.snapshot import pixels

    page = viewer[0]
    for name in ("normal.dds", "roughness.dds"):
        tex = read_dds((out / "mips" / "bricks" / f"toksvig_{name}").read_bytes())
        codec = tex.format.name.split("_")[0]
        wrap = f"section[data-bundle='mips/bricks'] div[data-texture='{name}']"
        page.select_option(f"{wrap} label:nth-of-type(2) select", "toksvig")
        differs = False
        for level in range(tex.level_count):
            page.select_option(f"{wrap} label:nth-of-type(1) select", str(level))
            page.wait_for_function(f"() => document.querySelector(\"{wrap}\").dataset.drawn === 'toksvig:{level}'")
            shown = page.evaluate("""(sel) => { const c = document.querySelector(sel);
                const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                return {w: c.width, h: c.height, data: window.bakeryView.b64(new Uint8Array(d.buffer))}; }""",
                                  f"{wrap} canvas[data-chain='toksvig']")
            got = np.frombuffer(base64.b64decode(shown["data"]), np.uint8).reshape(shown["h"], shown["w"], 4)
            h, w = tex.level_shape(level)
            want = np.round(bcn.decode(tex.levels[level][0], codec, w, h) * 255)
            got = got[..., :want.shape[-1]].astype(np.float64)
            assert got.shape == want.shape and np.abs(got - want).max() <= 1, (name, level)
            box = pixels(page, f"window.bakeryView.mipBaseline('mips/bricks', '{name}', 'box', {level})")
            differs |= np.abs(box[..., :want.shape[-1]].astype(np.float64) - got).max() > 2
        assert differs or name == "normal.dds", name   # Toksvig widens roughness where normals spread
        page.select_option(f"{wrap} label:nth-of-type(2) select", "box")


def test_two_bundles_webgl_decoders_link_into_one_program(viewer, out):
    """Two ntc decoders (the baked bundle's and one generated for another asset and
    rate, with its own symbol prefix), the neural texture's and the neural material's, in
    one WebGL2 program: they compile and link, each callable from one main."""
    from bakery.formats.bundle import symbol_prefix
    from bakery.stages.ntc.rate import choose
    from bakery.stages.ntc.shader import generate_ntc_decoder

    page = viewer[0]
    mani = {k: json.loads((out / k / "manifest.json").read_text()) for k in ("compress/bricks", "texture/rust",
                                                                              "neural_material/bricks")}
    a = mani["compress/bricks"]["ntc"]["files"]["symbol_prefix"]
    b = symbol_prefix("ntc", "bricks", {"bpp": 4.0})
    point = choose(64, 64, 3, 4.0, hidden=16, layers=1, bits=2, pe_octaves=2)
    second = generate_ntc_decoder(point.grid, point.network, "webgl", prefix=b)
    t = mani["texture/rust"]["networks"]["decoder"]["shader_prefix"]
    m = mani["neural_material/bricks"]["networks"]["decoder"]["shader_prefix"] + "_material"
    sources = [(out / "compress/bricks/ntc_decode.webgl.glsl").read_text(), second,
               (out / "texture/rust/decoder.webgl.glsl").read_text(),
               (out / "neural_material/bricks/material_eval.webgl.glsl").read_text()]
    main = f"""
out vec4 color;
void main() {{
    float o1[{a.upper()}_MLP_N_OUTPUTS]; {a}_decode_texel(0u, 1u, 2u, o1); {a}_finish(o1);
    float o2[{b.upper()}_MLP_N_OUTPUTS]; {b}_decode_texel(1u, 1u, 2u, o2); {b}_finish(o2);
    float x[{t.upper()}_N_INPUTS]; x[0] = 0.5; x[1] = 0.5;
    float y[{t.upper()}_N_OUTPUTS]; {t}_decode(x, y);
    vec3 f = {m}_eval(vec2(0.5), 0.0, vec3(0.0, 0.0, 1.0), vec3(0.0, 0.6, 0.8));
    color = vec4(o1[0], o2[0], y[0], f.x);
}}
"""
    fragment = ("#version 300 es\nprecision highp float;\nprecision highp int;\nprecision highp usampler2D;\n"
                "precision highp sampler2DArray;\n" + "\n".join(sources) + main)
    log = page.evaluate("""(src) => {
        const gl = document.createElement('canvas').getContext('webgl2');
        const compile = (type, text) => { const s = gl.createShader(type); gl.shaderSource(s, text); gl.compileShader(s);
            return [s, gl.getShaderParameter(s, gl.COMPILE_STATUS) ? '' : gl.getShaderInfoLog(s)]; };
        const [vs] = compile(gl.VERTEX_SHADER, '#version 300 es\\nvoid main() { gl_Position = vec4(0.0); }');
        const [fs, error] = compile(gl.FRAGMENT_SHADER, src);
        if (error) return 'compile: ' + error;
        const p = gl.createProgram(); gl.attachShader(p, vs); gl.attachShader(p, fs); gl.linkProgram(p);
        return gl.getProgramParameter(p, gl.LINK_STATUS) ? 'linked' : 'link: ' + gl.getProgramInfoLog(p);
    }""", fragment)
    assert log == "linked"
    assert len({a, b, t, m}) == 4


def test_snapshot_writes_what_the_browser_computed(viewer, out, tmp_path):
    """The snapshot path: ntc roles at every mip as the WebGL decoder gives them (named as
    `bakery decompress` names its files), every bundle's section and the whole page."""
    from bakery.formats.images import load_image
    from bakery.view.snapshot import save_snapshot

    page, console, _, app = viewer
    written = save_snapshot(page, console, app.bundles, tmp_path)
    folder = tmp_path / "compress" / "bricks"
    for role in ("albedo", "normal", "roughness"):
        assert (folder / f"{role}.png").is_file() and (folder / f"{role}_mip6.png").is_file()
    assert load_image(folder / "albedo_mip1.png").shape == (16, 32, 3)
    for b in app.bundles:
        assert (tmp_path / b.id / "view.png").stat().st_size > 1000
    assert (tmp_path / "viewer.png") in written


def test_the_report_shows_what_the_browser_computed(viewer, out, tmp_path):
    """After `bakery view OUT --snapshot DIR`, out/report.html shows each bundle's snapshot
    PNGs (linked full size, the files exist); a bundle changed since, or a snapshot file that
    is a link, is not shown as the browser's."""
    import shutil

    from bakery.pipeline.html_report import task_anchor, write_html_report
    from bakery.pipeline.report import BakeReport, TaskOutcome
    from bakery.view.snapshot import record_snapshot, save_snapshot

    page, console, _, app = viewer
    mine, shots = tmp_path / "out", tmp_path / "shots"
    shutil.copytree(out, mine)
    save_snapshot(page, console, app.bundles, shots)
    assert record_snapshot(mine, shots) == mine / "view-snapshot.json"
    (mine / "texture" / "rust" / "manifest.json").write_bytes((out / "texture" / "rust" / "manifest.json").read_bytes() + b"\n")
    (shots / "mips" / "bricks" / "view.png").unlink()
    (shots / "mips" / "bricks" / "view.png").symlink_to(shots / "viewer.png")
    tasks = [TaskOutcome(*b.id.split("/"), "built", key=f"key-{i}", stage_type=b.manifest["stage"]["type"])
             for i, b in enumerate(app.bundles)]
    def page() -> str:
        return write_html_report(BakeReport("pipeline.toml", "out", tasks=tasks), {b.id: mine / b.id for b in app.bundles},
                                 mine / "report.html", memo=tmp_path / "memo").read_text()

    first = page()   # drawn, then from the memo: sections by key, snapshot figures by their bytes
    assert page() == first
    memos = [p.name for p in (tmp_path / "memo").iterdir()]
    assert len([n for n in memos if not n.startswith("snapshot-")]) == len(tasks)
    assert any(n.startswith("snapshot-") for n in memos)
    # a snapshot taken again (same names, other pixels) shows the new pixels, not the memo's
    view = shots / "neural_material" / "bricks" / "view.png"
    view.write_bytes((shots / "compress" / "bricks" / "albedo.png").read_bytes())
    page_html = page()
    assert page_html != first
    sections = {t.stage: page_html.split(f"id='{task_anchor(t)}'")[1].split("</section>")[0] for t in tasks}
    for stage in ("compress", "compress_bc", "neural_material"):
        for name in ["view.png"] + (["albedo.png", "normal.png", "roughness.png"] if "compress" in stage else []):
            assert f"data-full='../shots/{stage}/bricks/{name}'" in sections[stage], (stage, name)
            assert (shots / stage / "bricks" / name).is_file()
        assert "albedo_mip1.png" not in sections[stage]   # the other mips stay in the folder
    assert "../shots/mips" not in sections["mips"]   # a link is never read
    assert "../shots/texture" not in sections["texture"] and "of an earlier bundle" in sections["texture"]


def test_neural_texture_decoded_in_the_browser_equals_the_bundle_decoder(viewer, out):
    """decoder.webgl.glsl over every texel's UV against the numpy forward of weights.bin."""
    from bakery.formats.reader import read_bundle
    from bakery.view.snapshot import pixels

    b = read_bundle(out / "texture" / "rust")
    src = b.manifest["source"]
    w, h, c = src["width"], src["height"], src["channels"]
    y, x = np.mgrid[0:h, 0:w]
    uv = np.stack([(x.ravel() + 0.5) / w, (y.ravel() + 0.5) / h], -1)
    want = np.clip(b.decode(uv), 0, 1).reshape(h, w, c)
    got = pixels(viewer[0], "window.bakeryView.decodeTexture('texture/rust')")[..., :c] / 255.0
    assert _psnr(got, want) >= 45.0
