"""``bakery view OUT [--snapshot DIR]``."""

from __future__ import annotations

from pathlib import Path

import click

from bakery.errors import UsageError


@click.command("view")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="port on 127.0.0.1 (0: a free one)")
@click.option("--snapshot", "snapshot_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="render in headless Chromium, write what it computed under DIR and exit")
def view_cmd(out: Path, port: int, snapshot_dir: Path | None) -> None:
    """Serve a page that draws every bundle under OUT with three.js (each decoder as
    generated WebGL2 code); Ctrl-C stops it."""
    from bakery.view.server import ViewServer, node_modules

    if not out.is_dir():
        raise UsageError("no such folder (bake first: bakery bake pipeline.toml)", where=str(out))
    if node_modules() is None:
        raise UsageError("three.js is not installed beside bakery (run `npm ci` in the checkout, as "
                         "scripts/setup.sh does)")
    with ViewServer(out, port=port) as server:
        for line in server.app.problems:
            click.echo(f"warning: {line}", err=True)
        if snapshot_dir is not None:
            from bakery.view.snapshot import write_snapshot

            written = write_snapshot(server.url, server.app.bundles, snapshot_dir)
            click.echo(f"snapshot: {len(server.app.bundles)} bundles, {len(written)} files in {snapshot_dir}")
            return
        click.echo(f"bakery view: {len(server.app.bundles)} bundles at {server.url}  (Ctrl-C stops)")
        try:
            while server.thread.is_alive():
                server.thread.join(0.5)
        except KeyboardInterrupt:
            click.echo("bakery view: stopped")
