"""``bakery inspect`` and ``bakery verify``: the reader as commands.

``inspect`` of a bad bundle ends with exit code 2 and one line on stderr naming the file
(the :class:`BundleError` message). ``verify`` exits 1 when a bundle under OUT is bad (a
failed check, like a failed task) and 2 only for usage errors (OUT missing or holding no
bundle), so pipeline hooks can script against it; ``--json`` gives the same verdict for
machines.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from bakery.errors import EXIT_TASK_FAILED, EXIT_USAGE
from bakery.formats import canonical_json
from bakery.formats.errors import BundleError
from bakery.formats.reader import Bundle, find_bundles, find_interrupted, read_bundle


def _fail(ctx: click.Context, message: str) -> None:
    click.echo(f"error: {message}", err=True)
    ctx.exit(EXIT_USAGE)


def _network_line(b: Bundle, name: str) -> str:
    spec, rec = b.networks[name][0], b.manifest["networks"][name]
    enc = spec.encoding.to_dict()
    enc_text = enc["type"] + "".join(f" {k}={v}" for k, v in sorted(enc.items()) if k not in ("type", "n_inputs"))
    dims = " -> ".join(str(d) for d in [spec.n_inputs, spec.encoding.n_outputs, *(l.n_out for l in spec.layers)])
    return (f"{dims} ({enc_text}; {spec.hidden_activation}/{spec.output_activation}), {rec['dtype']}, "
            f"{spec.param_count} params in {rec['file']}")


def _summary(b: Bundle) -> list[str]:
    m = b.manifest
    dev = m["device"] or {"backend": "none", "adapter": "no device used"}
    lines = [f"bundle   {b.path}  (verified: {len(m['files'])} files, checksums ok)",
             f"stage    {m['stage']['type']} v{m['stage']['version']}   seed {m['seed']}   "
             f"schema {m['schema_version']}   bakery {m['bakery_version']}",
             f"device   {dev.get('backend', '?')} / {dev.get('adapter', '?')}"
             + ("  (software)" if dev.get("software") else "")]
    for name in sorted(b.networks):
        lines.append(f"network  {name}: {_network_line(b, name)}")
    if m["metrics"]:
        from bakery.pipeline.report import flatten_metrics

        lines.append("metrics  " + "  ".join(f"{k}={v}" for k, v in sorted(flatten_metrics(m["metrics"]).items())))
    if m["params"]:
        lines.append("params   " + json.dumps(m["params"], sort_keys=True))
    lines.append("files")
    width = max(len(f["name"]) for f in m["files"]) if m["files"] else 0
    for f in m["files"]:
        extra = ""
        if f["name"] in b.textures:
            t = b.textures[f["name"]]
            extra = f"  {t.format.name} {t.width}x{t.height} mips={t.level_count} layers={t.layer_count}"
        lines.append(f"  {f['name']:<{width}}  {f['role']:<8} {f['bytes']:>10} B  {f['sha256'][:12]}{extra}")
    return lines


@click.command("inspect")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON instead of a summary.")
@click.pass_context
def inspect_cmd(ctx: click.Context, bundle: Path, as_json: bool) -> None:
    """Verify one bundle folder and print its manifest."""
    try:
        b = read_bundle(bundle)
    except BundleError as e:
        _fail(ctx, str(e))
        return
    if as_json:
        click.echo(canonical_json.dumps(b.manifest).decode(), nl=False)
    else:
        click.echo("\n".join(_summary(b)))


@click.command("verify")
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True,
              help='Print {"ok", "bad", "bundles": [{"path", "ok", "error"}]} instead of lines.')
@click.pass_context
def verify_cmd(ctx: click.Context, out: Path, as_json: bool) -> None:
    """Verify every bundle under OUT (checksums, headers, manifests); exit 1 if any is bad."""
    if not out.is_dir():
        _fail(ctx, f"{out}: not a folder")
        return
    bundles = find_bundles(out)
    leftovers = find_interrupted(out)
    if not bundles and not leftovers:
        _fail(ctx, f"{out}: no bundles found (no manifest.json under it)")
        return
    # docs/FORMAT.md: a ``<asset>.bakery-old`` folder is an interrupted publish's leftover that
    # loaders ignore; so does verify, for the folder and every bundle in it, and says so.
    bundles = [p for p in bundles if p not in leftovers and not any(q in leftovers for q in p.parents)]
    if not bundles:
        _fail(ctx, f"{out}: no bundles found (only {len(leftovers)} leftover(s) of an interrupted publish)")
        return
    results = []
    for path in bundles:
        try:
            read_bundle(path)
        except BundleError as e:
            results.append({"path": str(path), "ok": False, "error": str(e)})
        else:
            results.append({"path": str(path), "ok": True, "error": None})
    good = sum(r["ok"] for r in results)
    bad = len(results) - good
    if as_json:
        click.echo(json.dumps({"ok": good, "bad": bad, "bundles": results,
                               "ignored": [str(p) for p in leftovers]}, indent=1))
    else:
        for r in results:
            click.echo(f"ok    {r['path']}" if r["ok"] else f"FAIL  {r['error']}")
        for path in leftovers:
            click.echo(f"skip  {path}: left by an interrupted publish (ignored; the next bake removes it)")
        click.echo(f"{good} ok, {bad} bad" + (f", {len(leftovers)} leftover(s) ignored" if leftovers else ""))
    if bad:
        click.echo(f"error: {bad} bad bundle(s) under {out}; see the FAIL lines", err=True)
        ctx.exit(EXIT_TASK_FAILED)
