"""The convergence plot of a fit: loss per step, on a log axis, as PNG bytes."""

from __future__ import annotations

import numpy as np

from bakery.figures import png_bytes


def convergence_png(losses: np.ndarray, *, title: str, loss_name: str) -> bytes:
    """Deterministic PNG (no timestamp or version in the metadata) of ``losses`` by step."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    fig = Figure(figsize=(6.4, 4.0), dpi=100)
    ax = fig.add_subplot()
    steps = np.arange(len(losses))
    positive = np.maximum(np.asarray(losses, np.float64), 1e-12)  # a perfect fit would leave the log axis
    ax.semilogy(steps, positive, linewidth=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel(f"mean {loss_name.upper()} loss")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    return png_bytes(fig)
