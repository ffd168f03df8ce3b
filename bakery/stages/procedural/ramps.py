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
#: project_many searches as many fields side by side as keep their FieldSums (sorted field
#: and target, prefix sums) and _Walks' copies (keys, prefix sums) within this many bytes.
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
    """A field ``v`` [N] and target ``t`` [N, 3] sorted by field value, with prefix sums of
    1, v, v^2, t and v t (v centred on its mean, so the sums keep their precision): the
    normal equations of any ordered set of positions from a binary search per position."""

    def __init__(self, v: np.ndarray, t: np.ndarray):
        order = np.argsort(v)  # ties in any order: their sums are the same
        self.v, self.t = v[order], t[order]
        self.centre = float(self.v.mean()) if v.size else 0.0
        d = self.v - self.centre
        prefix = np.empty((v.size + 1, 9))
        prefix[0] = 0.0
        prefix[1:, 0], prefix[1:, 1], prefix[1:, 2] = 1.0, d, d * d
        prefix[1:, 3:6], prefix[1:, 6:9] = self.t, d[:, None] * self.t
        self.prefix = np.cumsum(prefix, axis=0, out=prefix)
        self.tt = float(np.einsum("ij,ij->", t, t))

    def solve(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:func:`solve_colours` of these pixels for each row of ``positions`` [B, n]:
        colours [B, n, 3] and MSEs [B], from the sums where a row is in order (each
        position at least MIN_SPAN past the one before), per pixel otherwise."""
        return _solve_rounds([(self, np.atleast_2d(np.asarray(positions, np.float64)))])[0]

    def segments(self, q: np.ndarray) -> np.ndarray:
        """For rows of positions in order [m, n]: the sums over the pixels below the first,
        between each two and from the last on [m, n + 1, 9]."""
        m = len(q)
        edges = np.concatenate([np.zeros((m, 1), np.intp), np.searchsorted(self.v, q, side="left"),
                                np.full((m, 1), len(self.v))], axis=1)
        return self.prefix[edges[:, 1:]] - self.prefix[edges[:, :-1]]


def in_order(p: np.ndarray) -> np.ndarray:
    """Which rows of positions [B, n] are in order, each at least MIN_SPAN past the last."""
    return np.all(np.diff(p, axis=1) >= MIN_SPAN, axis=1)


def _solve_segments(seg: np.ndarray, q: np.ndarray, centre, tt, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Colours [m, n, 3] and MSEs [m] of rows of ordered positions q [m, n] from their
    segment sums (FieldSums.segments); ``centre`` and ``tt`` per row or one for all. Every
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
    the fields: their sorted values are one array of complex numbers, the field's index
    the real part and the value the imaginary, which sort and search lexicographically, so
    one searchsorted finds every trial's pixels in its own field exactly."""

    def __init__(self, sums: Sequence[FieldSums], starts: np.ndarray):
        self.sums, m = sums, len(sums)
        sizes = np.array([len(f.v) for f in sums])
        self.first = np.concatenate([[0], np.cumsum(sizes)[:-1]])   # each field's block of keys
        self.keys = np.empty(int(sizes.sum()), complex)
        self.keys.real = np.repeat(np.arange(m), sizes)
        self.keys.imag = np.concatenate([f.v for f in sums])
        self.prefix = np.concatenate([f.prefix for f in sums])
        self.first_prefix = self.first + np.arange(m)                # prefix blocks hold a row more
        self.sizes, self.size = sizes, sums[0].t.size
        self.centre, self.tt = np.array([f.centre for f in sums]), np.array([f.tt for f in sums])
        self.best = np.array(starts, np.float64)
        solved = _solve_rounds([(f, p[None]) for f, p in zip(sums, self.best)])
        self.colours = np.stack([c[0] for c, _ in solved])
        self.mse = np.array([e[0] for _, e in solved])
        self.span = np.array([max(1e-6, float(f.v[-1] - f.v[0])) if len(f.v) else 1e-6 for f in sums])
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
        n = trials.shape[2]
        ordered = in_order(trials.reshape(-1, n)).reshape(trials.shape[:2])
        mses = np.full(trials.shape[:2], np.inf)
        colours = np.zeros((*trials.shape, 3))
        row, col = np.nonzero(ordered)
        if len(row):
            q, field = trials[row, col], live[row]
            keys = np.empty(q.shape, complex)
            keys.real, keys.imag = field[:, None], q
            below = np.searchsorted(self.keys, keys, side="left") - self.first[field][:, None]
            edges = np.concatenate([np.zeros((len(q), 1), np.intp), below, self.sizes[field][:, None]], axis=1)
            edges += self.first_prefix[field][:, None]
            seg = self.prefix[edges[:, 1:]] - self.prefix[edges[:, :-1]]
            colours[row, col], mses[row, col] = _solve_segments(seg, q, self.centre[field], self.tt[field], self.size)
        for i, k in zip(*np.nonzero(tried & ~ordered)):  # a start out of order: per pixel
            f = self.sums[live[i]]
            colours[i, k], mses[i, k] = solve_colours(f.v, f.t, trials[i, k])
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
    for at in range(0, len(flat), side_by_side):
        chunk = range(at, min(len(flat), at + side_by_side))
        sums = {i: FieldSums(flat[i], t) for i in chunk}
        for n in sorted({len(starts[i]) for i in chunk}):
            members = [i for i in chunk if len(starts[i]) == n]
            found = _Walks([sums[i] for i in members], np.stack([starts[i] for i in members])).run()
            for i, result in zip(members, found):
                out[i] = result
    return out


def _solve_rounds(rows: Sequence[tuple[FieldSums, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """FieldSums.solve of each field's trial positions [B, n]: the rows in order of every
    field with the same stop count solved in one batch, the others per pixel."""
    out = []
    batches: dict[int, list[tuple[int, np.ndarray, np.ndarray, FieldSums]]] = {}
    for sums, trials in rows:
        colours, mses = np.zeros((len(trials), trials.shape[1], 3)), np.zeros(len(trials))
        ordered = in_order(trials)
        for i in np.flatnonzero(~ordered):
            colours[i], mses[i] = solve_colours(sums.v, sums.t, trials[i])
        out.append((colours, mses))
        if ordered.any():
            batches.setdefault(trials.shape[1], []).append((len(out) - 1, ordered, trials[ordered], sums))
    for group in batches.values():
        q = np.concatenate([rows_q for _, _, rows_q, _ in group])
        seg = np.concatenate([sums.segments(rows_q) for _, _, rows_q, sums in group])
        centre = np.concatenate([np.full(len(rows_q), sums.centre) for _, _, rows_q, sums in group])
        tt = np.concatenate([np.full(len(rows_q), sums.tt) for _, _, rows_q, sums in group])
        c, m = _solve_segments(seg, q, centre, tt, group[0][3].t.size)
        at = 0
        for index, ordered, rows_q, _ in group:
            colours, mses = out[index]
            colours[ordered], mses[ordered] = c[at:at + len(rows_q)], m[at:at + len(rows_q)]
            at += len(rows_q)
    return out


def with_ramp(structure: Node, values: np.ndarray, positions: np.ndarray, colours: np.ndarray) -> np.ndarray:
    """``values`` with the root ramp's positions and colours replaced."""
    n = int(structure.attr["stops"])
    out = np.asarray(values, np.float64).copy()
    out[:n] = positions
    out[n:4 * n] = np.asarray(colours).reshape(-1)
    return out
