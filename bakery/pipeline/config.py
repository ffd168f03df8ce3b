"""pipeline.toml: schema, loading and validation before any work.

Every problem is reported as one line ``file:line: key: message`` and all of them are
collected before giving up, so one edit-run cycle fixes a whole file. Nothing here
touches a device or writes a file. The schema is documented in docs/PIPELINE.md.
"""

from __future__ import annotations

import glob as globlib
import importlib
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bakery.device import DEVICE_KINDS
from bakery.errors import ConfigError, UsageError, did_you_mean, display_path
from bakery.materials import NORMAL_CONVENTIONS, ROLE_TABLE, Binding, role_names
from bakery.naming import detect_roles, undetected
from bakery.pipeline.dag import find_cycle
from bakery.pipeline.safety import declared_asset_paths, is_generated, path_overlaps, skipped_by_glob
from bakery.pipeline.sourcemap import SourceMap

RUNNERS = ("local", "ray")
STAGE_REF = "stage:"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_GLOB_CHARS = set("*?[")
_PROJECT_KEYS = {"name", "out", "cache", "device", "seed", "plugins", "runner", "normal_convention",
                 "dispatch_timeout"}
_ASSET_KEYS = ("material", "description", "channels", "normal_convention")
_STAGE_KEYS = {"type", "inputs", "params", "seed", "description", "require", "dispatch_timeout"}


@dataclass(frozen=True)
class Asset:
    """One concrete asset: a name and its files by role (absolute paths)."""

    name: str
    files: dict[str, Path]
    declared_as: str  # the [assets.NAME] table it came from


@dataclass
class StageDecl:
    """A ``[stages.NAME]`` table, with its stage class looked up and params validated
    (``auto`` is resolved per task by the planner, where the device class is known)."""

    name: str
    type_name: str
    stage_cls: type
    inputs: list[str]
    params: dict[str, Any]
    seed: int
    require: list = field(default_factory=list)  # bakery.pipeline.gates.Gate
    dispatch_timeout: float | None = None  # seconds; None: the project's

    @property
    def upstream(self) -> list[str]:
        return [i[len(STAGE_REF):] for i in self.inputs if i.startswith(STAGE_REF)]


@dataclass
class Pipeline:
    path: Path
    root: Path
    name: str
    out: Path
    cache: Path
    device: str
    seed: int
    plugins: list[str]
    runner: str = "local"      # local | ray (``bakery bake --runner`` overrides it)
    dispatch_timeout: float = 600.0  # seconds one device submission may run (bakery.device)
    assets: dict[str, list[Asset]] = field(default_factory=dict)
    stages: dict[str, StageDecl] = field(default_factory=dict)
    source: SourceMap | None = None

    def where(self, key: str | tuple[str, ...]) -> str:
        line = self.source.line_of(key) if self.source else None
        return f"{display_path(self.path)}:{line or 1}"


class _Collector:
    """Gathers one-line errors located by key path."""

    def __init__(self, path: Path, source: SourceMap):
        self.path, self.source, self.lines = path, source, []

    def where(self, key: str) -> str:
        return f"{display_path(self.path)}:{self.source.line_of(key) or 1}"

    def add(self, key: str, message: str) -> None:
        self.lines.append(UsageError(message, where=self.where(key), key=key).one_line())

    def add_usage(self, e: UsageError) -> None:
        """Re-locates an error raised with only a key (e.g. by resolve_params)."""
        self.add(e.key or "", e.message) if e.key else self.lines.append(e.one_line())


def _inside(root: Path, value: str, c: _Collector, key: str) -> Path | None:
    p = (root / value).resolve()
    if not p.is_relative_to(root):
        c.add(key, f"path {value!r} escapes the pipeline folder {display_path(root)}")
        return None
    return p


def _check_gates(c: "_Collector", key: str, gates: list, stage_cls) -> None:
    """A gate must name a metric the stage reports (its ``metric_docs``; ``psnr_db.*``
    covers ``psnr_db.normal``), so a typo fails ``--dry-run`` rather than every task."""
    docs = getattr(stage_cls, "metric_docs", None)
    if not docs:
        return  # a stage that does not list its metrics is checked on its bundles
    for g in gates:
        head = g.metric.partition(".")[0]
        if g.metric in docs or (g.metric != head and f"{head}.*" in docs):
            continue
        names = [n.replace(".*", ".NAME") for n in docs]
        c.add(f"{key}.{g.metric}", f"the stage reports no metric {g.metric!r}"
              f"{did_you_mean(g.metric, [n.replace('.*', '') for n in docs])} (it reports: {', '.join(names)})")


def _expect(c: _Collector, key: str, value: Any, types: type | tuple, what: str) -> bool:
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        ok = False
    else:
        ok = isinstance(value, types)
    if not ok:
        c.add(key, f"expected {what}, got {value!r}")
    return ok


def _timeout(c: _Collector, key: str, value: Any) -> float | None:
    """A ``dispatch_timeout``: seconds, finite, in (0, 1e6]."""
    import math

    if _expect(c, key, value, (int, float), "a number of seconds"):
        if math.isfinite(value) and 0 < value <= 1e6:
            return float(value)
        c.add(key, f"{value!r} is out of range (allowed seconds in (0, 1e6], default 600)")
    return None


def _parse(path: Path) -> tuple[dict, SourceMap]:
    if not path.is_file():
        raise ConfigError([f"{display_path(path)}:1: pipeline: file not found"])
    try:
        text = path.read_text(encoding="utf-8-sig")  # a BOM (Windows editors) is not TOML
    except UnicodeDecodeError as e:
        raise ConfigError([f"{display_path(path)}:1: pipeline: not UTF-8 text (byte {e.start})"]) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError.from_toml(path, e) from None
    return doc, SourceMap(text)


def load_project_paths(path: str | Path) -> tuple[Path, Path]:
    """Only ``(out, cache)`` of a pipeline: ``bakery clean`` must work even when assets or
    stages no longer validate."""
    path = Path(path)
    doc, source = _parse(path)
    c = _Collector(path, source)
    root = path.resolve().parent
    proj = doc.get("project", {}) if isinstance(doc.get("project", {}), dict) else {}
    found = []
    for key, default in (("out", "out"), ("cache", ".bakery-cache")):
        v = proj.get(key, default)
        p = _inside(root, v, c, f"project.{key}") if _expect(c, f"project.{key}", v, str, "a path string") else None
        if p == root:
            c.add(f"project.{key}", "must be a folder below the pipeline folder, not the folder itself")
        found.append(p)
    if not c.lines:
        assets = declared_asset_paths(doc.get("assets"), root, found)
        for key, message in path_overlaps(found[0], found[1], path.resolve(), assets):
            c.add(key, message)
    if c.lines:
        raise ConfigError(c.lines)
    return found[0], found[1]


def load_pipeline(path: str | Path) -> Pipeline:
    """Reads and validates a pipeline file; raises :class:`ConfigError` listing every problem."""
    path = Path(path)
    doc, source = _parse(path)
    c = _Collector(path, source)
    root = path.resolve().parent

    for k in doc:
        if k not in ("project", "assets", "stages"):
            c.add(k, "unknown table" + did_you_mean(k, ("project", "assets", "stages")) + " (known: project, assets, stages)")

    proj = doc.get("project", {})
    if not isinstance(proj, dict):
        c.add("project", "expected a table")
        proj = {}
    for k in proj:
        if k not in _PROJECT_KEYS:
            c.add(f"project.{k}", f"unknown key{did_you_mean(k, _PROJECT_KEYS)} (known: {', '.join(sorted(_PROJECT_KEYS))})")
    name = proj.get("name", root.name)
    _expect(c, "project.name", name, str, "a string")
    out = cache = None
    for key, default in (("out", "out"), ("cache", ".bakery-cache")):
        v = proj.get(key, default)
        if _expect(c, f"project.{key}", v, str, "a path string"):
            p = _inside(root, v, c, f"project.{key}")
            if p == root:
                c.add(f"project.{key}", "must be a folder below the pipeline folder, not the folder itself")
            elif key == "out":
                out = p
            else:
                cache = p
    device = proj.get("device", "auto")
    if _expect(c, "project.device", device, str, "a string") and device not in DEVICE_KINDS:
        c.add("project.device", f"unknown device {device!r}{did_you_mean(device, DEVICE_KINDS)} (allowed: {', '.join(DEVICE_KINDS)})")
    runner = proj.get("runner", "local")
    if _expect(c, "project.runner", runner, str, "a string") and runner not in RUNNERS:
        c.add("project.runner", f"unknown runner {runner!r}{did_you_mean(runner, RUNNERS)} (allowed: {', '.join(RUNNERS)})")
    seed = proj.get("seed", 0)
    if _expect(c, "project.seed", seed, int, "an integer") and seed < 0:
        c.add("project.seed", f"{seed} is out of range (allowed int >= 0, default 0)")
    dispatch_timeout = _timeout(c, "project.dispatch_timeout", proj.get("dispatch_timeout", 600.0))
    plugins = proj.get("plugins", [])
    if not (isinstance(plugins, list) and all(isinstance(x, str) for x in plugins)):
        c.add("project.plugins", "expected a list of module names")
        plugins = []
    _import_plugins(root, plugins, c)

    pipe = Pipeline(path=path, root=root, name=str(name), out=out or root / "out",
                    cache=cache or root / ".bakery-cache", device=str(device),
                    seed=seed if isinstance(seed, int) else 0, plugins=plugins, source=source,
                    runner=runner if runner in RUNNERS else "local", dispatch_timeout=dispatch_timeout or 600.0)
    convention = proj.get("normal_convention")
    if convention is not None and convention not in NORMAL_CONVENTIONS:
        c.add("project.normal_convention", f"expected one of {', '.join(NORMAL_CONVENTIONS)}, got {convention!r}")
        convention = None
    pipe.assets = _load_assets(doc.get("assets", {}), root, c, asset_roles(), generated=(pipe.out, pipe.cache),
                               normal_convention=convention)
    if out and cache:
        for key, message in path_overlaps(out, cache, path.resolve(), _source_paths(pipe.assets, doc)):
            c.add(key, message)
    declared = set(doc["assets"]) if isinstance(doc.get("assets"), dict) else set()
    pipe.stages = _load_stages(doc.get("stages", {}), pipe, declared, c)
    if not c.lines:
        cycle = find_cycle({n: s.upstream for n, s in pipe.stages.items()})
        if cycle:
            c.add(f"stages.{cycle[0]}.inputs", "dependency cycle: " + " -> ".join(cycle))
    if c.lines:
        raise ConfigError(c.lines)
    return pipe


def _import_plugins(root: Path, plugins: list[str], c: _Collector) -> None:
    """Imports studio stage modules; the pipeline folder is importable for local ones."""
    if plugins and str(root) not in sys.path:
        sys.path.insert(0, str(root))
    for mod in plugins:
        try:
            importlib.import_module(mod)
        except Exception as e:  # noqa: BLE001 - any import failure is a config problem
            c.add("project.plugins", f"cannot import plugin {mod!r} ({type(e).__name__}: {e})")
        except SystemExit as e:  # a plugin that calls sys.exit() at import must not end the bake "successfully"
            c.add("project.plugins", f"plugin {mod!r} exited while being imported (exit code {e.code!r})")


def asset_roles() -> tuple[str, ...]:
    """Roles an asset may declare: the texture roles (a material folder's files are matched
    by stem) and every role a registered stage reads (``fit``: a fit spec), plugins' too."""
    from bakery.stages import known_input_roles

    return tuple(dict.fromkeys((*ROLE_TABLE, *known_input_roles())))


def _is_glob(s: str) -> bool:
    return any(ch in _GLOB_CHARS for ch in s)


def _matches(root: Path, pattern: str, c: _Collector, key: str, *, dirs: bool,
             generated: tuple[Path, ...] = ()) -> list[Path]:
    if _inside(root, pattern, c, key) is None:
        return []
    found = sorted(Path(p).resolve() for p in globlib.glob(str(root / pattern)))
    found = [p for p in found if (p.is_dir() if dirs else p.is_file()) and p.is_relative_to(root)
             and not is_generated(p, skipped_by_glob(root, pattern, generated))]  # never bakery's own outputs
    if not found:
        fixed = Path(*[part for part in _parts_before_glob(pattern)]) if not Path(pattern).is_absolute() else None
        if fixed is not None and fixed.parts and not (root / fixed).exists():
            c.add(key, f"{fixed.as_posix()} not found (in {display_path(root)}; the pattern is {pattern!r})")
        else:
            c.add(key, f"no {'folder' if dirs else 'file'} matches {pattern!r}")
    return found


def _parts_before_glob(pattern: str) -> list[str]:
    """``assets/textures/*.png`` -> ``["assets", "textures"]``: the folders a pattern names outright."""
    parts = []
    for part in Path(pattern).parts[:-1] if _is_glob(pattern) else Path(pattern).parts:
        if _is_glob(part):
            break
        parts.append(part)
    return parts


def _load_assets(table: Any, root: Path, c: _Collector, roles: tuple[str, ...],
                 generated: tuple[Path, ...] = (), normal_convention: str | None = None) -> dict[str, list[Asset]]:
    """``[assets.NAME]``: roles -> files, one role with a glob (one asset per file), or
    ``material = "dir-glob"`` (one material per folder, roles from file names by the
    studio naming conventions, bakery.naming; ``channels`` declares packings explicitly).
    ``normal_convention`` (per asset, or the project's) says how normal maps are stored."""
    if not isinstance(table, dict):
        c.add("assets", "expected tables [assets.NAME]")
        return {}
    assets: dict[str, list[Asset]] = {}
    for name, decl in table.items():
        key = f"assets.{name}"
        if not _NAME.match(name):
            c.add(key, "asset names use letters, digits, '_', '-', '.'")
            continue
        if not isinstance(decl, dict) or not decl:
            c.add(key, f"expected a table of roles ({', '.join(roles)}) or material = \"folder glob\"")
            continue
        unknown = [k for k in decl if k not in roles and k not in _ASSET_KEYS]
        for k in unknown:
            c.add(f"{key}.{k}", f"unknown role{did_you_mean(k, (*roles, *_ASSET_KEYS))} (known: {', '.join(roles)}, or {', '.join(_ASSET_KEYS)})")
        if unknown:
            continue
        given = {k: v for k, v in decl.items() if k in roles}
        bad = [k for k, v in given.items() if not isinstance(v, str)]
        for k in bad:
            c.add(f"{key}.{k}", f"expected a path string, got {given[k]!r}")
        if bad:
            continue
        convention = decl.get("normal_convention", normal_convention)
        if convention is not None and convention not in NORMAL_CONVENTIONS:
            c.add(f"{key}.normal_convention", f"expected one of {', '.join(NORMAL_CONVENTIONS)}, got {convention!r}")
            continue
        channels = decl.get("channels")
        if channels is not None and not (isinstance(channels, dict) and "material" in decl
                                         and all(isinstance(v, str) for v in channels.values())):
            c.add(f"{key}.channels", "expected channels = { ROLE = \"FILE.CHANNELS\", ... } beside material = "
                                     "\"folder glob\" (FILE: a file of the folder, by name or suffix)")
            continue
        if "material" in decl:
            if given:
                c.add(f"{key}.material", "use either material = \"folder glob\" or explicit roles, not both")
                continue
            assets[name] = _material_assets(name, decl["material"], root, c, roles, generated, channels, convention)
        elif len(given) == 1 and _is_glob(next(iter(given.values()))):
            role, pattern = next(iter(given.items()))
            insts = [Asset(f"{name}/{p.stem}", {role: p}, name)
                     for p in _matches(root, pattern, c, f"{key}.{role}", dirs=False, generated=generated)]
            _check_unique(insts, c, f"{key}.{role}")
            assets[name] = insts
        else:
            files = {}
            for role, value in given.items():
                if _is_glob(value):
                    c.add(f"{key}.{role}", "globs are allowed only in single-role assets and material")
                    continue
                p = _inside(root, value, c, f"{key}.{role}")
                if p is None:
                    continue
                if not p.is_file():
                    c.add(f"{key}.{role}", f"input file not found: {value}")
                    continue
                files[Binding(role, p).with_convention(convention or "gl").key() if role == "normal" else role] = p
            if len(files) == len(given):
                assets[name] = [Asset(name, files, name)]
    return assets


def _material_assets(name: str, pattern: Any, root: Path, c: _Collector, roles: tuple[str, ...],
                     generated: tuple[Path, ...] = (), channels: dict | None = None,
                     convention: str | None = None) -> list[Asset]:
    key = f"assets.{name}.material"
    if not isinstance(pattern, str):
        c.add(key, f"expected a folder path or glob, got {pattern!r}")
        return []
    insts = []
    for d in _matches(root, pattern, c, key, dirs=True, generated=generated):
        try:
            files = role_files(d, roles, channels=channels, normal_convention=convention)
        except UsageError as e:
            c.add(key, e.message)
            continue
        inst_name = f"{name}/{d.name}" if _is_glob(pattern) else name
        insts.append(Asset(inst_name, files, name))
    _check_unique(insts, c, key)
    return insts


def role_files(folder: Path, roles, *, channels: dict | None = None,
               normal_convention: str | None = None) -> dict[str, Path]:
    """A material folder's files as binding keys (``roughness.g``: see
    bakery.materials.Binding) -> paths, of the ``roles`` given, detected from the file
    names (bakery.naming.detect_roles; ``Albedo.PNG`` and ``Rock_BaseColor.png`` are the
    albedo) with ``channels`` declared explicitly winning. An undetectable or ambiguous
    folder is one UsageError listing what it saw."""
    found = detect_roles(Path(folder), explicit=channels, normal_convention=normal_convention, plain_roles=roles)
    files = {b.key(): b.path for role, b in found.items() if role in roles}
    if not files:
        raise undetected(Path(folder), sorted(p for p in Path(folder).iterdir() if p.is_file()))
    return files


def _source_paths(assets: dict[str, list[Asset]], doc: dict) -> list[Path]:
    """Every source file, and every material folder, of the loaded assets."""
    table = doc.get("assets") if isinstance(doc.get("assets"), dict) else {}
    paths = [p for insts in assets.values() for a in insts for p in a.files.values()]
    paths += [p.parent for insts in assets.values() for a in insts
              if "material" in (table.get(a.declared_as) or {}) for p in a.files.values()]
    return paths


def _check_unique(insts: list[Asset], c: _Collector, key: str) -> None:
    seen = set()
    for a in insts:
        part = a.name.split("/", 1)[-1]
        if part in ("", ".", "..") or any(ord(ch) < 32 or ord(ch) == 127 for ch in part):
            c.add(key, f"a match gives the asset name {a.name!r}, which cannot name an output folder; rename "
                       "the file or folder")
        if a.name in seen:
            c.add(key, f"two matches give the same asset name {a.name!r}; rename one")
        seen.add(a.name)


def _load_stages(table: Any, pipe: Pipeline, declared_assets: set[str], c: _Collector) -> dict[str, StageDecl]:
    from bakery.pipeline.gates import parse_require
    from bakery.stages import get_stage

    if not isinstance(table, dict):
        c.add("stages", "expected tables [stages.NAME]")
        return {}
    stages: dict[str, StageDecl] = {}
    for name, decl in table.items():
        key = f"stages.{name}"
        if not _NAME.match(name) or "." in name:
            c.add(key, "stage names use letters, digits, '_', '-'")
            continue
        if not isinstance(decl, dict):
            c.add(key, "expected a table")
            continue
        for k in decl:
            if k not in _STAGE_KEYS:
                c.add(f"{key}.{k}", f"unknown key{did_you_mean(k, _STAGE_KEYS)} (known: {', '.join(sorted(_STAGE_KEYS))})")
        type_name = decl.get("type")
        if type_name is None:
            c.add(key, "missing key 'type' (the stage type)")
            continue
        if not _expect(c, f"{key}.type", type_name, str, "a stage type name"):
            continue
        try:
            stage_cls = get_stage(type_name, where=c.where(f"{key}.type"), key=f"{key}.type")
        except UsageError as e:
            c.lines.append(e.one_line())
            continue
        raw = decl.get("params", {})
        params = None
        if _expect(c, f"{key}.params", raw, dict, "a table of parameters"):
            try:
                params = stage_cls.validate(raw, key_prefix=f"{key}.params")
            except UsageError as e:
                c.add_usage(e)
        require = parse_require(decl["require"], f"{key}.require", c.add, c.where) if "require" in decl else []
        _check_gates(c, f"{key}.require", require, stage_cls)
        timeout = _timeout(c, f"{key}.dispatch_timeout", decl["dispatch_timeout"]) if "dispatch_timeout" in decl else None
        seed = decl.get("seed", pipe.seed)
        if _expect(c, f"{key}.seed", seed, int, "an integer") and seed < 0:
            c.add(f"{key}.seed", f"{seed} is out of range (allowed int >= 0, default {pipe.seed})")
        inputs = decl.get("inputs")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not (isinstance(inputs, list) and inputs and all(isinstance(i, str) for i in inputs)):
            c.add(f"{key}.inputs" if "inputs" in decl else key,
                  "expected inputs = [\"ASSET\", \"stage:NAME\", ...] (at least one)")
            continue
        ok = True
        for i in inputs:
            if i.startswith(STAGE_REF):
                up = i[len(STAGE_REF):]
                if up not in table:
                    c.add(f"{key}.inputs", f"unknown stage {up!r} in {i!r}{did_you_mean(up, table)} (stages: {', '.join(table)})")
                    ok = False
                elif not stage_cls.reads_bundles:
                    c.add(f"{key}.inputs", f"{i!r}: stage type {type_name!r} reads source files "
                                            f"({', '.join(stage_cls.input_roles)}), not another stage's bundle")
                    ok = False
            elif i not in pipe.assets:
                if i not in declared_assets:  # a declared but broken asset is reported already
                    known = ", ".join(sorted(declared_assets)) or "none"
                    c.add(f"{key}.inputs", f"unknown asset {i!r}{did_you_mean(i, declared_assets)} (assets: {known})")
                ok = False
            else:
                accepted = set(stage_cls.input_roles)
                for a in pipe.assets[i]:
                    if not accepted & role_names(a.files):
                        c.add(f"{key}.inputs", f"asset {a.name!r} has roles {', '.join(a.files)} but stage "
                                                f"type {type_name!r} accepts {', '.join(stage_cls.input_roles)}")
                        ok = False
                        break
        if ok and params is not None and isinstance(seed, int):
            stages[name] = StageDecl(name, type_name, stage_cls, inputs, params, seed, require, timeout)
    return stages
