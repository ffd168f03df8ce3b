"""The parts a stage's report section is built from, for ``out/report.html``.

A stage's :meth:`~bakery.stages.Stage.report_section` hook gets a :class:`BundleView` of
one published bundle and returns HTML; :func:`section` is the standard one (its verdict
against the baseline, reference / decoded / difference images, convergence curves and
its metrics with readable names), which a stage extends with its own plots. Images are
embedded as JPEG thumbnails (the page can be mailed as one file) and open full size on
click: the bundle's or the source's file where there is one, else a full-size copy.
Plots are drawn with matplotlib's object API (no pyplot: no global state, no GUI).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from bakery.verdict import Verdict

#: Longest side of an embedded thumbnail.
THUMBNAIL = 256
#: Longest side of a full-size copy embedded for an image that has no file (a difference).
FULL_SIZE_CAP = 1024
JPEG_QUALITY = 88
#: |decoded - reference| is shown times this, so small errors are visible.
DIFFERENCE_GAIN = 4.0


@dataclass
class BundleView:
    """One task's published bundle as the report sees it."""

    stage: str                      # the [stages.NAME]
    asset: str
    bundle: Path
    manifest: dict
    inputs: Mapping[str, Path] = field(default_factory=dict)  # source files by role
    root: Path | None = None        # folder of report.html: links are relative to it
    verdict: Verdict | None = None
    metric_docs: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    def files(self, role: str | None = None) -> list[str]:
        return [f["name"] for f in self.manifest.get("files", []) if role is None or f["role"] == role]

    def href(self, path: Path) -> str | None:
        """``path`` relative to the report (a link that survives moving out/ and its sources together)."""
        if self.root is None:
            return None
        try:
            return Path(os.path.relpath(Path(path).resolve(), Path(self.root).resolve())).as_posix()
        except ValueError:  # another drive
            return Path(path).resolve().as_uri()


# -- the standard section ----------------------------------------------------------------
def section(view: BundleView, extra: list[str] | tuple[str, ...] = ()) -> str:
    """The verdict, image rows, curves plus ``extra`` plots, and the metrics table."""
    parts = [verdict_block(view.verdict)]
    rows = image_rows(view)
    plots = curves(view) + "".join(extra)
    if len(rows) == 1:  # one pair: its plots beside it
        parts.append("<div class='row'>" + rows[0] + plots + "</div>")
    else:
        parts += ["<div class='row'>" + r + "</div>" for r in rows]
        if plots:
            parts.append("<div class='row plots'>" + plots + "</div>")
    parts.append(metrics_table(view.manifest.get("metrics") or {}, view.metric_docs))
    return "\n".join(p for p in parts if p)


def verdict_block(v: Verdict | None) -> str:
    """The result against its baseline, per part where there are parts; a loss in red with its reason."""
    if v is None:
        return ""
    cls = "wins" if v.wins else "loses"
    head = (f"<p class='verdict {cls}'><b>{'beats' if v.wins else 'loses to'} {e(v.baseline)}</b>: "
            f"{e(num(v.result))} vs {e(num(v.baseline_value))} {e(v.metric)}, "
            f"margin {v.margin_db:+.2f} dB" + (f" &mdash; {e(v.reason)}" if v.reason and not v.wins else "") + "</p>")
    if not v.parts:
        return head
    rows = [f"<table class='verdict'><tr><th></th><th>result</th><th>{e(v.baseline)}</th><th>margin (dB)</th></tr>"]
    for p in v.parts:
        lose = " class='loses'" if float(p["margin_db"]) < 0 else ""
        rows.append(f"<tr{lose}><td>{e(p['name'])}</td><td class='num'>{e(num(p['result']))}</td>"
                    f"<td class='num'>{e(num(p['baseline']))}</td><td class='num'>{float(p['margin_db']):+.2f}</td></tr>")
    return head + "".join(rows) + "</table>"


def metrics_table(metrics: Mapping[str, Any], docs: Mapping[str, tuple[str, str]]) -> str:
    """Every scalar metric under its readable name, its explanation beside it (and on hover)."""
    rows = []
    for name, value in flatten(metrics).items():
        if value is None:
            continue
        label, what = describe_metric(name, docs)
        rows.append(f"<tr title='{e(name)}'><td>{e(label)}</td><td class='num'>{e(num(value))}</td>"
                    f"<td class='help'>{e(what)}</td></tr>")
    return "<table class='metrics'>" + "".join(rows) + "</table>" if rows else ""


def describe_metric(name: str, docs: Mapping[str, tuple[str, str]]) -> tuple[str, str]:
    """(readable name, one-line explanation) of a flattened metric: exact entries first, then
    ``prefix.*`` patterns (``{}`` in them is the rest of the name), else the name made readable."""
    if name in docs:
        return docs[name]
    head, _, rest = name.partition(".")
    if rest and f"{head}.*" in docs:
        label, what = docs[f"{head}.*"]
        return label.format(rest), what.format(rest)
    return readable(name), ""


def readable(name: str) -> str:
    """``set_psnr_db`` -> ``set PSNR (dB)``: a fallback for metrics a stage does not describe."""
    words = name.replace(".", " ").split("_")
    unit = ""
    if words and words[-1] == "db":
        words, unit = words[:-1], " (dB)"
    subst = {"psnr": "PSNR", "rmse": "RMSE", "mse": "MSE", "flip": "FLIP", "bpp": "bits per texel", "vs": "vs"}
    return " ".join(subst.get(w, w) for w in words if w) + unit


def flatten(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"psnr_db": {"normal": 19.2}}`` -> ``{"psnr_db.normal": 19.2}``; lists are left out."""
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        elif not isinstance(v, (list, tuple)):
            out[f"{prefix}{k}"] = v
    return out


# -- images ------------------------------------------------------------------------------
def image_pairs(bundle: Path, manifest: dict, inputs: Mapping[str, Path]) -> list[tuple[str, Path, Path]]:
    """(label, reference, decoded) pairs: a bundle's one ``reference`` file with its render
    or preview, else each ``preview_<role>.png`` (or ``preview.png``) with its reference:
    the bundle's ``source_<role>.png``, else the task's source file of that role (``image``
    for a single texture)."""
    files = {f["name"]: f["role"] for f in manifest.get("files", [])}
    refs = [n for n, r in files.items() if r == "reference" and n.endswith(".png") and not n.startswith("source_")]
    decoded = next((n for n in ("render.png", "preview.png") if n in files), None)
    if refs and decoded:
        return [("", bundle / refs[0], bundle / decoded)]
    pairs = []
    for name in sorted(files):
        if not (name.startswith("preview") and name.endswith(".png")):
            continue
        role = name[len("preview_"):-len(".png")] if name.startswith("preview_") else "image"
        label = "" if role == "image" else role
        if f"source_{role}.png" in files:
            pairs.append((label, bundle / f"source_{role}.png", bundle / name))
        elif role in inputs:
            pairs.append((label, Path(inputs[role]), bundle / name))
    return pairs


def image_rows(view: BundleView, pairs: list[tuple[str, Path, Path]] | None = None) -> list[str]:
    """Reference, decoded and |difference| x DIFFERENCE_GAIN (with its PSNR) per pair."""
    from bakery.formats.images import load_image
    from bakery.imaging import psnr

    rows = []
    for label, ref_path, dec_path in (image_pairs(view.bundle, view.manifest, view.inputs) if pairs is None else pairs):
        ref, dec = load_image(ref_path, key="reference"), load_image(dec_path, key="decoded")
        cells = [figure(ref, f"reference {label}".strip(), full=view.href(ref_path)),
                 figure(dec, f"decoded {label}".strip(), full=view.href(dec_path))]
        if ref.shape == dec.shape:
            diff = np.abs(dec - ref) * DIFFERENCE_GAIN
            cells.append(figure(diff, f"difference \u00d7{DIFFERENCE_GAIN:g} ({psnr(dec, ref):.2f} dB)"))
        base = f"baseline_{label or 'image'}.png"
        if base in view.files("baseline"):  # what a studio ships instead, decoded (a format role)
            cells.append(picture(view, base, f"baseline {label}".strip()))
        rows.append("".join(cells))
    return rows


def picture(view: BundleView, name: str, caption: str, css: str = "texel") -> str:
    """A PNG of the bundle as a figure (thumbnail; the file at full size on click)."""
    from bakery.formats.images import load_image

    path = view.bundle / name
    if css == "plot":  # a chart the stage drew: embedded as it is
        return (f"<figure><img class='plot' alt='{e(caption)}' src='{png_uri(path.read_bytes())}'>"
                f"<figcaption>{e(caption)}</figcaption></figure>")
    return figure(load_image(path, key=name), caption, full=view.href(path))


def figure(image: np.ndarray, caption: str, *, full: str | None = None) -> str:
    """A thumbnail with its caption; click opens ``full`` (a link) or, without one, a
    full-size copy embedded in the page. An image no larger than a thumbnail is embedded
    once, the click opening the thumbnail itself (a second copy was a quarter of a page's
    bytes)."""
    thumb = _jpeg_uri(image, THUMBNAIL)
    if full is None and max(np.shape(image)[:2]) > THUMBNAIL:
        full = _jpeg_uri(image, FULL_SIZE_CAP)
    data_full = f" data-full='{e(full)}'" if full is not None else ""
    return (f"<figure><img class='texel' alt='{e(caption)}' title='click: full size' src='{thumb}'"
            f"{data_full}><figcaption>{e(caption)}</figcaption></figure>")


def _jpeg_uri(image: np.ndarray, side: int) -> str:
    from PIL import Image

    from bakery.imaging import to_uint8

    a = to_uint8(image)   # clamps to [0, 1] itself
    if a.ndim == 3 and a.shape[2] == 2:  # two-channel (normal xy): show as RG
        a = np.concatenate([a, np.zeros_like(a[:, :, :1])], 2)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    im = Image.fromarray(a)
    if im.mode not in ("RGB", "L"):
        im = im.convert("RGB")  # JPEG has no alpha; the report shows colour
    if max(im.size) > side:
        im.thumbnail((side, side), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=JPEG_QUALITY)  # a tenth of a PNG's size for photos and noise
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


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


def curves(view: BundleView) -> str:
    """A convergence plot per ``loss_curve`` file: losses on a log axis, dB on a second one."""
    out = []
    for name in view.files("loss_curve"):
        steps, series = convergence_series(json.loads((view.bundle / name).read_text()))
        if not len(steps):
            continue
        fig, ax = figure_axes()
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
        out.append(plot(fig, f"convergence {name}"))
    return "".join(out)


def bar_plot(title: str, ylabel: str, values: Mapping[str, float], *, highlight: str | None = None) -> str:
    """Bars, one per name (``highlight``'s in red): a result beside its baselines."""
    fig, ax = figure_axes()
    names = list(values)
    ys = [v if math.isfinite(v) else np.nan for v in values.values()]
    ax.bar(names, ys, color=["tab:red" if n == highlight else "tab:blue" for n in names])
    for i, y in enumerate(ys):
        if np.isfinite(y):
            ax.annotate(f"{y:.4g}", (i, y), ha="center", va="bottom", fontsize="small")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    return plot(fig, title)


def figure_axes():
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.6, 3.6), dpi=100)
    return fig, fig.add_subplot()


def plot(fig, alt: str) -> str:
    from bakery.figures import png_bytes

    return f"<figure><img class='plot' alt='{e(alt)}' src='{png_uri(png_bytes(fig))}'></figure>"


def png_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def e(s: Any) -> str:
    return html.escape(str(s), quote=True)


def num(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
