"""Where in an infinite noise field, and at which frequency, a target was drawn.

A noise lattice is hashed by integer cell, so a noise primitive's offset selects which part
of an unbounded field the image shows: gradients cannot find it (every wrong offset is as
good as another), a search over it can. This module holds numpy twins of the noise
primitives of primitives.slang (the same integer hashes, so the same values up to float
rounding; tests/test_procedural.py checks them against the shader) and locates the
target's luminance in a large window of each field, at each whole frequency, by
normalised cross-correlation through the FFT. The fit then refines what it found (and
the snapping phase rounds it), as for any other starting point.

It also reads radial structure (rings about a centre) for a polar proposal: the centre
from the image's point symmetry, the ring frequency from the radial profile.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bakery.baselines.resample import downsample_area

_MASK = 0xFFFFFFFF
TAU = 2.0 * np.pi

#: Samples per noise cell in the correlation (offsets are found to 1 / SAMPLES of a cell,
#: then refined by the fit) and the window of cells searched (offsets in [ORIGIN, ORIGIN + WINDOW)).
SAMPLES = 4
WINDOW = 64
ORIGIN = -8
#: Whole frequencies tried (noise cells across the image).
FREQUENCIES = tuple(range(2, 25))


# -- numpy twins of the lattice noise --------------------------------------------------------
def lattice_hash(cell: np.ndarray, salt: int) -> np.ndarray:
    """bk_lattice_hash of the integer cells ``cell[..., 2]`` (uint32 arithmetic)."""
    c = np.floor(cell).astype(np.int64) & _MASK
    h = (c[..., 0] * 747796405 + 2891336453) & _MASK
    h = (h ^ ((c[..., 1] * 2246822519) & _MASK)) ^ salt
    h = (h * 277803737) & _MASK
    h = (h >> 16) ^ h
    h = (h * 2654435761) & _MASK
    return (h >> 15) ^ h


def lattice_value(cell: np.ndarray, salt: int) -> np.ndarray:
    return (lattice_hash(cell, salt) >> 8).astype(np.float64) * (1.0 / 16777216.0)


def _wrap(cell: np.ndarray, period: float) -> np.ndarray:
    return cell - period * np.floor(cell / period) if period > 0 else cell


def value_noise(p: np.ndarray, period: float = 0.0) -> np.ndarray:
    i = np.floor(p)
    f = p - i
    u = f * f * (3.0 - 2.0 * f)
    corner = [lattice_value(_wrap(i + d, period), 17) for d in ((0, 0), (1, 0), (0, 1), (1, 1))]
    top = corner[0] + (corner[1] - corner[0]) * u[..., 0]
    bottom = corner[2] + (corner[3] - corner[2]) * u[..., 0]
    return top + (bottom - top) * u[..., 1]


def gradient_noise(p: np.ndarray, period: float = 0.0) -> np.ndarray:
    i = np.floor(p)
    f = p - i
    u = f * f * f * (f * (f * 6.0 - 15.0) + 10.0)
    dots = []
    for d in ((0, 0), (1, 0), (0, 1), (1, 1)):
        a = TAU * lattice_value(_wrap(i + d, period), 0x9E3779B9)
        dots.append(np.cos(a) * (f[..., 0] - d[0]) + np.sin(a) * (f[..., 1] - d[1]))
    top = dots[0] + (dots[1] - dots[0]) * u[..., 0]
    bottom = dots[2] + (dots[3] - dots[2]) * u[..., 0]
    return 0.5 + 0.7 * (top + (bottom - top) * u[..., 1])


def fbm(p: np.ndarray, octaves: int, basis: str, gain: float, period: float = 0.0) -> np.ndarray:
    noise = value_noise if basis == "value" else gradient_noise
    total, norm, amplitude = 0.0, 0.0, 1.0
    for _ in range(int(octaves)):
        total = total + amplitude * noise(p, period)
        norm += amplitude
        amplitude *= gain
        p = p * 2.0 + np.array([19.19, 7.13])
        period *= 2.0
    return total / norm


def worley(p: np.ndarray, jitter: float, period: float = 0.0) -> np.ndarray:
    i = np.floor(p)
    best = np.full(p.shape[:-1], 4.0)
    for y in (-1, 0, 1):
        for x in (-1, 0, 1):
            cell = i + np.array([x, y], np.float64)
            ident = _wrap(cell, period)
            h = np.stack([lattice_value(ident, 101), lattice_value(ident, 202)], axis=-1)
            d = p - (cell + 0.5 + jitter * (h - 0.5))
            best = np.minimum(best, np.sqrt((d * d).sum(axis=-1) + 1e-12))
    return best


def field(op: str, p: np.ndarray, attrs: dict, params: dict, period: float = 0.0) -> np.ndarray:
    """The noise leaf ``op`` at lattice points ``p[..., 2]`` (frequency and offset applied)."""
    if op == "value_noise":
        return value_noise(p, period)
    if op == "gradient_noise":
        return gradient_noise(p, period)
    if op == "fbm":
        return fbm(p, attrs.get("octaves", 4), attrs.get("basis", "gradient"), params.get("gain", 0.5), period)
    if op == "worley":
        return worley(p, params.get("jitter", 1.0), period)
    raise ValueError(op)


# -- locating a field ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Location:
    frequency: float
    offset: tuple[float, float]
    score: float                # normalised cross-correlation (its magnitude: a ramp may run either way)


def _fast_size(n: int) -> int:
    """The next power of two at or above n (a fast FFT length)."""
    return 1 << max(0, int(n - 1).bit_length())


class Correlator:
    """Normalised cross-correlation of templates at every valid position in one window
    (the window's spectrum and running sums computed once, for every template)."""

    def __init__(self, window: np.ndarray, largest_template: int):
        self.window = np.asarray(window, np.float64)
        side = _fast_size(max(self.window.shape) + largest_template)
        self.shape = (side, side)
        self.spectrum = np.fft.rfft2(self.window, self.shape)
        self.sums = (np.pad(self.window, ((1, 0), (1, 0))).cumsum(0).cumsum(1),
                     np.pad(self.window ** 2, ((1, 0), (1, 0))).cumsum(0).cumsum(1))

    def __call__(self, template: np.ndarray) -> np.ndarray:
        mh, mw = template.shape
        wh, ww = self.window.shape
        t = template - template.mean()
        tn = np.sqrt((t * t).sum()) + 1e-12
        num = np.fft.irfft2(self.spectrum * np.fft.rfft2(t[::-1, ::-1], self.shape), self.shape)
        num = num[mh - 1:wh, mw - 1:ww]
        s1, s2 = (s[mh:, mw:] - s[:-mh, mw:] - s[mh:, :-mw] + s[:-mh, :-mw] for s in self.sums)
        var = np.maximum(s2 - s1 * s1 / (mh * mw), 0.0)
        return num / (np.sqrt(var) * tn + 1e-12)


def correlate(window: np.ndarray, template: np.ndarray) -> np.ndarray:
    """Normalised cross-correlation of ``template`` at every valid position in ``window``."""
    return Correlator(window, max(template.shape))(template)


def _peak(ncc: np.ndarray) -> tuple[float, float, float]:
    """Position (row, column, sub-sample by a parabola through the neighbours) and value
    of the largest |ncc|."""
    a = np.abs(ncc)
    r, c = np.unravel_index(int(np.argmax(a)), a.shape)
    out = [float(r), float(c)]
    for axis, (i, j) in enumerate(((r, c), (r, c))):
        idx = [i, j]
        if 0 < idx[axis] < a.shape[axis] - 1:
            lo, hi = list(idx), list(idx)
            lo[axis] -= 1
            hi[axis] += 1
            y0, y1, y2 = a[tuple(lo)], a[i, j], a[tuple(hi)]
            d = y0 - 2 * y1 + y2
            if d < 0:
                out[axis] += float(np.clip(0.5 * (y0 - y2) / d, -0.5, 0.5))
    return out[0], out[1], float(a[r, c])


def locate(luma: np.ndarray, op: str, attrs: dict, params: dict, *, frequencies=FREQUENCIES,
           tile: bool = False) -> Location | None:
    """The whole frequency and offset at which the noise leaf ``op`` (other parameters in
    ``params``) best matches ``luma`` (the target's luminance, any monotone ramp of it)."""
    return locate_field(luma, lambda p, period: field(op, p, attrs, params, period), frequencies=frequencies,
                        tile=tile)


def locate_field(image: np.ndarray, sample, *, frequencies=FREQUENCIES, tile: bool = False) -> Location | None:
    """The whole frequency and offset at which ``sample(p, period)`` (a field over lattice
    points) best matches ``image`` (up to an affine map of its values)."""
    h, w = image.shape
    best, unbounded = None, None
    for f in frequencies:
        m = f * SAMPLES
        if m > min(h, w) or m < 8:
            continue
        template = downsample_area(image[:, :, None].astype(np.float32), m, m)[:, :, 0].astype(np.float64)
        if np.ptp(template) < 1e-6:
            continue
        # With a tiling lattice, offsets repeat every f cells: a window of 2f holds them all.
        cells = 2 * f if tile else WINDOW
        origin = 0.0 if tile else float(ORIGIN)
        g = (np.arange(cells * SAMPLES) + 0.5) / SAMPLES + origin
        if tile:
            ncc = correlate(sample(np.stack(np.meshgrid(g, g), axis=-1), float(f)), template)
        else:  # the same window for every frequency
            if unbounded is None:
                unbounded = Correlator(sample(np.stack(np.meshgrid(g, g), axis=-1), 0.0),
                                       max(frequencies) * SAMPLES)
            ncc = unbounded(template)
        r, c, score = _peak(ncc)
        # Template sample j sits at p = (j + 0.5) / SAMPLES + offset; window sample at
        # (k + 0.5) / SAMPLES + origin: a match at k = d + j means offset = origin + d / SAMPLES.
        loc = Location(float(f), (origin + c / SAMPLES, origin + r / SAMPLES), score)
        if best is None or loc.score > best.score:
            best = loc
    return best


#: bk_warp's second displacement reads the noise this far away (cells).
WARP_SECOND = np.array([31.7, 11.3])


def warp_displacement(p: np.ndarray, k: np.ndarray, period: float = 0.0) -> np.ndarray:
    """What a noise warp (bk_warp, amplitude 1) adds to dot(uv, k) at lattice points p."""
    return (k[0] * (gradient_noise(p, period) - 0.5) + k[1] * (gradient_noise(p + WARP_SECOND, period) - 0.5))


@dataclass(frozen=True)
class WarpedStripes:
    k: tuple[float, float]
    phase: float
    frequency: float
    amplitude: float
    offset: tuple[float, float]
    score: float


def warped_stripes(luma: np.ndarray, carrier: tuple[float, float], *, tile: bool = False) -> WarpedStripes | None:
    """Sine stripes of frequency ``carrier`` (cycles per uv) under a noise warp: the local
    phase of the stripes read by complex demodulation (the image times the carrier's
    conjugate wave, low-passed), the warp's noise located in that phase's wander
    (locate_field over the displacement bk_warp draws), amplitude and phase by least squares."""
    h, w = luma.shape
    k = np.asarray(carrier, np.float64)
    if np.hypot(*k) < 1.0:
        return None
    v, u = np.mgrid[0:h, 0:w]
    uv = np.stack([(u + 0.5) / w, (v + 0.5) / h], axis=-1)
    z = (luma - luma.mean()) * np.exp(-1j * TAU * (uv @ k))
    # Low-pass below half the carrier: keeps the slow phase, drops the wave at twice it.
    fy = np.fft.fftfreq(h, 1.0 / h)[:, None]
    fx = np.fft.fftfreq(w, 1.0 / w)[None, :]
    sigma = 0.5 * np.hypot(*k)
    z = np.fft.ifft2(np.fft.fft2(z) * np.exp(-0.5 * (fx ** 2 + fy ** 2) / sigma ** 2))
    wander = np.angle(z * np.conj(z.mean())) / TAU   # phase about its mean, in turns
    loc = locate_field(wander, lambda p, period: warp_displacement(p, k, period), tile=tile)
    if loc is None:
        return None
    p = uv * loc.frequency + np.array(loc.offset)
    disp = warp_displacement(p, k, loc.frequency if tile else 0.0)
    a = np.stack([disp.reshape(-1), np.ones(disp.size)], axis=1)
    (amplitude, _), *_ = np.linalg.lstsq(a, wander.reshape(-1), rcond=None)
    # luma ~ a + b sin(2 pi (k.uv + phase + amplitude * disp)): the phase by least squares
    # for the warped argument (the sign of b is the ramp's to carry).
    t = TAU * (uv @ k + amplitude * disp)
    basis = np.stack([np.sin(t).reshape(-1), np.cos(t).reshape(-1), np.ones(t.size)], axis=1)
    (sa, ca, _), *_ = np.linalg.lstsq(basis, luma.reshape(-1), rcond=None)
    phase = float(np.arctan2(ca, sa) / TAU) % 1.0
    return WarpedStripes((float(k[0]), float(k[1])), phase, loc.frequency, float(amplitude), loc.offset, loc.score)


def threshold_level(luma: np.ndarray, op: str, attrs: dict, params: dict, loc: Location, tile: bool) -> float:
    """The level at which the located field, thresholded, covers as much of the image as
    the target's bright part (pixels above the middle of its luminance range)."""
    h, w = luma.shape
    v, u = np.mgrid[0:h, 0:w]
    uv = np.stack([(u + 0.5) / w, (v + 0.5) / h], axis=-1)
    p = uv * loc.frequency + np.array(loc.offset)
    vals = field(op, p, attrs, params, loc.frequency if tile else 0.0)
    bright = luma > 0.5 * (luma.min() + luma.max())
    # The threshold may run either way under the ramp: take the side the field agrees with.
    share = bright.mean()
    if np.corrcoef(vals.reshape(-1), bright.reshape(-1))[0, 1] < 0:
        share = 1.0 - share
    return float(np.quantile(vals, 1.0 - share))


# -- radial structure ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rings:
    center: tuple[float, float]
    frequency: float            # cycles per uv of radius
    phase: float
    explained: float            # share of the luminance variance the radial profile explains


def rings(luma: np.ndarray) -> Rings | None:
    """Rings about a centre: the centre where the image best matches itself turned half a
    turn (the peak of its self-convolution, at twice the centre), the frequency and phase
    of a sine through its radial profile."""
    h, w = luma.shape
    x = luma - luma.mean()
    if float((x * x).sum()) < 1e-9:
        return None
    shape = (2 * h, 2 * w)
    spec = np.fft.rfft2(x, shape)
    conv = np.fft.irfft2(spec * spec, shape)
    r, c = np.unravel_index(int(np.argmax(conv)), conv.shape)
    # conv[k] peaks at k = 2 * centre in pixel indices (index i at uv (i + 0.5) / size).
    center = ((c / 2.0 + 0.5) / w, (r / 2.0 + 0.5) / h)
    v, u = np.mgrid[0:h, 0:w]
    rad = np.hypot((u + 0.5) / w - center[0], (v + 0.5) / h - center[1])
    bins = np.minimum((rad * max(h, w)).astype(int), max(h, w))
    counts = np.bincount(bins.reshape(-1))
    sums = np.bincount(bins.reshape(-1), x.reshape(-1))
    profile = sums / np.maximum(counts, 1)
    explained = 1.0 - float(((x - profile[bins]) ** 2).sum() / (x * x).sum())
    # The profile over the radii a full circle covers (up to the nearest edge).
    reach = int(min(center[0], 1 - center[0], center[1], 1 - center[1]) * max(h, w))
    if reach < 8:
        return None
    prof = profile[:reach]
    radii = (np.arange(reach) + 0.5) / max(h, w)
    power = np.abs(np.fft.rfft(prof - prof.mean(), 8 * reach))
    k = int(np.argmax(power[1:])) + 1
    freq = k / (8 * reach) * max(h, w)
    basis = np.stack([np.sin(TAU * freq * radii), np.cos(TAU * freq * radii), np.ones(reach)], axis=1)
    (a, b, _), *_ = np.linalg.lstsq(basis, prof, rcond=None)
    # a sin(t) + b cos(t) = A sin(t + phi), phi = atan2(b, a), in turns.
    phase = float(np.arctan2(b, a) / TAU) % 1.0
    return Rings(center, float(freq), phase, explained)


# -- proposals --------------------------------------------------------------------------------------
#: Noise leaves located by correlation, with the values of their other parameters tried.
NOISE_LEAVES = {"value_noise": ({},), "gradient_noise": ({},),
                "fbm": ({"gain": 0.5},), "worley": ({"jitter": 0.6}, {"jitter": 0.8}, {"jitter": 1.0})}
#: A located noise is proposed from this correlation on (chance matches of a small
#: template in the large window reach about 0.5).
NOISE_SCORE = 0.7
#: A radial profile explaining at least this share of the variance earns a polar proposal.
RINGS_EXPLAINED = 0.5


def _ramp(child, stops: int = 2):
    from bakery.stages.procedural.dsl import Node
    return Node("ramp", (child,), (("stops", stops),), ())


def proposals(target: np.ndarray, *, tile: bool = False, carriers=()) -> list:
    """Structures with their field parameters read off ``target`` (its ramp's are left to
    the search's hints): each noise leaf where the correlation places it, the two plain
    noises also under a threshold at the target's coverage, sine stripes at one of the
    ``carriers`` (strong frequencies of the target) under the noise warp whose wander
    their phase shows, and rings about the image's centre of symmetry when its radial
    profile explains it."""
    from bakery.stages.procedural.dsl import OPS, Node

    rgb = np.asarray(target, np.float64)[:, :, :3]
    luma = rgb.mean(axis=2)
    out = []
    for op, tries in NOISE_LEAVES.items():
        attrs = {k: v[0] for k, v in OPS[op].attrs.items()}
        found = None
        for extra in tries:
            loc = locate(luma, op, attrs, extra, tile=tile)
            if loc is not None and (found is None or loc.score > found[0].score):
                found = (loc, extra)
        if found is None or found[0].score < NOISE_SCORE:
            continue
        loc, extra = found
        values = {"frequency": (loc.frequency,), "offset": loc.offset, **{k: (v,) for k, v in extra.items()}}
        params = tuple((p.name, tuple(float(x) for x in values[p.name])) for p in OPS[op].params)
        leaf = Node(op, (), tuple(attrs.items()), params)
        out.append(_ramp(leaf))
        if op in ("value_noise", "gradient_noise"):
            level = threshold_level(luma, op, attrs, extra, loc, tile)
            out.append(_ramp(Node("threshold", (leaf,), (), (("level", (level,)),))))
    found = [f for f in (warped_stripes(luma, c, tile=tile) for c in carriers) if f is not None]
    if found:
        best = max(found, key=lambda f: f.score)
        if best.score >= NOISE_SCORE:
            stripes = Node("stripes_sine", (), (), (("k", best.k), ("phase", (best.phase,))))
            warp = Node("warp", (stripes,), (), (("frequency", (best.frequency,)), ("amplitude", (best.amplitude,)),
                                                 ("offset", best.offset)))
            out.append(_ramp(warp))
    if not tile:  # polar coordinates do not tile
        found = rings(luma)
        if found is not None and found.explained >= RINGS_EXPLAINED:
            stripes = Node("stripes_sine", (), (), (("k", (0.0, found.frequency)), ("phase", (found.phase,))))
            polar = Node("polar", (stripes,), (), (("center", found.center), ("scale", (1.0,))))
            out.append(_ramp(polar))
    return out
