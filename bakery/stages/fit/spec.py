"""The fit spec: a TOML file naming a user's differentiable Slang function, what each of
its arguments is bound to, the reference image and how to optimise (docs/PIPELINE.md,
"Fit specs").

Reading a spec touches no device: every problem is collected as one ``file:line: key:
message`` line, as for pipeline.toml. Whether the bindings fit the function is checked
later against the compiled function's reflection (bakery/stages/fit/signature.py).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bakery.errors import ConfigError, UsageError, display_path
from bakery.nn.optimizers import OPTIMIZERS, SCHEDULES
from bakery.pipeline.sourcemap import SourceMap

LOSSES = ("l2", "l1")
BINDING_KINDS = ("image", "uv", "constant", "param")
_TOP_KEYS = {"shader", "function", "reference", "size", "args", "fit", "description"}
_FIT_KEYS = {"steps", "loss", "optimizer", "schedule", "lr", "weight_decay", "seed"}
_PARAM_KEYS = {"param", "init", "seed", "clamp", "lr"}


class SpecError(ConfigError):
    """One or more problems in a fit spec; ``lines`` holds one ``file:line`` line each."""


@dataclass(frozen=True)
class Binding:
    """What one function argument receives.

    ``image``: the texel of an image at each output pixel; ``uv``: the pixel's UV centre;
    ``constant``: fixed values; ``param``: trainable values of ``shape`` (``()`` scalar,
    ``(N,)`` vector, ``(H, W, C)`` texture read at each output pixel).
    """

    name: str
    kind: str
    path: Path | None = None
    values: tuple[float, ...] = ()
    shape: tuple[int, ...] = ()
    init: Any = 0.0  # float, tuple of floats, "noise", or a Path (an image)
    seed: int | None = None
    clamp: tuple[float, float] | None = None
    lr: float | None = None

    @property
    def trainable(self) -> bool:
        return self.kind == "param"

    def describe(self) -> str:
        if self.kind == "image":
            return f"image {self.path.name}"
        if self.kind == "param":
            return f"param {list(self.shape)}"
        return self.kind


@dataclass
class FitSpec:
    path: Path
    shader: Path
    function: str
    reference: Path
    size: tuple[int, int] | None  # (width, height) of the output; None: the reference's
    args: dict[str, Binding]
    steps: int = 300
    steps_given: bool = False  # the spec's [fit] sets steps; else the stage's ``auto`` picks them
    loss: str = "l2"
    optimizer: str = "adam"
    schedule: str = "cosine"
    lr: float = 0.01
    weight_decay: float = 0.01
    seed: int | None = None
    source: SourceMap | None = field(default=None, repr=False)

    def where(self, key: str) -> str:
        """``file:line`` of ``key`` (a dotted path such as ``args.amount``)."""
        line = self.source.line_of(key) if self.source else None
        return f"{display_path(self.path)}:{line or 1}"

    def error(self, key: str, message: str) -> str:
        return UsageError(message, where=self.where(key), key=key).one_line()

    def files(self) -> dict[str, Path]:
        """Every file the spec reads besides itself, by role (``fit.shader``, ...): they
        feed the task's cache key."""
        found = {"fit.shader": self.shader, "fit.reference": self.reference}
        for b in self.args.values():
            if b.path is not None:
                found[f"fit.args.{b.name}"] = b.path
            if isinstance(b.init, Path):
                found[f"fit.args.{b.name}.init"] = b.init
        return found


class _Reader:
    def __init__(self, path: Path, source: SourceMap):
        self.path, self.source, self.lines = path, source, []

    def add(self, key: str, message: str) -> None:
        line = self.source.line_of(key) or 1
        self.lines.append(UsageError(message, where=f"{display_path(self.path)}:{line}", key=key).one_line())

    def file(self, key: str, value: Any) -> Path | None:
        if not isinstance(value, str) or not value:
            self.add(key, f"expected a path string, got {value!r}")
            return None
        p = (self.path.parent / value).resolve()
        if not p.is_file():
            self.add(key, f"file not found: {value}")
            return None
        return p

    def number(self, key: str, value: Any, *, positive: bool = False) -> float | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.add(key, f"expected a number, got {value!r}")
            return None
        if positive and value <= 0:
            self.add(key, f"must be > 0, got {value!r}")
            return None
        return float(value)

    def numbers(self, key: str, value: Any) -> tuple[float, ...] | None:
        items = value if isinstance(value, list) else [value]
        if not items or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in items):
            self.add(key, f"expected a number or a list of numbers, got {value!r}")
            return None
        return tuple(float(v) for v in items)

    def choice(self, key: str, value: Any, allowed) -> Any:
        if value not in allowed:
            self.add(key, f"{value!r} is not allowed (one of {', '.join(map(repr, allowed))})")
            return None
        return value


def load_spec(path: str | Path) -> FitSpec:
    """Reads and checks a fit spec; raises :class:`SpecError` listing every problem."""
    path = Path(path).resolve()
    if not path.is_file():
        raise SpecError([f"{display_path(path)}:1: fit: file not found"])
    try:
        text = path.read_text(encoding="utf-8")
        doc = tomllib.loads(text)
    except UnicodeDecodeError as e:
        raise SpecError([f"{display_path(path)}:1: fit: not UTF-8 text (byte {e.start})"]) from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(ConfigError.from_toml(path, e).lines) from None
    r = _Reader(path, SourceMap(text))
    for k in doc:
        if k not in _TOP_KEYS:
            r.add(k, f"unknown key (known: {', '.join(sorted(_TOP_KEYS))})")
    for k in ("shader", "function", "reference"):
        if k not in doc:
            r.add(k, f"missing key {k!r}")
    shader = r.file("shader", doc["shader"]) if "shader" in doc else None
    if shader is not None and shader.suffix != ".slang":
        r.add("shader", f"expected a .slang file, got {shader.name}")
    function = doc.get("function", "")
    if "function" in doc and not (isinstance(function, str) and function.isidentifier()):
        r.add("function", f"expected a function name, got {function!r}")
    reference = r.file("reference", doc["reference"]) if "reference" in doc else None
    size = None
    if "size" in doc:
        s = doc["size"]
        if (isinstance(s, list) and len(s) == 2 and all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                                        for v in s)):
            size = (s[0], s[1])
        else:
            r.add("size", f"expected [width, height] in pixels, got {s!r}")
    args = _read_args(r, doc.get("args", {}))
    if "args" not in doc:
        r.add("args", "missing table [args] (one binding per function argument)")

    opts = doc.get("fit", {})
    if not isinstance(opts, dict):
        r.add("fit", "expected a table")
        opts = {}
    for k in opts:
        if k not in _FIT_KEYS:
            r.add(f"fit.{k}", f"unknown key (known: {', '.join(sorted(_FIT_KEYS))})")
    spec = FitSpec(path=path, shader=shader or path, function=str(function), reference=reference or path,
                   size=size, args=args, source=r.source)
    steps = opts.get("steps", spec.steps)
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 10_000_000:
        r.add("fit.steps", f"expected an integer in [1, 10000000], got {steps!r}")
    else:
        spec.steps, spec.steps_given = steps, "steps" in opts
    spec.loss = r.choice("fit.loss", opts.get("loss", spec.loss), LOSSES) or spec.loss
    spec.optimizer = r.choice("fit.optimizer", opts.get("optimizer", spec.optimizer), tuple(OPTIMIZERS)) or spec.optimizer
    spec.schedule = r.choice("fit.schedule", opts.get("schedule", spec.schedule), SCHEDULES) or spec.schedule
    for k in ("lr", "weight_decay"):
        if k in opts:
            v = r.number(f"fit.{k}", opts[k], positive=(k == "lr"))
            if v is not None:
                setattr(spec, k, v)
    if "seed" in opts:
        seed = opts["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            r.add("fit.seed", f"expected an integer >= 0, got {seed!r}")
        else:
            spec.seed = seed
    if r.lines:
        raise SpecError(r.lines)
    return spec


def _read_args(r: _Reader, table: Any) -> dict[str, Binding]:
    if not isinstance(table, dict):
        r.add("args", "expected a table: argument = binding")
        return {}
    args = {}
    for name, decl in table.items():
        key = f"args.{name}"
        b = _read_binding(r, key, name, decl)
        if b is not None:
            args[name] = b
    return args


def _read_binding(r: _Reader, key: str, name: str, decl: Any) -> Binding | None:
    # Short forms: "uv" is the UV grid, a number or list of numbers a constant.
    if decl == "uv":
        return Binding(name, "uv")
    if isinstance(decl, (int, float, list)) and not isinstance(decl, bool):
        values = r.numbers(key, decl)
        return Binding(name, "constant", values=values) if values else None
    if not isinstance(decl, dict):
        r.add(key, f"expected a binding table ({', '.join(f'{k} = ...' for k in BINDING_KINDS)}), \"uv\" "
                   f"or a constant, got {decl!r}")
        return None
    kinds = [k for k in BINDING_KINDS if k in decl]
    if len(kinds) != 1:
        r.add(key, f"a binding names exactly one of {', '.join(BINDING_KINDS)} (found: {', '.join(kinds) or 'none'})")
        return None
    kind = kinds[0]
    allowed = _PARAM_KEYS if kind == "param" else {kind}
    unknown = [k for k in decl if k not in allowed]
    for k in unknown:
        r.add(f"{key}.{k}", f"unknown key for a {kind} binding (known: {', '.join(sorted(allowed))})")
    if unknown:
        return None
    if kind == "image":
        p = r.file(f"{key}.image", decl["image"])
        return Binding(name, "image", path=p) if p else None
    if kind == "uv":
        if decl["uv"] is not True:
            r.add(f"{key}.uv", "write uv = true (or the short form: NAME = \"uv\")")
            return None
        return Binding(name, "uv")
    if kind == "constant":
        values = r.numbers(f"{key}.constant", decl["constant"])
        return Binding(name, "constant", values=values) if values else None
    return _read_param(r, key, name, decl)


def _read_param(r: _Reader, key: str, name: str, decl: dict) -> Binding | None:
    shape = decl["param"]
    if not (isinstance(shape, list) and len(shape) in (0, 1, 3)
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shape)):
        r.add(f"{key}.param", f"expected a shape: [] scalar, [N] vector or [height, width, channels] texture, "
                              f"got {shape!r}")
        return None
    n_before = len(r.lines)
    clamp = None
    if "clamp" in decl:
        c = decl["clamp"]
        if (isinstance(c, list) and len(c) == 2
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in c) and c[0] < c[1]):
            clamp = (float(c[0]), float(c[1]))
        else:
            r.add(f"{key}.clamp", f"expected [low, high] with low < high, got {c!r}")
    lr = r.number(f"{key}.lr", decl["lr"], positive=True) if "lr" in decl else None
    seed = decl.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        r.add(f"{key}.seed", f"expected an integer >= 0, got {seed!r}")
    init: Any = decl.get("init", 0.0)
    if init == "noise":
        pass
    elif isinstance(init, dict):
        if list(init) != ["image"]:
            r.add(f"{key}.init", "expected init = { image = \"file.png\" }")
        else:
            init = r.file(f"{key}.init", init["image"])
            if init is not None and len(shape) != 3:
                r.add(f"{key}.init", "an image initialises a texture parameter ([height, width, channels]) only")
    elif isinstance(init, str):
        r.add(f"{key}.init", f"expected a number, a list of numbers, \"noise\" or {{ image = \"file\" }}, got {init!r}")
    else:
        values = r.numbers(f"{key}.init", init)
        if values is not None:
            per = shape[-1] if shape else 1
            if len(values) not in (1, per):
                r.add(f"{key}.init", f"{len(values)} values for shape {shape} (give 1, or {per}: one per component)")
            init = values[0] if len(values) == 1 else values
    if len(r.lines) > n_before:
        return None
    return Binding(name, "param", shape=tuple(shape), init=init, seed=seed, clamp=clamp, lr=lr)


def referenced_files(path: str | Path) -> dict[str, Path]:
    """The files a spec reads besides itself, for a pipeline's cache key; empty when the
    spec does not load (its task then fails and reports why)."""
    try:
        return load_spec(path).files()
    except UsageError:
        return {}
