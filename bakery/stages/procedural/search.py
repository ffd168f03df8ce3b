"""The structure search: a beam of the best programs, mutated generation by generation.

Each generation's new structures are fitted together (fit.py), each with several restarts:
restart 0 starts from the parent's parameters and hints read off the target (dominant
spatial frequencies, colour quantiles, the luminance slope), the others from random draws
around them. Score = image loss + complexity_weight * node count, image loss = pixel MSE
+ texture_weight * texture-statistics loss. Everything random comes from one seeded
generator, so a search is reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from bakery.baselines.resample import downsample_area
from bakery.stages.procedural import texture_stats
from bakery.stages.procedural.dsl import Node, complexity, flatten, instructions, with_params
from bakery.stages.procedural.fit import FitConfig, fit_jobs, screen_jobs


SCREEN_SIZE = 64


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
    render: np.ndarray = field(repr=False, default=None)

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
    if op in ("stripes_sine", "stripes_saw"):
        return {"k": peak, "phase": (rng.uniform(0, 1),)}
    if op == "checker":
        f = 2.0 * max(abs(peak[0]), abs(peak[1]))
        return {"frequency": (f,), "offset": tuple(rng.uniform(0, 1, 2)), "sharpness": (20.0,)}
    if op == "bricks":
        # The fundamental along each axis: the smallest non-zero frequency among the peaks.
        fx = min([abs(k[0]) for k in hints.peaks if k[0]] or [4.0])
        fy = min([abs(k[1]) for k in hints.peaks if k[1] and not k[0]] or [abs(k[1]) for k in hints.peaks if k[1]]
                 or [8.0])
        count = (fx, fy) if restart == 0 else (fx * rng.choice([0.5, 1, 1, 2]), fy * rng.choice([0.5, 1, 1, 2]))
        count = (max(1.0, count[0]), max(1.0, count[1]))
        return {"count": count, "offset": tuple(rng.uniform(0, 1, 2)), "mortar": (0.1 / max(count),),
                "sharpness": (50.0,)}  # soft edges first: offsets only get gradients near edges
    if op in ("value_noise", "gradient_noise"):
        f = radial if restart % 2 == 0 else float(np.exp(rng.uniform(np.log(2), np.log(16))))
        return {"frequency": (min(f, 32.0),), "offset": tuple(rng.uniform(0, 8, 2))}
    if op == "fbm":
        f = min(radial, 16.0) if restart % 2 == 0 else float(np.exp(rng.uniform(np.log(2), np.log(8))))
        return {"frequency": (f,), "gain": (0.5,), "offset": tuple(rng.uniform(0, 8, 2))}
    if op == "worley":
        f = min(radial, 16.0) if restart % 2 == 0 else rng.uniform(3, 10)
        return {"frequency": (f,), "jitter": (rng.uniform(0.6, 1.0),), "offset": tuple(rng.uniform(0, 8, 2))}
    if op == "polar":
        jitter = (0, 0) if restart == 0 else rng.normal(0, 0.05, 2)
        return {"center": (0.5 + jitter[0], 0.5 + jitter[1]), "scale": (1.0,)}
    if op == "warp":
        return {"frequency": (rng.uniform(2, 6),), "amplitude": (rng.uniform(0.03, 0.15),),
                "offset": tuple(rng.uniform(0, 8, 2))}
    if op == "threshold":
        return {"level": (0.5 + (0 if restart == 0 else rng.uniform(-0.2, 0.2)),), "sharpness": (10.0,)}
    if op == "ramp":
        n = int(node.attr["stops"])
        cols = hints.colours(n)
        if restart > 0:
            cols = np.clip(cols + rng.normal(0, 0.05, cols.shape), 0, 1)
        return {"positions": tuple(np.linspace(0, 1, n)), "colours": tuple(cols.reshape(-1))}
    if op == "constant":
        return {"colour": tuple(hints.mean_colour)}
    return {}


def initialise(program: Node, hints: Hints, rng: np.random.Generator, restart: int) -> np.ndarray:
    """Layout-order parameters: a node's own where it has them, hints/random otherwise."""

    def fill(n: Node) -> Node:
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
                 log=None, progress=None):
        self.device, self.config = device, config
        self.target = np.ascontiguousarray(np.asarray(target, np.float32)[:, :, :3])
        self.target_stats = texture_stats.statistics(self.target)
        self.hints = Hints(self.target)
        # Screening only ranks starting points: a small copy of the target is enough.
        h, w = self.target.shape[:2]
        f = min(1.0, SCREEN_SIZE / max(h, w))
        self.screen_target = self.target if f == 1.0 else downsample_area(
            self.target, max(8, round(w * f)), max(8, round(h * f)))
        self.builtin, self.command = builtin, command
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.log, self.progress = log, progress
        self.evaluated: dict[str, Candidate] = {}

    def _fit(self, programs: Sequence[tuple[Node, str]], generation: int, fit: FitConfig) -> list[Candidate]:
        structures = [p.structure() for p, _ in programs]
        fit = FitConfig(**{**fit.__dict__, "seed": (self.seed * 1000003 + generation) & 0xFFFFFFFF})
        restarts, draws = self.config.restarts, self.config.restarts * max(1, self.config.screen)
        jobs = [(s, initialise(p, self.hints, self.rng, r)) for s, (p, _) in enumerate(programs) for r in range(draws)]
        if draws > restarts:
            # Screen many starting points cheaply; train the first (hinted/inherited) one
            # and the best of the rest.
            corr = screen_jobs(self.device, self.screen_target, structures, jobs, fit)
            distance = (1.0 - np.abs(corr)).reshape(len(programs), draws)
            keep = [s * draws + r for s in range(len(programs))
                    for r in [0] + sorted(range(1, draws), key=lambda r: (distance[s, r], r))[: restarts - 1]]
            jobs = [(jobs[i][0], _orient_ramp(structures[jobs[i][0]], jobs[i][1], corr[i])) for i in keep]
        results = fit_jobs(self.device, self.target, self.target_stats, structures, jobs, fit)
        best: dict[int, Candidate] = {}
        for r in results:
            program, origin = programs[r.structure]
            loss = r.pixel_mse + fit.texture_weight * r.texture_loss
            nodes = complexity(program)
            c = Candidate(with_params(program.structure(), r.params), r.pixel_mse, r.texture_loss, loss,
                          loss + self.config.complexity_weight * nodes, nodes, instructions(program), generation,
                          origin, r.render)
            if r.structure not in best or c.score < best[r.structure].score:
                best[r.structure] = c
        return [best[i] for i in sorted(best)]

    def beam(self) -> list[Candidate]:
        ranked = sorted(self.evaluated.values(), key=lambda c: (c.score, c.nodes, c.program.key()))
        return ranked[: self.config.beam]

    def run(self) -> Candidate:
        cfg = self.config
        h, w = self.target.shape[:2]
        for gen in range(cfg.generations):
            if gen == 0:
                proposals = [(p, "builtin") for p in self.builtin.initial()]
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
                if k in self.evaluated or k in seen:
                    continue
                seen.add(k)
                fresh.append((p, origin))
            # Generation 0 tries every primitive; the command's programs always get fitted.
            external = sum(1 for _, origin in fresh if origin == "cmd")
            fresh = fresh[: external + (len(self.builtin.initial()) if gen == 0 else cfg.population)]
            if not fresh:
                break
            for c in self._fit(fresh, gen, cfg.fit):
                self.evaluated[c.program.key()] = c
            top = self.beam()[0]
            if self.log is not None:
                self.log.info("generation %d: %d structures fitted; best %s (%d nodes, loss %.3g)", gen, len(fresh),
                              top.program.structure().key(), top.nodes, top.loss)
            if self.progress is not None:
                self.progress(gen + 1, total=cfg.generations, best_loss=float(top.loss))
        best = self.beam()[0]
        if cfg.refine_steps > 0:
            fit = FitConfig(**{**cfg.fit.__dict__, "steps": cfg.refine_steps, "lr": cfg.fit.lr * 0.25})
            saved, self.config = self.config, SearchConfig(**{**cfg.__dict__, "restarts": 1})
            refined = self._fit([(best.program, best.origin)], cfg.generations, fit)[0]
            self.config = saved
            if refined.score < best.score:
                self.evaluated[best.program.key()] = best = refined
        return best

    def front(self) -> list[Candidate]:
        return pareto_front(self.evaluated.values())
