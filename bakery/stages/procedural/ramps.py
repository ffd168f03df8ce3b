"""A root ramp's colours solved, not descended.

For fixed stop positions a ramp's output is linear in its colours (each pixel a fixed
blend of the stops), so given the field the ramp reads, the colours that minimise the
pixel error are a least-squares solution, in any order of the stops: gradient descent
instead has to carry one colour past another and lets the field's own parameters bend to
make up for wrong colours (a fBm's gain shrinking under a too-contrasty ramp). The
positions are found around the fitted ones by a coordinate search with the colours solved
at every trial (variable projection).
"""

from __future__ import annotations

import numpy as np

from bakery.stages.procedural.dsl import Node

#: The field is read back through a two-stop ramp from -SPAN to SPAN (black to white):
#: linear over any value a field reaches, exact in float32 to about 1e-5.
SPAN = 16.0
#: Coordinate-search steps, as shares of the field's range.
STEPS = (0.1, 0.03, 0.01, 0.003, 0.001, 0.0003)
#: Pixels the position search looks at (a fixed random subset of larger images).
SEARCH_PIXELS = 8192


def projectable(structure: Node) -> bool:
    return structure.op == "ramp"


def field_reader(structure: Node, values: np.ndarray) -> tuple[Node, np.ndarray]:
    """The program that renders the field under ``structure``'s root ramp, and its
    parameters: the ramp's child through a black-to-white ramp over [-SPAN, SPAN]."""
    n = int(structure.attr["stops"])
    reader = Node("ramp", structure.inputs, (("stops", 2),), ())
    head = np.array([-SPAN, SPAN, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    return reader, np.concatenate([head, np.asarray(values, np.float64)[4 * n:]])


def field_values(render: np.ndarray) -> np.ndarray:
    """The field back from the reader's render (its red channel)."""
    return np.asarray(render, np.float64)[..., 0] * (2.0 * SPAN) - SPAN


def weights(v: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Per pixel, the share of each stop's colour in the ramp's output (bk_ramp_segment's
    sequence of blends, so positions out of order behave as the shader does)."""
    n = len(positions)
    w = np.zeros((v.size, n))
    w[:, 0] = 1.0
    for i in range(1, n):
        span = positions[i] - positions[i - 1]
        if abs(span) < 1e-4:
            span = -1e-4 if span < 0 else 1e-4
        t = np.clip((v - positions[i - 1]) / span, 0.0, 1.0)[:, None]
        w *= 1.0 - t
        w[:, i:i + 1] += t
    return w


def solve_colours(v: np.ndarray, target: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, float]:
    """Least-squares colours for ``positions`` and the pixel MSE they leave."""
    w = weights(v, positions)
    # Normal equations (a stop no pixel reaches gets a tiny ridge, and keeps colour 0);
    # the error from them too, without forming the residual.
    gram, cross = w.T @ w, w.T @ target
    colours = np.linalg.solve(gram + 1e-9 * max(1.0, float(np.trace(gram))) * np.eye(len(positions)), cross)
    sse = float((target * target).sum() - 2.0 * (colours * cross).sum() + (colours * (gram @ colours)).sum())
    return colours, max(0.0, sse) / target.size


def project(v: np.ndarray, target: np.ndarray, positions: np.ndarray,
            search: bool = True) -> tuple[np.ndarray, np.ndarray, float]:
    """Positions (coordinate search from ``positions``; kept as given without ``search``)
    and colours (solved) of the ramp that best maps field ``v`` [H, W] onto ``target``
    [H, W, 3]; returns them and the MSE."""
    v_all = np.asarray(v, np.float64).reshape(-1)
    t_all = np.asarray(target, np.float64).reshape(-1, 3)
    v, t = v_all, t_all
    if search and v.size > SEARCH_PIXELS:  # the search on a fixed random subset, the answer on all
        keep = np.random.default_rng(0).choice(v.size, SEARCH_PIXELS, replace=False)
        v, t = v[keep], t[keep]
    span = max(1e-6, float(v.max() - v.min()))
    best = np.asarray(positions, np.float64).copy()
    colours, mse = solve_colours(v, t, best)
    for step in STEPS if search else ():
        improved, rounds = True, 0
        while improved and rounds < 8:
            improved, rounds = False, rounds + 1
            for i in range(len(best)):
                for sign in (-1.0, 1.0):
                    trial = best.copy()
                    trial[i] += sign * step * span
                    c, m = solve_colours(v, t, trial)
                    if m < mse * (1 - 1e-9):
                        best, colours, mse, improved = trial, c, m, True
    if v is not v_all:
        colours, mse = solve_colours(v_all, t_all, best)
    return best, colours, mse


def with_ramp(structure: Node, values: np.ndarray, positions: np.ndarray, colours: np.ndarray) -> np.ndarray:
    """``values`` with the root ramp's positions and colours replaced."""
    n = int(structure.attr["stops"])
    out = np.asarray(values, np.float64).copy()
    out[:n] = positions
    out[n:4 * n] = np.asarray(colours).reshape(-1)
    return out
