"""Matplotlib figures as PNG bytes, drawn one at a time in a process.

Matplotlib's text layout is shared by every figure and not thread-safe: mathtext's parser
(a log axis's exponent labels) fails with ParseException or IndexError when two figures
are laid out at once on two threads, as a task's own plot and a report section drawn
beside the bake (bakery.pipeline.html_report.SectionsAhead) or beside training
(bakery.overlap) may be. Figures are built on any thread (matplotlib's object API, no
pyplot state); their layout and drawing take this module's lock.
"""

from __future__ import annotations

import io
import threading

_DRAWING = threading.Lock()


def png_bytes(fig) -> bytes:
    """``fig`` laid out tight and drawn to a deterministic PNG (no timestamp or version in
    its metadata)."""
    buf = io.BytesIO()
    with _DRAWING:
        fig.tight_layout()
        fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()
