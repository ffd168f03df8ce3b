"""A root ramp's colours solved, not descended.

For fixed stop positions a ramp's output is linear in its colours (each pixel a fixed
blend of the stops), so given the field the ramp reads, the colours that minimise the
pixel error are a least-squares solution, in any order of the stops: gradient descent
instead has to carry one colour past another and lets the field's own parameters bend to
make up for wrong colours (a fBm's gain shrinking under a too-contrasty ramp). The
positions are found around the fitted ones by a coordinate search with the colours solved
at every trial (variable projection). Over positions in order each pixel blends two
neighbouring stops, linearly in the field, so the normal equations are sums, over the
pixels between neighbouring positions, of 1, v, v^2, T and vT: with the pixels sorted by
their field value once (FieldSums), every trial of the search costs a few lookups in
prefix sums instead of a pass over the pixels.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from bakery.stages.procedural.dsl import Node

#: The field is read back through a two-stop ramp from -SPAN to SPAN (black to white):
#: linear over any value a field reaches, exact in float32 to about 1e-5.
SPAN = 16.0
#: Coordinate-search steps, as shares of the field's range.
STEPS = (0.1, 0.03, 0.01, 0.003, 0.001, 0.0003)
#: Neighbouring positions closer than this blend as the shader's clamped span does
#: (bk_ramp_segment); such trials take the per-pixel path.
MIN_SPAN = 1e-4
#: project_many searches as many fields side by side as keep their sorted values and target,
#: prefix sums and search keys (_Walks) within this many bytes.
SUMS_BYTES = 64 << 20
FIELD_SUMS_BYTES_PER_PIXEL = 200


def projectable(structure: Node) -> bool:
    return structure.op == "ramp"


def field_params(structure: Node, values: np.ndarray) -> np.ndarray:
    """``values`` with ``structure``'s root ramp made to draw the field it reads: black at
    -SPAN to white at SPAN, any further stops white just past SPAN (they change nothing:
    bk_ramp_segment blends white into white). The structure's own fitting module renders
    it, so reading a field compiles nothing."""
    n = int(structure.attr["stops"])
    positions = np.concatenate([[-SPAN, SPAN], SPAN + 1e-3 * np.arange(1, n - 1)])
    colours = np.concatenate([np.zeros(3), np.ones(3 * (n - 1))])
    return np.concatenate([positions, colours, np.asarray(values, np.float64)[4 * n:]])


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
        if abs(span) < MIN_SPAN:
            span = -MIN_SPAN if span < 0 else MIN_SPAN
        t = np.clip((v - positions[i - 1]) / span, 0.0, 1.0)[:, None]
        w *= 1.0 - t
        w[:, i:i + 1] += t
    return w


def _solve(gram: np.ndarray, cross: np.ndarray, tt: float, count: int) -> tuple[np.ndarray, float]:
    """Colours from the normal equations (a stop no pixel reaches gets a tiny ridge, and
    keeps colour 0) and the MSE they leave, without forming the residual."""
    n = len(gram)
    colours = np.linalg.solve(gram + 1e-9 * max(1.0, float(np.trace(gram))) * np.eye(n), cross)
    sse = tt - 2.0 * float((colours * cross).sum()) + float((colours * (gram @ colours)).sum())
    return colours, max(0.0, sse) / count


def solve_colours(v: np.ndarray, target: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, float]:
    """Least-squares colours for ``positions`` and the pixel MSE they leave."""
    w = weights(v, positions)
    return _solve(w.T @ w, w.T @ target, float((target * target).sum()), target.size)


class FieldSums:
    """Fields ``fields`` [m, N] (or one, [N]), each with the target ``t`` [N, 3] sorted by
    its values, with prefix sums of 1, v, v^2, t and v t (v centred on the field's mean, so
    the sums keep their precision): the normal equations of any ordered set of positions
    from a binary search per position. The sorted values are also one array of complex
    numbers, the field's index the real part and the value the imaginary, which sort and
    search lexicographically: one searchsorted finds rows of many fields each in its own."""

    def __init__(self, fields: np.ndarray, t: np.ndarray):
        fields = np.atleast_2d(fields)
        m, pixels = fields.shape
        order = np.argsort(fields, axis=1)  # ties in any order: their sums are the same
        self.v, self.t = np.take_along_axis(fields, order, axis=1), t[order]
        self.centre = self.v.mean(axis=1)
        d = self.v - self.centre[:, None]
        # Sum by sum, each a contiguous row of pixels: the same additions in the same order
        # as pixel by pixel, and a quarter less time to lay out and sum.
        t_by_channel = np.moveaxis(self.t, 2, 0)
        prefix = np.empty((9, m, pixels + 1))
        prefix[:, :, 0] = 0.0
        prefix[0, :, 1:], prefix[1, :, 1:], prefix[2, :, 1:] = 1.0, d, d * d
        prefix[3:6, :, 1:], prefix[6:9, :, 1:] = t_by_channel, d * t_by_channel
        self.prefix = np.cumsum(prefix, axis=2, out=prefix)
        self.tt, self.size = float(np.einsum("ij,ij->", t, t)), t.size
        self.keys = np.empty(m * pixels, complex)
        self.keys.real, self.keys.imag = np.repeat(np.arange(m), pixels), self.v.reshape(-1)

    def solve(self, q: np.ndarray, field: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:func:`solve_colours` for each row of positions ``q`` [R, n] of field ``field``
        [R] (default: the first): colours [R, n, 3] and MSEs [R], from the sums where a row
        is in order (each position at least MIN_SPAN past the one before), per pixel
        otherwise."""
        q = np.atleast_2d(np.asarray(q, np.float64))
        field = np.zeros(len(q), np.intp) if field is None else np.asarray(field)
        colours, mses = np.zeros((*q.shape, 3)), np.zeros(len(q))
        ordered = in_order(q)
        if ordered.any():
            f, rows = field[ordered], q[ordered]
            keys = np.empty(rows.shape, complex)
            keys.real, keys.imag = f[:, None], rows
            pixels = self.v.shape[1]
            below = np.searchsorted(self.keys, keys, side="left") - (f * pixels)[:, None]
            edges = np.concatenate([np.zeros((len(rows), 1), np.intp), below, np.full((len(rows), 1), pixels)], axis=1)
            seg = np.moveaxis(self.prefix[:, f[:, None], edges[:, 1:]] - self.prefix[:, f[:, None], edges[:, :-1]], 0, -1)
            colours[ordered], mses[ordered] = _solve_segments(seg, rows, self.centre[f], self.tt, self.size)
        for i in np.flatnonzero(~ordered):
            colours[i], mses[i] = solve_colours(self.v[field[i]], self.t[field[i]], q[i])
        return colours, mses


def in_order(p: np.ndarray) -> np.ndarray:
    """Which rows of positions [B, n] are in order, each at least MIN_SPAN past the last."""
    return np.all(np.diff(p, axis=1) >= MIN_SPAN, axis=1)


def _solve_segments(seg: np.ndarray, q: np.ndarray, centre, tt, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Colours [m, n, 3] and MSEs [m] of rows of ordered positions q [m, n] from their
    segment sums (FieldSums.solve); ``centre`` and ``tt`` per row or one for all. Every
    row's arithmetic is its own, so rows of several fields solve in one batch."""
    m, n = q.shape
    gram, cross = np.zeros((m, n, n)), np.zeros((m, n, 3))
    gram[:, 0, 0] += seg[:, 0, 0]                # below the first position: its colour alone
    cross[:, 0] += seg[:, 0, 3:6]
    gram[:, n - 1, n - 1] += seg[:, n, 0]        # from the last one on: its colour alone
    cross[:, n - 1] += seg[:, n, 3:6]
    for k in range(1, n):                        # between positions k - 1 and k: blend t = (v - a) / s
        one, sd, sdd, st, sdt = seg[:, k, 0], seg[:, k, 1], seg[:, k, 2], seg[:, k, 3:6], seg[:, k, 6:9]
        a, s = q[:, k - 1] - centre, q[:, k] - q[:, k - 1]
        t1 = (sd - a * one) / s
        t2 = (sdd - 2.0 * a * sd + a * a * one) / (s * s)
        tc = (sdt - a[:, None] * st) / s[:, None]
        gram[:, k - 1, k - 1] += one - 2.0 * t1 + t2
        gram[:, k - 1, k] += t1 - t2
        gram[:, k, k - 1] += t1 - t2
        gram[:, k, k] += t2
        cross[:, k - 1] += st - tc
        cross[:, k] += tc
    ridge = 1e-9 * np.maximum(1.0, np.trace(gram, axis1=1, axis2=2))[:, None, None] * np.eye(n)
    c = np.linalg.solve(gram + ridge, cross)
    sse = tt - 2.0 * (c * cross).sum(axis=(1, 2)) + (c * (gram @ c)).sum(axis=(1, 2))
    return c, np.maximum(0.0, sse) / size


def project(v: np.ndarray, target: np.ndarray, positions: np.ndarray,
            search: bool = True) -> tuple[np.ndarray, np.ndarray, float]:
    """Positions (coordinate search from ``positions``; kept as given without ``search``)
    and colours (solved) of the ramp that best maps field ``v`` [H, W] onto ``target``
    [H, W, 3]; returns them and the MSE."""
    return project_many([v], target, [positions], search)[0]


class _Walks:
    """The coordinate searches of fields with one stop count, side by side (project_many).
    Each field's search: from positions in order it stays in order, since a stop moved past
    its neighbour draws a folded ramp no person would write, and scoring one takes a pass
    over the pixels where an ordered trial takes a few lookups. Each step (a share of the
    field's range) moves one position down or up, the best move that lowers the MSE taken,
    up to 8 times, then the next smaller step. A round is a few array operations for all
    the fields and one FieldSums.solve of every trial."""

    def __init__(self, sums: FieldSums, starts: np.ndarray):
        self.sums, m = sums, len(starts)
        self.best = np.array(starts, np.float64)
        self.colours, self.mse = sums.solve(self.best, np.arange(m))
        self.span = np.maximum(1e-6, sums.v[:, -1] - sums.v[:, 0])
        self.keep_order = in_order(self.best)
        n = self.best.shape[1]
        self.moves = np.concatenate([-np.eye(n), np.eye(n)])  # each position down, then up
        self.step, self.moved = np.zeros(m, int), np.zeros(m, int)

    def run(self) -> list[tuple[np.ndarray, np.ndarray, float]]:
        while self._round():
            pass
        return [(b, c, float(e)) for b, c, e in zip(self.best, self.colours, self.mse)]

    def _trials(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The searching fields, their trial positions [L, 2n, n] and which of those are
        tried; a field whose step leaves no trial in order takes the next step at once."""
        steps = np.asarray(STEPS)
        while True:
            live = np.flatnonzero(self.step < len(STEPS))
            if not len(live):
                return None
            trials = self.best[live, None, :] + (steps[self.step[live]] * self.span[live])[:, None, None] * self.moves
            tried = in_order(trials.reshape(-1, trials.shape[2])).reshape(trials.shape[:2]) | ~self.keep_order[live, None]
            stuck = live[~tried.any(axis=1)]
            if not len(stuck):
                return live, trials, tried
            self.step[stuck] += 1
            self.moved[stuck] = 0

    def _round(self) -> bool:
        found = self._trials()
        if found is None:
            return False
        live, trials, tried = found
        mses = np.full(trials.shape[:2], np.inf)
        colours = np.zeros((*trials.shape, 3))
        row, col = np.nonzero(tried)
        colours[row, col], mses[row, col] = self.sums.solve(trials[row, col], live[row])
        pick = np.argmin(mses, axis=1)   # the first best, untried moves counting as infinite
        at = np.arange(len(live))
        better = mses[at, pick] < self.mse[live] * (1 - 1e-9)
        won = live[better]
        self.best[won] = trials[at[better], pick[better]]
        self.colours[won] = colours[at[better], pick[better]]
        self.mse[won] = mses[at[better], pick[better]]
        self.moved[won] += 1
        done = np.concatenate([live[~better], won[self.moved[won] == 8]])
        self.step[done] += 1
        self.moved[done] = 0
        return True


def project_many(fields: Sequence[np.ndarray], target: np.ndarray, starts: Sequence[np.ndarray],
                 search: bool = True) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """:func:`project` of several fields onto one target, their searches side by side
    (_Walks, one per stop count): a generation projects hundreds of fields, and a round
    costs a few array operations for all of them instead of several per field."""
    t = np.asarray(target, np.float64).reshape(-1, 3)
    flat = [np.asarray(v, np.float64).reshape(-1) for v in fields]
    starts = [np.asarray(p, np.float64).copy() for p in starts]
    if not search:
        return [(p, *solve_colours(v, t, p)) for v, p in zip(flat, starts)]
    out: list = [None] * len(flat)
    side_by_side = max(1, SUMS_BYTES // (FIELD_SUMS_BYTES_PER_PIXEL * max(1, len(t))))
    for n in sorted({len(p) for p in starts}):
        members = [i for i, p in enumerate(starts) if len(p) == n]
        for at in range(0, len(members), side_by_side):
            chunk = members[at:at + side_by_side]
            sums = FieldSums(np.stack([flat[i] for i in chunk]), t)
            found = _Walks(sums, np.stack([starts[i] for i in chunk])).run()
            for i, result in zip(chunk, found):
                out[i] = result
    return out


def with_ramp(structure: Node, values: np.ndarray, positions: np.ndarray, colours: np.ndarray) -> np.ndarray:
    """``values`` with the root ramp's positions and colours replaced."""
    n = int(structure.attr["stops"])
    out = np.asarray(values, np.float64).copy()
    out[:n] = positions
    out[n:4 * n] = np.asarray(colours).reshape(-1)
    return out
