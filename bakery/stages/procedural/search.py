"""The structure search: a beam of the best programs, mutated generation by generation.

Each generation's new structures are fitted together (fit.py), each with several restarts:
restart 0 starts from the parent's parameters and hints read off the target (dominant
spatial frequencies, colour quantiles, the luminance slope), the others from random draws
around them. Score = image loss + complexity_weight * node count, image loss = pixel MSE
+ texture_weight * texture-statistics loss. Everything random comes from one seeded
generator, so a search is reproducible.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from bakery.baselines.resample import downsample_area
from bakery.imaging import psnr_from_mse
from bakery.stages.procedural import locate, ramps, texture_stats
from bakery.stages.procedural.dsl import (COLOUR_STEP, INTEGER, RATIONAL, Node, complexity, flatten, instructions,
                                          param_scales, param_snaps, periodic, with_params)
from bakery.stages.procedural.fit import FitConfig, JobResult, fit_jobs, render_jobs, screen_jobs


SCREEN_SIZE = 64
#: Starting points screened per structure at least (a wave warp's phase grid needs 16).
SCREEN_DRAWS = 16
#: The snapping phase judges snaps on the target at this size (at most).
SNAP_SIZE = 256
#: The search's ramp solves (Search._project) read fields at most this wide: a ramp's
#: stops and colours follow the field's values against the target's, which a small copy
#: holds, while the host's sorts, sums and read-backs grow with the area. A solve's
#: proposal replaces a fit only where it is better at the detail size (_better_ramps);
#: the polish solves at the detail size itself.
PROJECT_SIZE = 64
#: A ramp is solved before its structure's fit when that explains this share of the
#: target's variance (search.Search._project).
PROJECT_BEFORE_FIT = 0.5
#: Strongest frequencies of the target tried as the carrier of noise-warped stripes.
WARP_CARRIERS = 2
#: Each phase scanned after a fit, its ramp solved at every value (Search._better_ramps):
#: (values either side, step) per round, each round around the best of the one before.
PHASE_SCAN = ((8, 1 / 16), (8, 1 / 128), (8, 1 / 1024))
#: The polish's pattern-search steps (in units of each slot's ParamSpec.scale), and the
#: moves tried at each before the next, finer one.
POLISH_STEPS = (0.1, 0.03, 0.01, 0.003)
POLISH_ROUNDS = 4
#: Below this PSNR at the detail size the winner is a stochastic material's likeness, not
#: its copy: the refinement is restarted with the texture term weighted up by each of
#: STOCHASTIC_TEXTURE_WEIGHTS (Search.refine), and the runner-up at the detail size is
#: refined too, the image loss choosing.
STOCHASTIC_DB = 30.0
STOCHASTIC_TEXTURE_WEIGHTS = (2.0, 4.0)
#: There, image losses within this share of each other are a tie, broken by the texture
#: loss (Search.contrast): the search's own spread between seeds is several times larger.
STOCHASTIC_TIE = 0.01
#: At least this PSNR at the fit size, the search's best draws its target pixel for pixel
#: (a copy, which the refinement, polish and snap perfect) and the search may stop early
#: (Search.run): STOCHASTIC_DB with a margin, since a small fit size reads a photograph a
#: few dB closer than it is (a flat colour against a bricks albedo: 20.7 dB at 256^2, 24.2 at 48^2).
COPY_DB = STOCHASTIC_DB + 6.0
#: Spreads of the root ramp's colours about their mean tried there (Search.contrast).
CONTRAST_SCALES = (1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.4, 1.5)
#: A snap may raise the loss by this much: the MSE of rounding to 8 bits, (1/255)^2 / 12.
SNAP_FLOOR = 1.0 / (12 * 255 ** 2)
#: Denominators a person writes, simplest first: a snap takes the first that keeps the loss.
DENOMINATORS = {RATIONAL: (1, 2, 4, 5, 8, 10, 20, 100, 1000), COLOUR_STEP: (1, 2, 4, 5, 10, 20, 100, 255)}


def _at_most(image: np.ndarray, size: int) -> np.ndarray:
    """``image``, area-downsampled where it is wider than ``size``."""
    h, w = image.shape[:2]
    f = min(1.0, size / max(h, w))
    return image if f == 1.0 else np.ascontiguousarray(downsample_area(image, max(8, round(w * f)),
                                                                       max(8, round(h * f))))


def _keeps(new: float, old: float) -> bool:
    """Whether a snap keeps the loss: no rise beyond what 8-bit quantisation of the
    render adds anyway (SNAP_FLOOR), so a value a person would write wins over digits
    that only fit noise."""
    return new <= old + max(1e-6 * old, SNAP_FLOOR)


def _simplest(value: float, denominators: Sequence[int], tolerance: float) -> float:
    """The fraction with the smallest denominator within ``tolerance`` of ``value``."""
    for d in denominators:
        c = float(np.round(value * d) / d) + 0.0
        if abs(c - value) <= tolerance:
            return c
    return float(value)


def tiling(image: np.ndarray) -> tuple[bool, float]:
    """Whether ``image`` tiles: on each axis the step across the wrapped seam (last
    column to first, last row to first) is no larger than the largest step between
    neighbouring columns (rows) inside, and so is the change of slope there (second
    difference), so an edge on the border still counts as seamless while a gradient,
    unbounded noise or a mirror-symmetric pattern (equal edges, slopes that flip) does
    not. Returns the verdict and the worst ratio of seam to largest inner value (mean
    squared differences)."""
    img = np.asarray(image, np.float64)[:, :, :3]
    ratios = []
    for axis in (0, 1):
        a = np.moveaxis(img, axis, 0)
        wrapped = np.concatenate([a[-2:], a[:2]])  # ..., a[-2], a[-1] | a[0], a[1]
        for seam, inner in ((np.diff(wrapped, axis=0)[1:2], np.diff(a, axis=0)),
                            (np.diff(wrapped, 2, axis=0)[:2], np.diff(a, 2, axis=0))):
            s = float(np.max(np.mean(seam ** 2, axis=tuple(range(1, a.ndim)))))
            i = float(np.max(np.mean(inner ** 2, axis=tuple(range(1, a.ndim)))))
            ratios.append(s / max(i, 1e-8) if s > 1e-8 else 0.0)
    worst = max(ratios)
    return worst <= 1.25, worst


@dataclass(frozen=True)
class SearchConfig:
    generations: int = 3
    population: int = 12        # new structures fitted per generation
    beam: int = 3
    restarts: int = 4
    screen: int = 4             # starting points drawn per restart; the best are trained
    complexity_weight: float = 1e-4
    fit: FitConfig = field(default_factory=FitConfig)
    refine_steps: int = 0       # a longer final fit of the winner (0: none)
    snap: bool = True           # snap the winner's parameters to values a person would write
    tile: bool = False          # the target tiles: periodic programs only, whole frequencies


@dataclass
class Candidate:
    program: Node               # with fitted parameters
    pixel_mse: float
    texture_loss: float
    loss: float                 # image loss
    score: float                # loss + complexity_weight * nodes
    nodes: int
    instructions: int
    generation: int
    origin: str

    def summary(self) -> dict:
        return {"nodes": self.nodes, "instructions": self.instructions, "loss": self.loss,
                "pixel_mse": self.pixel_mse, "texture_loss": self.texture_loss, "score": self.score,
                "generation": self.generation, "origin": self.origin}


class Hints:
    """What initial parameters can read off the target."""

    def __init__(self, target: np.ndarray):
        rgb = np.asarray(target, np.float64)[:, :, :3]
        self.height, self.width = rgb.shape[:2]
        luma = rgb.mean(axis=2)
        self.mean_colour = rgb.reshape(-1, 3).mean(axis=0)
        order = np.argsort(luma.reshape(-1), kind="stable")
        self._sorted = rgb.reshape(-1, 3)[order]
        power = np.abs(np.fft.fft2(luma - luma.mean())) ** 2
        ky = np.fft.fftfreq(self.height, 1.0 / self.height)
        kx = np.fft.fftfreq(self.width, 1.0 / self.width)
        half = (ky[:, None] > 0) | ((ky[:, None] == 0) & (kx[None, :] > 0))
        power = np.where(half, power, 0.0)
        top = np.argsort(-power.reshape(-1), kind="stable")[:6]
        self.peaks = [(float(kx[i % self.width]), float(ky[i // self.width])) for i in top] or [(4.0, 0.0)]
        # A phase-modulated (warped) stripe pattern shows sidebands carrier +- modulation
        # rather than its carrier: each pair of strong peaks, read both ways round.
        self.pairs = []
        for i, a in enumerate(self.peaks[:4]):
            for b in self.peaks[i + 1:4]:
                for sign in (-1.0, 1.0):
                    carrier = ((a[0] + sign * b[0]) / 2, (a[1] + sign * b[1]) / 2)
                    modulation = ((a[0] - sign * b[0]) / 2, (a[1] - sign * b[1]) / 2)
                    if np.hypot(*carrier) >= 1.0 and np.hypot(*modulation) >= 0.5:
                        self.pairs.append((carrier, modulation))
        # Luminance slope: field = dot(uv, k) + offset spans the target's range as [0, 1].
        v, u = np.mgrid[0:self.height, 0:self.width]
        a = np.stack([(u.reshape(-1) + 0.5) / self.width, (v.reshape(-1) + 0.5) / self.height,
                      np.ones(u.size)], axis=1)
        coef, *_ = np.linalg.lstsq(a, luma.reshape(-1), rcond=None)
        span = max(1e-3, float(np.ptp(luma)))
        self.slope = (coef[0] / span, coef[1] / span, (coef[2] - luma.min()) / span)

    def colours(self, n: int) -> np.ndarray:
        """Mean colour of each of ``n`` luminance quantile bins, darkest first."""
        bins = np.array_split(self._sorted, n)
        return np.stack([b.mean(axis=0) for b in bins])


def initial_values(node: Node, hints: Hints, rng: np.random.Generator, restart: int) -> dict:
    """Parameter values (shader units) for one node that carries none."""
    op = node.op
    peak = hints.peaks[restart % len(hints.peaks)]
    if restart >= len(hints.peaks):
        peak = (peak[0] * rng.uniform(0.8, 1.25), peak[1] * rng.uniform(0.8, 1.25))
    radial = max(1.0, float(np.hypot(*peak)))
    if op == "linear_gradient":
        if restart == 0:
            return {"k": hints.slope[:2], "offset": hints.slope[2:]}
        a = rng.uniform(0, 2 * np.pi)
        m = rng.uniform(0.5, 1.5)
        return {"k": (m * np.cos(a), m * np.sin(a)), "offset": (rng.uniform(-0.5, 0.5),)}
    if op == "radial_gradient":
        c = (0.5, 0.5) if restart == 0 else tuple(rng.uniform(0.2, 0.8, 2))
        return {"center": c, "scale": (rng.uniform(1.0, 2.0),), "offset": (0.0,)}
    # Edges give gradients only where they lie, so offsets start on a grid the screening
    # walks (draw r: a 4 x 4 grid of cell fractions), not at random.
    grid = ((restart % 4) / 4.0, (restart // 4 % 4) / 4.0)
    if op in ("stripes_sine", "stripes_saw", "stripes_triangle"):
        return {"k": peak, "phase": ((restart % 16) / 16.0,)}
    if op == "checker":
        f = 2.0 * max(abs(peak[0]), abs(peak[1]))
        return {"frequency": (f,), "offset": grid}
    if op in ("bricks", "brick_cells"):
        # The fundamental along each axis: the smallest non-zero frequency among the peaks.
        fx = min([abs(k[0]) for k in hints.peaks if k[0]] or [4.0])
        fy = min([abs(k[1]) for k in hints.peaks if k[1] and not k[0]] or [abs(k[1]) for k in hints.peaks if k[1]]
                 or [8.0])
        count = (fx, fy) if restart == 0 else (fx * rng.choice([0.5, 1, 1, 2]), fy * rng.choice([0.5, 1, 1, 2]))
        count = (max(1.0, count[0]), max(1.0, count[1]))
        return {"count": count, "offset": grid, "mortar": (0.1 / max(count),),
                "amount": (0.3,)}
    if op in ("value_noise", "gradient_noise"):
        f = radial if restart % 2 == 0 else float(np.exp(rng.uniform(np.log(2), np.log(16))))
        return {"frequency": (min(f, 32.0),), "offset": tuple(rng.uniform(0, 8, 2))}
    if op == "fbm":
        f = min(radial, 16.0) if restart % 2 == 0 else float(np.exp(rng.uniform(np.log(2), np.log(8))))
        return {"frequency": (f,), "gain": (0.5,), "offset": tuple(rng.uniform(0, 8, 2))}
    if op in ("worley", "worley_cells"):
        f = min(radial, 16.0) if restart % 2 == 0 else rng.uniform(3, 10)
        return {"frequency": (f,), "jitter": (rng.uniform(0.6, 1.0),), "offset": tuple(rng.uniform(0, 8, 2)),
                "amount": (0.3,)}
    if op == "polar":
        jitter = (0, 0) if restart == 0 else rng.normal(0, 0.05, 2)
        return {"center": (0.5 + jitter[0], 0.5 + jitter[1]), "scale": (1.0,)}
    if op == "warp":
        return {"frequency": (rng.uniform(2, 6),), "amplitude": (rng.uniform(0.03, 0.15),),
                "offset": tuple(rng.uniform(0, 8, 2))}
    if op in ("warp_sine", "warp_triangle"):
        # A wave across one axis displacing along the other (restarts 0 and 1 try both).
        axis = restart % 2 if restart < 2 else int(rng.integers(2))
        m = 2.0 if restart < 2 else float(rng.integers(1, 5))
        a = 0.05 if restart < 2 else float(rng.uniform(0.02, 0.1))
        k, amp = ((0.0, m), (a, 0.0)) if axis == 0 else ((m, 0.0), (0.0, a))
        return {"k": k, "amplitude": amp, "phase": (0.0 if restart < 2 else rng.uniform(0, 1),)}
    if op == "threshold":
        return {"level": (0.5 + (0 if restart == 0 else rng.uniform(-0.2, 0.2)),)}
    if op == "ramp":
        n = int(node.attr["stops"])
        cols = hints.colours(n)
        if restart > 0:
            # A ramp need not run dark to light: later draws try the stops in every order
            # (the fit cannot carry one colour past another).
            orders = list(itertools.permutations(range(n)))
            cols = cols[list(orders[restart % len(orders)])]
            cols = np.clip(cols + rng.normal(0, 0.05, cols.shape), 0, 1)
        return {"positions": tuple(np.linspace(0, 1, n)), "colours": tuple(cols.reshape(-1))}
    if op == "constant":
        return {"colour": tuple(hints.mean_colour)}
    return {}


def initialise(program: Node, hints: Hints, rng: np.random.Generator, restart: int) -> np.ndarray:
    """Layout-order parameters: a node's own where it has them, hints/random otherwise."""

    def fill(n: Node) -> Node:
        if (n.op in ("warp_sine", "warp_triangle") and not n.params and n.inputs[0].op.startswith("stripes_")
                and hints.pairs):
            # Stripes under a new wave warp: carrier and modulation from a pair of sidebands
            # (the stripes' own fitted frequency is usually one sideband: replaced).
            # Draws walk a 4 x 4 grid of the two phases (the fit cannot cross a half-turn of
            # the warp's), then the next reading of the sidebands; screening picks.
            carrier, modulation = hints.pairs[(restart // 16) % len(hints.pairs)]
            c2 = max(1e-6, carrier[0] ** 2 + carrier[1] ** 2)
            child = n.inputs[0]
            stripes = child.replace(params=(("k", tuple(carrier)), ("phase", ((restart % 16) // 4 / 4.0,))))
            warp = (("k", tuple(modulation)), ("amplitude", (0.3 * carrier[0] / c2, 0.3 * carrier[1] / c2)),
                    ("phase", (restart % 4 / 4.0,)))
            return n.replace(inputs=(stripes,), params=warp)
        inputs = tuple(fill(c) for c in n.inputs)
        if len(n.params) == len(n.spec.params):
            return n.replace(inputs=inputs)
        values = initial_values(n, hints, rng, restart)
        params = tuple((p.name, tuple(float(x) for x in values[p.name])) for p in n.spec.params)
        return n.replace(inputs=inputs, params=params)

    return flatten(fill(program))


def _orient_ramp(structure: Node, values: np.ndarray, corr: float) -> np.ndarray:
    """A root ramp whose colours run against the target (negative correlation) starts
    with them reversed: otherwise the fit drags the geometry out of alignment while the
    colours swap over."""
    if structure.op != "ramp" or corr >= 0.0:
        return values
    n = int(structure.attr["stops"])
    out = values.copy()
    out[n:4 * n] = values[n:4 * n].reshape(n, 3)[::-1].reshape(-1)
    return out


def _phase_slots(structure: Node) -> list[int]:
    """Layout indices of the phases (of stripes and wave warps: a period of 1)."""
    out, i = [], 0
    for n in structure.walk():
        for p in n.spec.params:
            k = p.count(n.attr)
            if p.name == "phase":
                out += list(range(i, i + k))
            i += k
    return out


def pareto_front(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The candidates no other beats on both loss and node count, by node count."""
    best: dict[int, Candidate] = {}
    for c in candidates:
        if c.nodes not in best or c.loss < best[c.nodes].loss:
            best[c.nodes] = c
    front, low = [], float("inf")
    for n in sorted(best):
        if best[n].loss < low:
            front.append(best[n])
            low = best[n].loss
    return front


class Search:
    def __init__(self, device, target: np.ndarray, config: SearchConfig, builtin, command=None, *, seed: int = 0,
                 log=None, progress=None, detail: np.ndarray | None = None):
        """``target`` is what the structures are fitted to; ``detail`` (default: the
        target) a sharper copy the snapping phase judges at, at most SNAP_SIZE wide."""
        self.device, self.config = device, config
        if config.tile:
            self.config = config = SearchConfig(**{**config.__dict__, "fit": FitConfig(**{**config.fit.__dict__,
                                                                                          "tile": True})})
        self.target = np.ascontiguousarray(np.asarray(target, np.float32)[:, :, :3])
        detail = self.target if detail is None else np.asarray(detail, np.float32)[:, :, :3]
        self.detail = np.ascontiguousarray(_at_most(detail, SNAP_SIZE))
        self.detail_stats = texture_stats.statistics(self.detail)
        self.snaps: dict = {}
        self.target_stats = texture_stats.statistics(self.target)
        self.hints = Hints(self.target)
        # Screening only ranks starting points: a small copy of the target is enough.
        self.screen_target = _at_most(self.target, SCREEN_SIZE)
        self.solve_target, self.solve_detail = (_at_most(image, PROJECT_SIZE) for image in (self.target, self.detail))
        self.builtin, self.command = builtin, command
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.log, self.progress = log, progress
        self.evaluated: dict[str, Candidate] = {}
        self.generations_run = 0

    def _fit(self, programs: Sequence[tuple[Node, str]], generation: int, fit: FitConfig,
             detail: bool = False) -> list[Candidate]:
        """Fits ``programs`` (restarts each, one batch); ``detail`` fits at the detail
        size instead (the final refinement, so parameters are exact at full size)."""
        target, stats = (self.detail, self.detail_stats) if detail else (self.target, self.target_stats)
        solve_at = self.solve_detail if detail else self.solve_target
        structures = [p.structure() for p, _ in programs]
        fit = FitConfig(**{**fit.__dict__, "seed": (self.seed * 1000003 + generation) & 0xFFFFFFFF})
        restarts = self.config.restarts
        draws = 1 if restarts == 1 else max(restarts * max(1, self.config.screen),
                                            SCREEN_DRAWS if self.config.screen > 1 else 1)
        jobs = [(s, initialise(p, self.hints, self.rng, r)) for s, (p, _) in enumerate(programs) for r in range(draws)]
        if draws > restarts:
            # Screen many starting points cheaply; train the first (hinted/inherited) one
            # and the best of the rest.
            corr = screen_jobs(self.device, self.screen_target, structures, jobs, fit)
            distance = (1.0 - np.abs(corr)).reshape(len(programs), draws)
            keep = [s * draws + r for s in range(len(programs))
                    for r in [0] + sorted(range(1, draws), key=lambda r: (distance[s, r], r))[: restarts - 1]]
            jobs = [(jobs[i][0], _orient_ramp(structures[jobs[i][0]], jobs[i][1], corr[i])) for i in keep]
        # Where the field of a structure's first start already explains most of the target,
        # the same start with its ramp solved is fitted as well (an extra job: solved
        # colours can also hold a misplaced edge in place, fading towards the mean where it
        # is wrong); after the fit every ramp is solved where that helps.
        first = {}
        for s, values in jobs:
            first.setdefault(s, values)
        starts = [(s, v) for s, v in first.items()]
        # (Colours only: stop positions searched at the fit size can squeeze a ramp into an
        # anti-aliased edge, sharper there and blurred at full size.)
        solved, _ = self._project(solve_at, structures, starts, min_explained=PROJECT_BEFORE_FIT, search=False)
        jobs = list(jobs) + [j for j, (_, v) in zip(solved, starts) if not np.array_equal(j[1], v)]
        results = self._better_ramps(target, stats, solve_at, structures,
                                     fit_jobs(self.device, target, stats, structures, jobs, fit), fit)
        best: dict[int, Candidate] = {}
        for r in results:
            program, origin = programs[r.structure]
            loss = r.pixel_mse + fit.texture_weight * r.texture_loss
            nodes = complexity(program)
            c = Candidate(with_params(program.structure(), r.params), r.pixel_mse, r.texture_loss, loss,
                          loss + self.config.complexity_weight * nodes, nodes, instructions(program), generation,
                          origin)
            if r.structure not in best or c.score < best[r.structure].score:
                best[r.structure] = c
        return [best[i] for i in sorted(best)]

    def _project(self, target: np.ndarray, structures: Sequence[Node], jobs: Sequence[tuple[int, np.ndarray]],
                 min_explained: float = -np.inf, search: bool = True) -> tuple[list[tuple[int, np.ndarray]], list[float]]:
        """Jobs with their root ramp solved for the field their parameters draw (ramps.py):
        the fields of all of them rendered in one dispatch, then positions and colours
        replaced where the solved ramp explains at least ``min_explained`` of the target's
        variance; with each job's pixel MSE after the solve (inf where not solved). Jobs
        without a root ramp, or whose field is not finite, are unchanged."""
        out, mses = list(jobs), [float("inf")] * len(jobs)
        todo = [i for i, (s, _) in enumerate(jobs) if ramps.projectable(structures[s])]
        if not todo:
            return out, mses
        # Each field drawn by its own structure (ramps.field_params), through the modules the
        # batch is fitted with: reading fields compiles nothing.
        field_jobs = [(jobs[i][0], ramps.field_params(structures[jobs[i][0]], jobs[i][1])) for i in todo]
        h, w = target.shape[:2]
        renders = render_jobs(self.device, structures, field_jobs, w, h, tile=self.config.fit.tile,
                              texture=self.config.fit.texture_weight > 0.0, channels=1)
        variance = max(1e-12, float(np.mean((target - target.reshape(-1, 3).mean(axis=0)) ** 2)))
        finite = [(i, render) for i, render in zip(todo, renders) if np.isfinite(render).all()]
        starts = [np.asarray(jobs[i][1][:int(structures[jobs[i][0]].attr["stops"])]) for i, _ in finite]
        solved = ramps.project_many([ramps.field_values(render) for _, render in finite], target, starts, search)
        for (i, _), (positions, colours, mse) in zip(finite, solved):
            s, values = jobs[i]
            if 1.0 - mse / variance >= min_explained:
                out[i] = (s, ramps.with_ramp(structures[s], values, positions, colours))
                mses[i] = mse
        return out, mses

    def _better_ramps(self, target: np.ndarray, stats: np.ndarray, solve_at: np.ndarray,
                      structures: Sequence[Node], results: Sequence[JobResult], fit: FitConfig) -> list[JobResult]:
        """Each job fitted to ``target``, or the same with its root ramp solved (_project,
        against ``solve_at``, a small copy of it) where that lowers the image loss at the
        detail size (pixel and texture terms: the solve sees only pixels). A
        phase decides where a sawtooth's jump or a wave's crest falls, which a fit cannot
        carry across the period (nor, at a point-sampled jump, move at all): each phase is
        also scanned, coarse to fine (PHASE_SCAN), each value with its ramp solved."""
        best = [(r.structure, np.array(r.params, np.float64)) for r in results]
        best, mses = self._project(solve_at, structures, best)
        # Phases are scanned for each structure's best job alone: its restarts differ in
        # where they started, not in what a scan can find (and a scan is most of the
        # search's host work: three rounds of 16 trials, each rendered and solved).
        leader: dict[int, int] = {}
        for i, (s, _) in enumerate(best):
            if np.isfinite(mses[i]) and (s not in leader or mses[i] < mses[leader[s]]):
                leader[s] = i
        moved: set[int] = set()
        for count, step in PHASE_SCAN:
            trials, owner = [], []
            for i, (s, values) in enumerate(best):
                if leader.get(s) != i:
                    continue
                for slot in _phase_slots(structures[s]):
                    for j in range(-count, count + 1):
                        if j:
                            v = values.copy()
                            v[slot] = (v[slot] + j * step) % 1.0
                            trials.append((s, v))
                            owner.append(i)
            if not trials:
                break
            # The first (coarse) round searches each trial's stop positions too (a phase moves
            # what a stop's position means); later rounds keep them (colours solved) and the
            # winners' are searched after.
            projected, trial_mses = self._project(solve_at, structures, trials, search=step == PHASE_SCAN[0][1])
            for t, i in enumerate(owner):
                if trial_mses[t] < mses[i]:
                    best[i], mses[i] = projected[t], trial_mses[t]
                    moved.add(i)
        if moved:
            order = sorted(moved)
            again, _ = self._project(solve_at, structures, [best[i] for i in order])
            for i, job in zip(order, again):
                best[i] = job
        changed = [i for i, r in enumerate(results) if not np.array_equal(r.params, best[i][1])]
        if not changed:
            return list(results)
        # Judged at the detail size, fitted and solved side by side: at a small fit size a
        # solve can squeeze a ramp into an anti-aliased edge to sharpen it, which only
        # blurs the edge at full size.
        judge = FitConfig(**{**fit.__dict__, "steps": 0})
        both = fit_jobs(self.device, self.detail, self.detail_stats, structures,
                        [best[i] for i in changed] + [(results[i].structure, results[i].params) for i in changed],
                        judge)
        out = list(results)
        loss = [j.pixel_mse + fit.texture_weight * j.texture_loss for j in both]
        for n, i in enumerate(changed):
            if loss[n] < loss[len(changed) + n]:
                if target is self.detail:
                    out[i] = both[n]
                else:
                    (out[i],) = fit_jobs(self.device, target, stats, structures, [best[i]], judge)
        return out

    def beam(self) -> list[Candidate]:
        ranked = sorted(self.evaluated.values(), key=lambda c: (c.score, c.nodes, c.program.key()))
        return ranked[: self.config.beam]

    def run(self) -> Candidate:
        cfg = self.config
        h, w = self.target.shape[:2]
        top = None
        for gen in range(cfg.generations):
            if gen == 0:
                # Every primitive, those the target's own structure locates (noise where
                # the correlation puts it, rings about its centre) with their parameters.
                located = {p.key(): p for p in locate.proposals(self.detail, tile=cfg.tile,
                                                                  carriers=self.hints.peaks[:WARP_CARRIERS])}
                initial = [located.pop(p.key(), p) for p in self.builtin.initial()]
                proposals = [(p, "builtin") for p in initial] + [(p, "located") for p in located.values()]
            else:
                proposals = [(p, "builtin") for p in
                             self.builtin.propose([c.program for c in self.beam()], self.rng, cfg.population,
                                                  frozenset(self.evaluated))]
            if self.command is not None:
                best = [c.program for c in self.beam()]
                proposals = [(p, "cmd") for p in self.command.request(gen, w, h, self.hints.mean_colour, best)] \
                    + proposals
            fresh, seen = [], set()
            for p, origin in proposals:
                k = p.key()
                if k in self.evaluated or k in seen or (cfg.tile and not periodic(p)):
                    continue
                seen.add(k)
                fresh.append((p, origin))
            # Generation 0 tries every primitive; the command's programs always get fitted.
            external = sum(1 for _, origin in fresh if origin == "cmd")
            fresh = fresh[: external + (len(proposals) if gen == 0 else cfg.population)]
            if not fresh:
                break
            for c in self._fit(fresh, gen, cfg.fit):
                self.evaluated[c.program.key()] = c
            leader, top = top, self.beam()[0]
            self.generations_run = gen + 1
            if self.log is not None:
                self.log.info("generation %d: %d structures fitted; best %s (%d nodes, loss %.3g)", gen, len(fresh),
                              top.program.structure().key(), top.nodes, top.loss)
            # A copy that a whole generation of its mutations could not better: the refinement,
            # polish and snap perfect it, and more generations only add time. A proposer
            # command is asked every generation, as documented.
            settled = (leader is not None and top.program.key() == leader.program.key()
                       and gen + 1 < cfg.generations and self.command is None
                       and psnr_from_mse(top.pixel_mse) >= COPY_DB)
            if self.progress is not None:
                self.progress(gen + 1, total=gen + 1 if settled else cfg.generations, best_loss=float(top.loss))
            if settled:
                if self.log is not None:
                    self.log.info("stopped after generation %d of %d: the best draws the target (%.1f dB at the "
                                  "fit size) and the generation found nothing better", gen, cfg.generations,
                                  psnr_from_mse(top.pixel_mse))
                break
        ranked = sorted(self.evaluated.values(), key=lambda c: (c.score, c.nodes, c.program.key()))
        leading = self._at_detail(ranked[: 2 * cfg.beam])
        best = leading[0]
        if cfg.refine_steps > 0:
            refined, loss, far = self.refine(best)
            if refined is not best:
                self.evaluated[best.program.key()] = best = refined
            # Far from a copy, the runner-up's own refinement can land lower: both refined,
            # the lower image loss at the detail size kept.
            if len(leading) > 1 and far:
                other, other_loss, _ = self.refine(leading[1])
                if other_loss < loss:
                    self.evaluated[other.program.key()] = best = other
        polished = self.polish(best)
        if polished is not best:
            self.evaluated[best.program.key()] = best = polished
        if cfg.snap or cfg.tile:
            snapped = self.snap(best)
            if snapped is not best:
                self.evaluated[best.program.key()] = best = snapped
        contrasted = self.contrast(best)
        if contrasted is not best:
            self.evaluated[best.program.key()] = best = contrasted
        return best

    def contrast(self, best: Candidate) -> Candidate:
        """Where the winner is far from a copy (below STOCHASTIC_DB at the detail size), its
        root ramp's colours spread about the render's mean colour (CONTRAST_SCALES), the
        spread with the lowest texture loss kept among those whose image loss stays within
        STOCHASTIC_TIE of the winner's. Against a texture no program matches in phase, the
        pixel term pulls every colour towards the mean (a washed-out likeness) about as
        hard as the texture term pulls back, so the image loss is flat there while the
        texture statistics, what a stochastic material is judged by, are not. The ramp's
        output is a convex blend of its colours, so scaling them scales the render's
        deviation from its mean exactly. Colours stay on the 8-bit grid."""
        structure = best.program.structure()
        if not ramps.projectable(structure):
            return best
        fit = FitConfig(**{**self.config.fit.__dict__, "steps": 0})
        values = flatten(best.program)
        (r,) = fit_jobs(self.device, self.detail, self.detail_stats, [structure], [(0, values)], fit)
        if fit.texture_weight <= 0.0 or psnr_from_mse(r.pixel_mse) >= STOCHASTIC_DB:
            return best
        n = int(structure.attr["stops"])
        mean = r.mean_colour
        colours = values[n:4 * n].reshape(n, 3)
        trials = []
        for scale in CONTRAST_SCALES:
            v = values.copy()
            v[n:4 * n] = (np.round(np.clip(mean + scale * (colours - mean), 0.0, 1.0) * 255.0) / 255.0).reshape(-1)
            trials.append((0, v))
        results = fit_jobs(self.device, self.detail, self.detail_stats, [structure], trials, fit)
        own = r.pixel_mse + fit.texture_weight * r.texture_loss
        pick, texture = None, r.texture_loss
        for t in results:
            if t.pixel_mse + fit.texture_weight * t.texture_loss <= own * (1.0 + STOCHASTIC_TIE) \
                    and t.texture_loss < texture:
                pick, texture = t, t.texture_loss
        if pick is None:
            return best
        loss = pick.pixel_mse + fit.texture_weight * pick.texture_loss
        if self.log is not None:
            self.log.info("contrast: texture loss %.3g -> %.3g, image loss %.4g -> %.4g (at %dx%d)", r.texture_loss,
                          pick.texture_loss, own, loss, self.detail.shape[1], self.detail.shape[0])
        return Candidate(with_params(structure, pick.params), pick.pixel_mse, pick.texture_loss, loss,
                         loss + self.config.complexity_weight * best.nodes, best.nodes, best.instructions,
                         best.generation, best.origin)

    def refine(self, best: Candidate) -> tuple[Candidate, float, bool]:
        """A longer fit of the winner at the detail size, kept if its image loss is no
        higher than the winner's own there. Where the winner is far from drawing the target
        pixel for pixel (below STOCHASTIC_DB: a photographed material whose noise no program
        matches in phase), pixel and texture terms pull apart and the loss is flat between
        them, so one descent lands wherever its start points: the fit is restarted with the
        texture term weighted up (STOCHASTIC_TEXTURE_WEIGHTS), each judged by the same
        image loss, the lowest kept. Returns the candidate, its image loss at the detail
        size, and whether the winner was that far."""
        cfg = self.config
        fit = FitConfig(**{**cfg.fit.__dict__, "steps": cfg.refine_steps, "lr": cfg.fit.lr * 0.25})
        # Scores at the detail size: the winner's own, for a fair comparison.
        (r,) = fit_jobs(self.device, self.detail, self.detail_stats, [best.program.structure()],
                        [(0, flatten(best.program))], FitConfig(**{**fit.__dict__, "steps": 0}))
        own = r.pixel_mse + fit.texture_weight * r.texture_loss
        far = psnr_from_mse(r.pixel_mse) < STOCHASTIC_DB
        weights = (1.0,) + (STOCHASTIC_TEXTURE_WEIGHTS if far and fit.texture_weight > 0.0 else ())
        self.config = SearchConfig(**{**cfg.__dict__, "restarts": 1})
        try:
            fits = []
            for k in weights:
                refit = FitConfig(**{**fit.__dict__, "texture_weight": fit.texture_weight * k})
                (c,) = self._fit([(best.program, best.origin)], cfg.generations, refit, detail=True)
                if k != 1.0:  # its loss as the search counts it
                    c.loss = c.pixel_mse + fit.texture_weight * c.texture_loss
                    c.score = c.loss + cfg.complexity_weight * c.nodes
                fits.append(c)
        finally:
            self.config = cfg
        refined = min(fits, key=lambda c: c.loss)  # the first of equals: the plain fit
        if self.log is not None and len(fits) > 1:
            self.log.info("refined with texture weights x%s: loss %s (winner's own %.4g)",
                          "/".join(f"{k:g}" for k in weights), " ".join(f"{c.loss:.4g}" for c in fits), own)
        return (refined, refined.loss, far) if refined.loss <= own else (best, own, far)

    def _at_detail(self, beam: Sequence[Candidate]) -> list[Candidate]:
        """The leading candidates (twice the beam) ranked by their score at the detail
        size: a small fit size can rank a program first whose texture statistics do not
        hold at full size."""
        if len(beam) < 2 or self.detail.shape == self.target.shape:
            return list(beam)
        structures = [c.program.structure() for c in beam]
        results = fit_jobs(self.device, self.detail, self.detail_stats, structures,
                           [(i, flatten(c.program)) for i, c in enumerate(beam)],
                           FitConfig(**{**self.config.fit.__dict__, "steps": 0}))
        w = self.config.fit.texture_weight
        scores = [r.pixel_mse + w * r.texture_loss + self.config.complexity_weight * c.nodes
                  for r, c in zip(results, beam)]
        return [beam[i] for i in np.argsort(scores, kind="stable")]

    # -- polishing -----------------------------------------------------------------------
    def polish(self, best: Candidate) -> Candidate:
        """A pattern search over the winner's field parameters at the detail size, its root
        ramp solved at every trial (ramps.py): a mortar's width or an edge's offset finer
        than the fit size resolves, which a short Adam refinement leaves where the ramp
        made up for it. Whole-number slots are left to the snap. Kept only if the image
        loss (pixel and texture terms) falls."""
        structure = best.program.structure()
        if not ramps.projectable(structure):
            return best
        values = flatten(best.program)
        n = int(structure.attr["stops"])
        kinds, scales = param_snaps(structure), param_scales(structure)
        slots = [i for i in range(4 * n, len(values)) if kinds[i] != INTEGER]
        if not slots:
            return best
        (start,) = self._judge(structure, [values])
        (current,), (mse,) = self._project(self.detail, [structure], [(0, values)])
        for step in POLISH_STEPS:
            for _ in range(POLISH_ROUNDS):
                trials = []
                for i in slots:
                    for sign in (-1.0, 1.0):
                        v = current[1].copy()
                        v[i] += sign * step * scales[i]
                        trials.append((0, v))
                projected, mses = self._project(self.detail, [structure], trials, search=False)
                k = int(np.argmin(mses))
                if not mses[k] < mse * (1 - 1e-9):
                    break
                current, mse = projected[k], mses[k]
        (current,), _ = self._project(self.detail, [structure], [current])
        (loss,) = self._judge(structure, [current[1]])
        if self.log is not None:
            self.log.info("polished %d field parameters: loss %.3g -> %.3g (at %dx%d)", len(slots), start, loss,
                          self.detail.shape[1], self.detail.shape[0])
        if not loss < start:
            return best
        (r,) = fit_jobs(self.device, self.detail, self.detail_stats, [structure], [current],
                        FitConfig(**{**self.config.fit.__dict__, "steps": 0}))
        image_loss = r.pixel_mse + self.config.fit.texture_weight * r.texture_loss
        return Candidate(with_params(structure, r.params), r.pixel_mse, r.texture_loss, image_loss,
                         image_loss + self.config.complexity_weight * best.nodes, best.nodes, best.instructions,
                         best.generation, best.origin)

    # -- snapping ------------------------------------------------------------------------
    def _judge(self, structure: Node, values: Sequence[np.ndarray]) -> list[float]:
        """Image loss of each parameter vector at the detail size (one render dispatch)."""
        fit = FitConfig(**{**self.config.fit.__dict__, "steps": 0})
        results = fit_jobs(self.device, self.detail, self.detail_stats, [structure],
                           [(0, v) for v in values], fit)
        return [r.pixel_mse + fit.texture_weight * r.texture_loss for r in results]

    def _whole(self, structure: Node, values: np.ndarray) -> np.ndarray:
        """INTEGER slots rounded (never to 0 for a frequency or count; to even cells where
        tiling needs them: a checker's frequency, a brick wall's rows)."""
        out = values.copy()
        i = 0
        for n in structure.walk():
            for p in n.spec.params:
                k = p.count(n.attr)
                if p.snap == INTEGER:
                    for j in range(k):
                        v = float(np.round(values[i + j]))
                        if p.name in ("frequency", "count"):
                            v = max(1.0, abs(v)) * (1.0 if values[i + j] >= 0 else -1.0)
                        if self.config.tile and ((n.op == "checker") or (n.op in ("bricks", "brick_cells") and j == 1)):
                            v = 2.0 * max(1.0, float(np.round(values[i + j] / 2.0)))
                        out[i + j] = v + 0.0  # never -0
                i += k
        return out

    def snap(self, best: Candidate) -> Candidate:
        """Parameters snapped to what a person would write, each snap kept only where the
        loss (at the detail size) does not rise: whole frequencies first (the other
        parameters re-fitted around them; forced when tiling, so the program tiles), then
        each offset, phase, level and colour to its simplest nearby fraction."""
        structure = best.program.structure()
        values = flatten(best.program)
        kinds = param_snaps(structure)
        (loss,) = self._judge(structure, [values])
        start = loss
        ints = np.array([k == INTEGER for k in kinds])
        taken = {"integer": 0, "rational": 0}
        if ints.any():
            whole = self._whole(structure, values)
            if not np.array_equal(whole, values):
                steps = max(20, self.config.refine_steps // 2 or self.config.fit.steps // 2)
                fit = FitConfig(**{**self.config.fit.__dict__, "steps": steps, "lr": self.config.fit.lr * 0.25,
                                   "blur": 1.5, "seed": (self.seed * 1000003 + 7919) & 0xFFFFFFFF})
                (r,) = fit_jobs(self.device, self.detail, self.detail_stats, [structure], [(0, whole)], fit,
                                frozen=[ints])
                # The whole values as they are, or with the rest re-fitted around them
                # (a re-fit can also lose: no gradient moves a point-sampled jump).
                rounded, refit = self._judge(structure, [whole, r.params])
                pick, lowest = (whole, rounded) if rounded <= refit else (r.params, refit)
                if self.config.tile or _keeps(lowest, loss):
                    values, loss = pick, lowest
                    taken["integer"] = int(ints.sum())
        frozen = ints.copy() if taken["integer"] else np.zeros_like(ints)
        # Offsets, phases, levels and ramp positions together at their simplest nearby
        # fractions, the colours re-fitted around them (a ramp's stops and colours trade off).
        fractions = np.array([k == RATIONAL and not frozen[i] for i, k in enumerate(kinds)])
        scales = param_scales(structure)
        if fractions.any():
            joint = values.copy()
            for i in np.flatnonzero(fractions):  # within 2% of the slot's unit (ParamSpec.scale)
                joint[i] = _simplest(values[i], DENOMINATORS[RATIONAL], 0.02 * scales[i])
            if not np.array_equal(joint, values):
                fit = FitConfig(**{**self.config.fit.__dict__, "steps": max(20, self.config.fit.steps // 2),
                                   "lr": self.config.fit.lr * 0.25, "blur": 1.0,
                                   "seed": (self.seed * 1000003 + 7927) & 0xFFFFFFFF})
                (r,) = fit_jobs(self.device, self.detail, self.detail_stats, [structure], [(0, joint)], fit,
                                frozen=[frozen | fractions])
                (refit,) = self._judge(structure, [r.params])
                if _keeps(refit, loss):
                    values, loss = r.params, refit
                    frozen = frozen | fractions
                    taken["rational"] = int(fractions.sum())
        # Then each remaining slot: every candidate judged in one dispatch, taken greedily.
        trials, where = [], []
        for i, kind in enumerate(kinds):
            if kind not in DENOMINATORS or frozen[i]:
                continue
            seen = {float(values[i])}
            for d in DENOMINATORS[kind]:
                c = float(np.round(values[i] * d) / d) + 0.0
                if kind == COLOUR_STEP:
                    c = min(1.0, max(0.0, c))
                if c in seen:
                    continue
                seen.add(c)
                t = values.copy()
                t[i] = c
                trials.append(t)
                where.append((i, c))
        if trials:
            losses = self._judge(structure, trials)
            picks: dict[int, float] = {}
            for (i, c), l in zip(where, losses):
                if i not in picks and _keeps(l, loss):
                    picks[i] = c  # the simplest candidate that keeps the loss
            if picks:
                joint = values.copy()
                for i, c in picks.items():
                    joint[i] = c
                (l,) = self._judge(structure, [joint])
                if _keeps(l, loss):
                    values, loss = joint, l
                    taken["rational"] += len(picks)
                else:  # interacting snaps: take them one by one
                    for i, c in picks.items():
                        t = values.copy()
                        t[i] = c
                        (l,) = self._judge(structure, [t])
                        if _keeps(l, loss):
                            values, loss = t, l
                            taken["rational"] += 1
        self.snaps = {"integer_slots": taken["integer"], "fraction_slots": taken["rational"],
                      "loss_before": start, "loss_after": loss, "forced": bool(self.config.tile)}
        if self.log is not None:
            self.log.info("snapped %d whole and %d fractional parameters; loss %.3g -> %.3g (at %dx%d)",
                          taken["integer"], taken["rational"], start, loss, self.detail.shape[1],
                          self.detail.shape[0])
        if not (taken["integer"] or taken["rational"]):
            return best
        program = with_params(structure, values)
        (r,) = fit_jobs(self.device, self.detail, self.detail_stats, [structure], [(0, values)],
                        FitConfig(**{**self.config.fit.__dict__, "steps": 0}))
        image_loss = r.pixel_mse + self.config.fit.texture_weight * r.texture_loss
        return Candidate(program, r.pixel_mse, r.texture_loss, image_loss,
                         image_loss + self.config.complexity_weight * best.nodes, best.nodes, best.instructions,
                         best.generation, best.origin)

    def front(self) -> list[Candidate]:
        return pareto_front(self.evaluated.values())
