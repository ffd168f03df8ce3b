"""Plots drawn on two threads at once: a task's own beside a report section's."""

from __future__ import annotations

import threading

import numpy as np

from bakery import reporting
from bakery.stages.fit.plot import convergence_png


def test_log_axis_plots_drawn_on_two_threads_at_once_all_succeed_and_match():
    """Matplotlib's mathtext parser (a log axis's labels) fails when two figures are laid
    out at once (ParseException, IndexError: seen in a bake whose report sections were
    drawn beside a fit); bakery.figures draws one at a time, the same bytes as alone."""
    losses = np.geomspace(1.0, 1e-6, 300)
    alone = convergence_png(losses, title="t", loss_name="mse")
    errors, pngs = [], []

    def task_plots():
        for _ in range(12):
            try:
                pngs.append(convergence_png(losses, title="t", loss_name="mse"))
            except Exception as e:  # noqa: BLE001 - collected for the assertion
                errors.append(repr(e))

    def report_plots():
        for _ in range(12):
            try:
                fig, ax = reporting.figure_axes()
                ax.semilogy(np.arange(300), losses)
                reporting.plot(fig, "curve")
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))

    threads = [threading.Thread(target=task_plots), threading.Thread(target=report_plots)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert pngs and all(p == alone for p in pngs)
