"""``out/report.html``: what out/ holds, for people, in one self-contained page.

A summary table (each task's status, build time, its result against its baseline, a loss
in red with the reason), then one section per task that its stage draws through its
``report_section`` hook (:mod:`bakery.reporting` has the parts): this module names no
stage. Where ``bakery view OUT --snapshot DIR`` has run, each section also shows what the
browser computed for that bundle (its PNGs in DIR), or says the snapshot is of an earlier bundle. Every image is embedded as a data URI (JPEG thumbnails), so the page can be mailed
or attached to a CI run as one file; a click opens an image full size.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Iterable

from bakery.pipeline.ownership import HTML_REPORT_NAME  # the report's file name, re-exported
from bakery.pipeline.report import BakeReport, TaskOutcome
from bakery.reporting import BundleView, describe_metric, e, flatten, num


_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; vertical-align: top; }
th { white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.help { color: #666; font-size: 0.85em; }
.failed, .loses, tr.loses td { color: #b00020; } tr.loses { background: #fdecee; }
.built, .wins { color: #1b5e20; } .cached { color: #555; }
section.task { border-top: 2px solid #ddd; padding-top: 0.5em; margin-top: 1.5em; }
.row { display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }
figure { margin: 0; } figcaption { font-size: 0.85em; color: #555; text-align: center; max-width: 320px; }
img.texel { image-rendering: pixelated; width: 160px; height: auto; border: 1px solid #ccc; cursor: zoom-in; }
img.plot { height: 200px; width: auto; }
#full { position: fixed; inset: 0; background: rgba(0,0,0,0.85); display: none; overflow: auto;
        cursor: zoom-out; z-index: 10; }
#full img { display: block; margin: 2em auto; image-rendering: pixelated; max-width: none; }
"""

#: Click a thumbnail: its full-size image over the page; click again (or Escape) to close.
_SCRIPT = """
const full = document.getElementById('full'), big = full.querySelector('img');
document.addEventListener('click', ev => {
  const t = ev.target;
  if (t.matches && t.matches('img.texel')) { big.src = t.dataset.full || t.src; big.alt = t.alt; full.style.display = 'block'; }
  else if (full.contains(t)) { full.style.display = 'none'; big.removeAttribute('src'); }
});
document.addEventListener('keydown', ev => { if (ev.key === 'Escape') full.style.display = 'none'; });
"""


def write_html_report(report: BakeReport, out_dirs: dict[str, Any], path: Path,
                      memo: Path | None = None) -> Path:
    """Writes the page for ``report``; ``out_dirs`` maps ``stage/asset`` to the published
    bundle folder (and ``stage/asset:inputs`` to the source files by role). ``memo`` is a
    folder where each task's section is kept by cache key, so a cached re-bake redraws
    nothing (matplotlib costs seconds)."""
    from bakery.formats.publish import write_atomic

    write_atomic(Path(path), render(report, out_dirs, memo, root=Path(path).parent).encode())
    return Path(path)


def render(report: BakeReport, out_dirs: dict[str, Any], memo: Path | None = None, root: Path | None = None) -> str:
    t = report.totals()
    dev = report.device or {}
    from bakery.pipeline.ownership import HTML_REPORT_HEAD  # how clean and bakes recognise it as bakery's

    losses = [o for o in report.tasks if o.verdict and not o.verdict.get("wins", True)]
    parts = [f"{HTML_REPORT_HEAD}{e(report.pipeline)}"
             f"</title><style>{_CSS}</style></head><body>",
             f"<h1>Bake of {e(report.pipeline)}</h1>",
             f"<p>{t['total']} tasks: {t['built']} built, {t['cached']} cached, {t['failed']} failed, "
             f"{t['skipped']} skipped; the last bake took {report.seconds:.1f} s "
             + (f"on {e(dev.get('adapter', '?'))}{' (software)' if dev.get('software') else ''}.</p>" if dev
                else "(no device opened).</p>")]
    if losses:
        parts.append(f"<p class='loses'><b>{len(losses)} of {t['total']} tasks lose to their baseline</b> "
                     "(red rows): their result is worse than what a studio would ship without them.</p>")
    parts.append(_summary_table(report.tasks))
    for o in report.tasks:
        parts.append(_task_section(o, out_dirs.get(f"{o.stage}/{o.asset}"),
                                   out_dirs.get(f"{o.stage}/{o.asset}:inputs") or {}, memo, root))
    parts.append(f"<div id='full'><img alt=''></div><script>{_SCRIPT}</script></body></html>\n")
    return "\n".join(parts)


def task_anchor(o: TaskOutcome) -> str:
    return "task-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in f"{o.stage}-{o.asset}")


def _summary_table(tasks: list[TaskOutcome]) -> str:
    rows = ["<table id='summary'><tr><th>task</th><th>status</th><th>build s</th><th>against its baseline</th>"
            "<th>metrics</th></tr>"]
    for o in tasks:
        docs = _stage_of(o).metric_docs
        metrics = ", ".join(f"{describe_metric(k, docs)[0]} {num(v)}" for k, v in flatten(o.metrics).items()
                            if v is not None and k != "margin_db")
        v = o.verdict
        versus = "" if not v else (f"{v['margin_db']:+.2f} dB vs {e(v['baseline'])}"
                                   + ("" if v.get("wins", True) else f"<br><small>{e(v.get('reason') or '')}</small>"))
        lose = " class='loses'" if v and not v.get("wins", True) else ""
        status = o.status + (f" ({o.reason})" if o.reason and o.status == "cached" else "")
        rows.append(f"<tr{lose}><td><a href='#{task_anchor(o)}'>{e(o.stage)}/{e(o.asset)}</a></td>"
                    f"<td class='{e(o.status)}'>{e(status)}</td><td class='num'>{o.seconds:.2f}</td>"
                    f"<td>{versus}</td>"
                    f"<td>{e(metrics)}{(' &mdash; ' + e(o.error)) if o.error else ''}</td></tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _task_section(o: TaskOutcome, bundle: Path | None, inputs: dict, memo: Path | None = None,
                  root: Path | None = None) -> str:
    head = (f"<section class='task' id='{task_anchor(o)}'><h2>{e(o.stage)}/{e(o.asset)} "
            f"<small class='{e(o.status)}'>{e(o.status)}</small></h2>")
    if o.error:
        head += f"<p class='failed'>{e(o.error)}</p>"
    if bundle is None or not (Path(bundle) / "manifest.json").is_file() or o.status == "skipped":
        return head + ("<p>no bundle in out/ for this task.</p>" if not o.error else "") + "</section>"
    browser = _browser_row(Path(bundle), root, memo)   # by the images' bytes: a snapshot changes without the key
    return head + section_body(o, Path(bundle), inputs, memo, root) + browser + "</section>"


def section_body(o: TaskOutcome, bundle: Path, inputs: dict, memo: Path | None = None,
                 root: Path | None = None) -> str:
    """The stage's section of one bundle: from ``memo`` (by cache key) where it is kept,
    else drawn and kept there."""
    memo_file = memo / f"{o.key}-{_memo_salt(root)}.html" if memo is not None and o.key else None
    kept = _memo_text(memo_file)
    if kept is not None:
        return kept
    body = _bundle_body(o, bundle, inputs, root)
    if memo_file is not None and not body.startswith("<p>could not show"):
        from bakery.formats.publish import write_atomic

        try:
            write_atomic(memo_file, body.encode())
        except OSError:
            pass  # the memo only saves time
    return body


class SectionsAhead:
    """Draws each built task's section into the memo on one thread while the bake goes on,
    so the page written at the end only assembles them. At 2048² a section decodes and
    thumbnails a bundle's images; drawn after the last task, a library's sections kept
    the bake running over a minute with the GPU idle (bench/library.py). One thread, at a
    lower CPU priority (bakery.overlap): it keeps pace with the tasks without taking a
    core from the threads that feed the device."""

    def __init__(self, out_dirs: dict[str, Any], memo: Path, root: Path):
        from bakery.overlap import SideWork

        self.out_dirs, self.memo, self.root = out_dirs, memo, root
        self._side = SideWork(workers=1)
        self._pending: list = []

    def submit(self, o: TaskOutcome) -> None:
        bundle = self.out_dirs.get(f"{o.stage}/{o.asset}")
        if o.status != "built" or not o.key or bundle is None:
            return
        inputs = self.out_dirs.get(f"{o.stage}/{o.asset}:inputs") or {}
        self._pending.append(self._side.submit("encoding", _draw_into_memo, o, Path(bundle), inputs, self.memo,
                                               self.root))

    def finish(self, *, cancel: bool = False) -> None:
        """Waits for the drawing, so the page's own drawing does not repeat it; ``cancel``
        (an interrupted bake) drops what has not started and waits for nothing."""
        if not cancel:
            for pending in self._pending:
                pending.future.exception()   # waits; a failed drawing is redrawn (and reported) by the page
        self._side.close()


def _draw_into_memo(o: TaskOutcome, bundle: Path, inputs: dict, memo: Path, root: Path) -> None:
    """section_body for its memo alone: the page reads it from there, and a library's
    sections (megabytes of embedded images each) are not held in memory meanwhile."""
    section_body(o, bundle, inputs, memo, root)


def _browser_row(bundle: Path, root: Path | None, memo: Path | None = None) -> str:
    """What the last ``bakery view OUT --snapshot DIR`` computed for this bundle in the
    browser (mip-0 decodes and its view; the other mips are in DIR): the PNGs DIR's index
    lists, regular files only, read through no link. Each image's figure is kept in
    ``memo`` by a digest of its bytes, caption and link, so a re-bake decodes none again."""
    from bakery.view.snapshot import browser_snapshot

    if root is None:
        return ""
    try:
        snap = browser_snapshot(root, bundle)
        if snap is None:
            return ""
        if not snap.current:
            return ("<p class='snapshot'>the browser snapshot in out/ is of an earlier bundle; "
                    "run <code>bakery view OUT --snapshot DIR</code> again to see this one.</p>")
        shown = [p for p in snap.images if "_mip" not in p.stem]
        cells = [_snapshot_figure(snap, p, f"in the browser: {p.name}",
                                  Path(os.path.relpath(p.resolve(), Path(root).resolve())).as_posix(), memo)
                 for p in shown]
        more = len(snap.images) - len(shown)
        note = f" ({more} more mip levels in the snapshot folder)" if more else ""
        return (f"<h3>in the browser (<code>bakery view --snapshot</code>){e(note)}</h3>"
                f"<div class='row snapshot'>{''.join(cells)}</div>")
    except Exception as ex:  # noqa: BLE001 - a damaged snapshot costs its row, never the page
        logging.getLogger("bakery.bake").warning("report.html: browser snapshot of %s: %s", bundle, ex)
        return ""


def _snapshot_figure(snap, path: Path, caption: str, full: str, memo: Path | None) -> str:
    from bakery.formats.publish import write_atomic
    from bakery.reporting import figure

    data = snap.read_bytes(path)
    h = hashlib.sha256(data)
    h.update(f"\0{caption}\0{full}\0{_memo_salt(None)}".encode())
    memo_file = memo / f"snapshot-{h.hexdigest()}.html" if memo is not None else None
    kept = _memo_text(memo_file)
    if kept is not None:
        return kept
    cell = figure(snap.decode(path, data), caption, full=full)
    if memo_file is not None:
        try:
            write_atomic(memo_file, cell.encode())
        except OSError:
            pass  # the memo only saves time
    return cell


def _memo_text(path: Path | None) -> str | None:
    """A memo file's text; None where there is none, or it is not a regular file."""
    from bakery.safe_files import read_regular

    if path is None:
        return None
    try:
        return read_regular(path).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _bundle_body(o: TaskOutcome, bundle: Path, inputs: dict, root: Path | None) -> str:
    """The stage's section for one bundle (what depends on its cache key only)."""
    try:
        manifest = json.loads((bundle / "manifest.json").read_text())
        stage = _stage_of(o, manifest)
        view = BundleView(o.stage, o.asset, bundle, manifest, {r: Path(p) for r, p in inputs.items()}, root,
                          stage.judge(manifest), stage.metric_docs)
        return stage.report_section(view)
    except Exception as ex:  # noqa: BLE001 - one odd bundle must not cost the whole page
        logging.getLogger("bakery.bake").warning("report.html: %s/%s: %s", o.stage, o.asset, ex)
        return f"<p>could not show this bundle: {e(type(ex).__name__)}: {e(ex)}</p>"


def _stage_of(o: TaskOutcome, manifest: dict | None = None):
    """The task's stage class (its hooks), by the type its manifest or outcome names; the
    base class, with the standard section, for a type this process does not know."""
    from bakery.stages import Stage, get_stage

    type_name = o.stage_type or ((manifest or {}).get("stage") or {}).get("type")
    try:
        return get_stage(type_name) if type_name else Stage
    except Exception:  # noqa: BLE001 - a plugin stage not imported here
        return Stage


@functools.lru_cache(maxsize=None)
def _memo_salt(root: Path | None) -> str:
    """Sections depend on the drawing code and on where the page sits (relative links)."""
    import bakery.reporting

    h = hashlib.sha256(Path(bakery.reporting.__file__).read_bytes())
    h.update(Path(__file__).read_bytes())
    h.update(str(Path(root).resolve() if root is not None else "").encode())
    return h.hexdigest()[:12]


def task_dirs(specs: Iterable) -> dict[str, Any]:
    """``out_dirs`` for :func:`write_html_report` from the planned task specs."""
    out: dict[str, Any] = {}
    for s in specs:
        out[f"{s.stage}/{s.asset}"] = Path(s.out_dir)
        out[f"{s.stage}/{s.asset}:inputs"] = {role: p for i in s.inputs for role, p in i.files.items()}
    return out
