"""``out/report.html``: what a bake made, for people, in one self-contained page.

Per task: the reference, decoded and difference images side by side, the convergence
curve where the bundle stores one (``loss_curve`` role), and for texture compression
(``ntc``) the rate-distortion plot against the BCn baseline from its manifest. Plots are
drawn with matplotlib; every image is embedded as a data URI (JPEG thumbnails), so
the page can be mailed or attached to a CI run as one file.
"""

from __future__ import annotations

import base64
import html
import io
import json
import logging
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from bakery.pipeline.report import BakeReport, TaskOutcome, flatten_metrics

HTML_REPORT_NAME = "report.html"
#: Longest side of an embedded image; the full-size files are in the bundle.
THUMBNAIL = 256
#: Embedded thumbnails are JPEG at this quality (plots stay PNG).
JPEG_QUALITY = 88
#: |decoded - reference| is shown times this, so small errors are visible.
DIFFERENCE_GAIN = 4.0

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.failed { color: #b00020; } .built { color: #1b5e20; } .cached { color: #555; }
section.task { border-top: 2px solid #ddd; padding-top: 0.5em; margin-top: 1.5em; }
.row { display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }
figure { margin: 0; } figcaption { font-size: 0.85em; color: #555; text-align: center; }
img.texel { image-rendering: pixelated; width: 160px; height: auto; border: 1px solid #ccc; }
img.plot { height: 200px; width: auto; }
"""


def write_html_report(report: BakeReport, out_dirs: dict[str, Path], path: Path,
                      memo: Path | None = None) -> Path:
    """Writes the page for ``report``; ``out_dirs`` maps ``stage/asset`` to the published
    bundle folder (and ``stage/asset:inputs`` to the source files by role). ``memo`` is a
    folder where each task's pictures are kept by cache key, so a cached re-bake redraws
    nothing (matplotlib costs seconds)."""
    from bakery.formats.publish import write_atomic

    write_atomic(Path(path), render(report, out_dirs, memo).encode())
    return Path(path)


def render(report: BakeReport, out_dirs: dict[str, Any], memo: Path | None = None) -> str:
    t = report.totals()
    dev = report.device or {}
    from bakery.pipeline.ownership import HTML_REPORT_HEAD  # how clean and bakes recognise it as bakery's

    parts = [f"{HTML_REPORT_HEAD}{_e(report.pipeline)}"
             f"</title><style>{_CSS}</style></head><body>",
             f"<h1>Bake of {_e(report.pipeline)}</h1>",
             f"<p>{t['total']} tasks: {t['built']} built, {t['cached']} cached, {t['failed']} failed, "
             f"{t['skipped']} skipped in {report.seconds:.1f} s "
             + (f"on {_e(dev.get('adapter', '?'))}{' (software)' if dev.get('software') else ''}.</p>" if dev
                else "(no device opened).</p>"),
             _summary_table(report.tasks)]
    for o in report.tasks:
        parts.append(_task_section(o, out_dirs.get(f"{o.stage}/{o.asset}"),
                                   out_dirs.get(f"{o.stage}/{o.asset}:inputs") or {}, memo))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def task_anchor(o: TaskOutcome) -> str:
    return "task-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in f"{o.stage}-{o.asset}")


def _summary_table(tasks: list[TaskOutcome]) -> str:
    rows = ["<table id='summary'><tr><th>task</th><th>status</th><th>seconds</th><th>metrics</th></tr>"]
    for o in tasks:
        metrics = ", ".join(f"{k} {_fmt(v)}" for k, v in flatten_metrics(o.metrics).items())
        rows.append(f"<tr><td><a href='#{task_anchor(o)}'>{_e(o.stage)}/{_e(o.asset)}</a></td>"
                    f"<td class='{_e(o.status)}'>{_e(o.status)}</td><td class='num'>{o.seconds:.2f}</td>"
                    f"<td>{_e(metrics)}{(' &mdash; ' + _e(o.error)) if o.error else ''}</td></tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _task_section(o: TaskOutcome, bundle: Path | None, inputs: dict, memo: Path | None = None) -> str:
    head = (f"<section class='task' id='{task_anchor(o)}'><h2>{_e(o.stage)}/{_e(o.asset)} "
            f"<small class='{_e(o.status)}'>{_e(o.status)}</small></h2>")
    if o.error:
        head += f"<p class='failed'>{_e(o.error)}</p>"
    if bundle is None or not (Path(bundle) / "manifest.json").is_file() or o.status == "skipped":
        return head + "</section>"
    memo_file = memo / f"{o.key}.html" if memo is not None and o.key else None
    if memo_file is not None and memo_file.is_file():
        return head + memo_file.read_text(encoding="utf-8") + "</section>"
    body = _bundle_body(o, Path(bundle), inputs)
    if memo_file is not None and not body.startswith("<p>could not show"):
        from bakery.formats.publish import write_atomic

        try:
            write_atomic(memo_file, body.encode())
        except OSError:
            pass  # the memo only saves time
    return head + body + "</section>"


def _bundle_body(o: TaskOutcome, bundle: Path, inputs: dict) -> str:
    """A bundle's pictures and plots (what depends on its cache key only)."""
    try:
        manifest = json.loads((Path(bundle) / "manifest.json").read_text())
        images = _image_rows(Path(bundle), manifest, inputs)
        plots = _curves(Path(bundle), manifest) + _rate_distortion(manifest)
        if len(images) == 1:  # one pair: its plots beside it
            body = ["<div class='row'>" + images[0] + plots + "</div>"]
        else:
            body = ["<div class='row'>" + row + "</div>" for row in images]
            body.append("<div class='row plots'>" + plots + "</div>" if plots else "")
    except Exception as e:  # noqa: BLE001 - one odd bundle must not cost the whole page
        logging.getLogger("bakery.bake").warning("report.html: %s/%s: %s", o.stage, o.asset, e)
        body = [f"<p>could not show this bundle: {_e(type(e).__name__)}: {_e(e)}</p>"]
    return "\n".join(b for b in body if b)


# -- images ------------------------------------------------------------------------------
def image_pairs(bundle: Path, manifest: dict, inputs: dict) -> list[tuple[str, Path, Path]]:
    """(label, reference, decoded) pairs: a bundle's ``reference`` file with its render or
    preview, else each ``preview_<role>.png`` (or ``preview.png``) with the task's source
    file of that role (``image`` for a single texture)."""
    files = {f["name"]: f["role"] for f in manifest.get("files", [])}
    refs = [n for n, r in files.items() if r == "reference" and n.endswith(".png")]
    pairs = []
    if refs:
        decoded = next((n for n in ("render.png", "preview.png") if n in files), None)
        if decoded:
            pairs.append(("", bundle / refs[0], bundle / decoded))
        return pairs
    for name in sorted(files):
        if not (name.startswith("preview") and name.endswith(".png")):
            continue
        role = name[len("preview_"):-len(".png")] if name.startswith("preview_") else "image"
        if role in inputs:
            pairs.append(("" if role == "image" else role, Path(inputs[role]), bundle / name))
    return pairs


def _image_rows(bundle: Path, manifest: dict, inputs: dict) -> list[str]:
    from bakery.formats.images import load_image

    rows = []
    for label, ref_path, dec_path in image_pairs(bundle, manifest, inputs):
        ref, dec = load_image(ref_path, key="reference"), load_image(dec_path, key="decoded")
        cells = [_figure(ref, f"reference {label}".strip()), _figure(dec, f"decoded {label}".strip())]
        if ref.shape == dec.shape:
            from bakery.imaging import psnr

            diff = np.abs(dec - ref) * DIFFERENCE_GAIN
            cells.append(_figure(diff, f"difference &times;{DIFFERENCE_GAIN:g} ({psnr(dec, ref):.2f} dB)",
                                 escape=False))
        rows.append("".join(cells))
    return rows


def _figure(image: np.ndarray, caption: str, escape: bool = True) -> str:
    from PIL import Image

    from bakery.imaging import to_uint8

    a = to_uint8(np.clip(image, 0.0, 1.0))
    if a.ndim == 3 and a.shape[2] == 2:  # two-channel (normal xy): show as RG
        a = np.concatenate([a, np.zeros_like(a[:, :, :1])], 2)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    im = Image.fromarray(a)
    if im.mode not in ("RGB", "L"):
        im = im.convert("RGB")  # JPEG has no alpha; the report shows colour
    if max(im.size) > THUMBNAIL:
        im.thumbnail((THUMBNAIL, THUMBNAIL), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=JPEG_QUALITY)  # a tenth of a PNG's size for photos and noise
    uri = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    cap = _e(caption) if escape else caption
    return f"<figure><img class='texel' alt='{_e(caption) if escape else 'difference'}' src='{uri}'>" \
           f"<figcaption>{cap}</figcaption></figure>"


# -- plots -------------------------------------------------------------------------------
def convergence_series(curve: dict) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Steps and named series from a ``loss_curve`` file: ``{"per_step": [...]}`` (the fit
    stage) or ``{"points": [{"step", ...metrics}]}`` (TrainingProgress curves)."""
    if "per_step" in curve:
        y = np.asarray(curve["per_step"], np.float64)
        return np.arange(len(y)), {f"{curve.get('loss', 'loss')} loss": y}
    points = curve.get("points") or []
    steps = np.asarray([p["step"] for p in points], np.float64)
    names = [k for k in (points[0] if points else {}) if k != "step"]
    return steps, {k: np.asarray([p.get(k, np.nan) for p in points], np.float64) for k in names}


def _curves(bundle: Path, manifest: dict) -> str:
    curves = [f["name"] for f in manifest.get("files", []) if f["role"] == "loss_curve"]
    out = []
    for name in curves:
        steps, series = convergence_series(json.loads((bundle / name).read_text()))
        if not len(steps):
            continue
        fig, ax = _figure_axes()
        db = {k: v for k, v in series.items() if k.endswith("_db")}
        lin = {k: v for k, v in series.items() if k not in db}
        for k, v in lin.items():
            ax.semilogy(steps, np.maximum(v, 1e-12), label=k)
        ax.set_xlabel("step")
        ax.set_ylabel(", ".join(lin) or "")
        lines = list(ax.get_lines())
        if db:
            ax2 = ax.twinx() if lin else ax
            for k, v in db.items():
                lines += ax2.plot(steps, v, color="tab:orange", label=k)
            ax2.set_ylabel("PSNR (dB)")
        ax.set_title(f"convergence ({name})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(lines, [line.get_label() for line in lines], loc="center right", fontsize="small")
        out.append(_plot_img(fig, f"convergence {name}"))
    return "".join(out)


def rd_points(manifest: dict) -> dict[str, list[tuple[float, float]]]:
    """Rate (bits per texel) and set PSNR (dB, from the mean MSE) of the neural bundle, the
    rates its search tried, and the BCn baseline at full size and at the same bytes."""
    ntc = manifest.get("ntc") or {}
    rate, metrics = ntc.get("rate") or {}, manifest.get("metrics") or {}
    if "bpp" not in rate or "mean_psnr_db" not in metrics:
        return {}
    pts = {"neural (this bundle)": [(float(rate["bpp"]), float(metrics["mean_psnr_db"]))]}
    tried = [(float(t["bpp"]), float(t["mean_psnr_db"])) for t in rate.get("tried") or []]
    if tried:
        pts["neural (rates tried)"] = sorted(tried)
    base = ntc.get("baseline") or {}
    bcn = [(float(b["bpp"]), float(b["mean_psnr"])) for b in (base.get("total"), base.get("same_bytes"))
           if b and np.isfinite(b.get("mean_psnr", np.inf))]
    if bcn:
        pts["BCn (full size, same bytes)"] = sorted(bcn)
    return pts


def _rate_distortion(manifest: dict) -> str:
    pts = rd_points(manifest)
    if not pts:
        return ""
    fig, ax = _figure_axes()
    styles = {"neural (this bundle)": dict(marker="*", markersize=14, linestyle="none", color="tab:red"),
              "neural (rates tried)": dict(marker="o", linestyle="--", color="tab:red", alpha=0.5),
              "BCn (full size, same bytes)": dict(marker="s", linestyle="-", color="tab:blue")}
    for label, xy in pts.items():
        x, y = zip(*xy)
        ax.plot(x, y, label=label, **styles.get(label, {}))
    ax.set_xlabel("bits per texel (whole texture set)")
    ax.set_ylabel("PSNR of the mean MSE (dB)")
    ax.set_title("rate-distortion: neural vs BCn")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return _plot_img(fig, "rate-distortion")


def _figure_axes():
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    fig = Figure(figsize=(5.6, 3.6), dpi=100)
    return fig, fig.add_subplot()


def _plot_img(fig, alt: str) -> str:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return f"<figure><img class='plot' alt='{_e(alt)}' src='{_png_uri(buf.getvalue())}'></figure>"


def _png_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _e(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def task_dirs(specs: Iterable) -> dict[str, Any]:
    """``out_dirs`` for :func:`write_html_report` from the planned task specs."""
    out: dict[str, Any] = {}
    for s in specs:
        out[f"{s.stage}/{s.asset}"] = Path(s.out_dir)
        out[f"{s.stage}/{s.asset}:inputs"] = {role: p for i in s.inputs for role, p in i.files.items()}
    return out
