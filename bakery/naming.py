"""Which file of a material folder holds which role: the naming conventions studios use.

A texture library is read as it is exported: the role comes from the suffix of the file
stem (case-insensitive, after ``_`` or ``-``, a trailing resolution tag such as ``_2k``
ignored), a packed map is split into the roles its channels hold, and a normal map's
convention (OpenGL +Y or DirectX -Y) comes from its name. :data:`CONVENTIONS` is the one
table; :func:`detect_roles` applies it, and an explicit ``channels`` declaration
(:func:`parse_channel_ref`) always wins over it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from bakery.errors import UsageError
from bakery.materials import ROLE_TABLE, Binding

#: File extensions read as textures (bakery.formats.images.load_image).
TEXTURE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tga", ".tif", ".tiff", ".exr", ".bmp")
_RESOLUTION_TAG = re.compile(r"[_-]\d+k$")


@dataclass(frozen=True)
class Convention:
    """One row: a stem suffix, the roles its file holds (``role`` or ``role.selector``,
    the grammar of :class:`bakery.materials.Binding`), and who names files this way."""

    suffix: str
    holds: tuple[str, ...]
    source: str


def _rows(source: str, **suffixes: str | tuple[str, ...]) -> list[Convention]:
    return [Convention(s.lower(), (h,) if isinstance(h, str) else h, source) for s, h in suffixes.items()]


_ORM = ("ao.r", "roughness.g", "metalness.b")
#: Every suffix bakery knows. Sources: ambientCG's downloads (e.g. ``Bricks076C_2K-PNG_Color``);
#: Poly Haven's (``rock_wall_diff_2k``; ``arm`` = R AO, G roughness, B metalness);
#: Substance 3D Painter/Designer export presets; the glTF 2.0 material model
#: (``metallicRoughness``: G roughness, B metalness; normals +Y); Unreal Engine's texture
#: naming (``T_X_D``, ``_N``, ``_ORM``; normals DirectX -Y); Unity HDRP's Lit shader
#: (``_MaskMap``: R metallic, G AO, B detail mask, A smoothness = 1 - roughness; the
#: Lit shader's map names ``_BaseColorMap``, ``_NormalMap``, ``_EmissiveMap``; normals +Y).
CONVENTIONS: tuple[Convention, ...] = tuple(
    _rows("plain role names", **{r: r for r in ROLE_TABLE if r != "displacement"})
    + _rows("ambientCG", color="albedo", normalgl="normal.gl", normaldx="normal.dx", roughness="roughness",
            metalness="metalness", ambientocclusion="ao", displacement="height", opacity="opacity",
            emission="emissive")
    + _rows("Poly Haven", diff="albedo", nor_gl="normal.gl", nor_dx="normal.dx", rough="roughness",
            metal="metalness", ao="ao", disp="height", arm=_ORM)
    + _rows("Substance 3D Painter / Designer", basecolor="albedo", normal="normal.gl", roughness="roughness",
            metallic="metalness", height="height", mixed_ao="ao", occlusionroughnessmetallic=_ORM)
    + _rows("glTF 2.0", basecolor="albedo", metallicroughness=("roughness.g", "metalness.b"),
            occlusionroughnessmetallic=_ORM, emissive="emissive", normal="normal.gl")
    + _rows("Unreal Engine", d="albedo", n="normal.dx", orm=_ORM)
    + _rows("Unity HDRP", maskmap=("metalness.r", "ao.g", "roughness.a.inverted"), basemap="albedo",
            basecolormap="albedo", normalmap="normal.gl", emissivemap="emissive")
)


def known_suffixes() -> list[str]:
    """Every suffix of the table, once, in table order (for messages and docs)."""
    return list(dict.fromkeys(c.suffix for c in CONVENTIONS))


def _lookup() -> dict[str, tuple[str, ...]]:
    """suffix -> what it holds. A suffix several conventions share means the same there
    (``_Roughness``, ``_Normal``) except ``normal``, which is OpenGL in every one."""
    out: dict[str, tuple[str, ...]] = {}
    for c in CONVENTIONS:
        if c.suffix == "normal":
            out[c.suffix] = ("normal.gl",)
        else:
            out.setdefault(c.suffix, c.holds)
    return out


_SUFFIXES = _lookup()
_BY_LENGTH = sorted(_SUFFIXES, key=len, reverse=True)


def suffix_of(path: Path) -> str | None:
    """The known suffix a texture file's name ends in (longest match), else None."""
    if path.suffix.lower() not in TEXTURE_EXTENSIONS:
        return None
    stem = _RESOLUTION_TAG.sub("", path.stem.lower())
    for s in _BY_LENGTH:
        if stem == s or stem.endswith("_" + s) or stem.endswith("-" + s) or stem.endswith(" " + s):
            return s
    return None


def detect_roles(folder: Path, *, explicit: Mapping[str, str] | None = None,
                 normal_convention: str | None = None, plain_roles: Iterable[str] = ()) -> dict[str, Binding]:
    """Role -> :class:`Binding` (file, channels, normal convention) of a material folder.

    A file named for one role beats a packed map's channel of it; an OpenGL/DirectX pair
    of one normal map (ambientCG ships both) gives the OpenGL one. ``explicit`` (role ->
    ``"FILE.channels"``, see :func:`parse_channel_ref`) wins over detection;
    ``normal_convention`` (``gl``/``dx``) over the convention a name implies.
    ``plain_roles`` outside the table (a plugin stage's) match a file whose stem is the
    role's name. An
    ambiguous or empty folder is one :class:`UsageError` listing the files seen, the
    suffixes known and the explicit syntax.
    """
    folder = Path(folder)
    files = sorted(p for p in folder.iterdir() if p.is_file())
    candidates: dict[str, list[tuple[bool, Binding]]] = {}
    plain = {r.lower() for r in plain_roles} - set(ROLE_TABLE)
    for p in files:
        s = suffix_of(p)
        if s is None and p.stem.lower() in plain:
            s = p.stem.lower()
        if s is None:
            continue
        holds = _SUFFIXES.get(s, (s,))
        for h in holds:
            b = Binding.parse(h, p.resolve())
            candidates.setdefault(b.role, []).append((len(holds) == 1, b))
    out: dict[str, Binding] = {}
    for role, found in candidates.items():
        dedicated = [b for whole, b in found if whole] or [b for _, b in found]
        if len(dedicated) == 2 and {b.convention for b in dedicated} == {"gl", "dx"} and role == "normal":
            dedicated = [b for b in dedicated if b.convention == "gl"]
        if len(dedicated) > 1 and not (explicit and role in explicit):
            names = " and ".join(b.describe(folder) for b in dedicated)
            raise UsageError(f"two files for role {role!r} in {_shown(folder)}: {names}; keep one or declare "
                             f"it: channels = {{ {role} = \"FILE.CHANNELS\" }}", key=role)
        out[role] = dedicated[0]
    for role, ref in (explicit or {}).items():
        out[role] = parse_channel_ref(role, ref, folder)
    if normal_convention and "normal" in out:
        out["normal"] = out["normal"].with_convention(normal_convention)
    if not out:
        raise undetected(folder, files)
    order = list(ROLE_TABLE)
    return dict(sorted(out.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))


def undetected(folder: Path, files: list[Path]) -> UsageError:
    """The one-line error of a folder where no file's name says its role."""
    seen = ", ".join(p.name for p in files[:12]) + (f" (+{len(files) - 12} more)" if len(files) > 12 else "")
    return UsageError(f"no file's name in {_shown(folder)} says its role (files: {seen or 'none'}; known "
                      f"suffixes: {', '.join('_' + s for s in known_suffixes())}); name them so or declare them: "
                      "channels = { albedo = \"FILE\", roughness = \"FILE.g\", ... }", key="material")


def _shown(folder: Path) -> str:
    """``folder`` relative to the working directory when below it (shorter messages)."""
    try:
        return str(Path(folder).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(folder)


def parse_channel_ref(role: str, ref: str, folder: Path) -> Binding:
    """An explicit declaration ``"FILE[.CHANNELS]"``, ``"1-FILE.CHANNEL"`` for an inverted
    channel (HDRP smoothness as roughness): FILE is a file of ``folder`` named by its full
    name, its stem or its stem's suffix (``orm`` finds ``Rock_ORM.png``); CHANNELS are
    letters of ``rgba``."""
    if role not in ROLE_TABLE:
        raise UsageError(f"unknown role {role!r} (known: {', '.join(ROLE_TABLE)})", key=f"channels.{role}")
    text = ref.strip()
    invert = text.startswith("1-")
    text = text[2:].strip() if invert else text
    name, _, channels = text.rpartition(".")
    if not name or not re.fullmatch(r"[rgba]{1,4}", channels.lower()):
        name, channels = text, ""
    path = _find_file(folder, name, role)
    if path is None:
        shown = ", ".join(sorted(p.name for p in folder.iterdir() if p.is_file())) or "none"
        raise UsageError(f"{ref!r} names no file of the folder (files: {shown}); expected "
                         f"\"FILE.CHANNELS\" such as \"orm.g\"", where=str(folder), key=f"channels.{role}")
    return Binding(role, path.resolve(), channels.lower(), invert=invert).with_convention(implied_convention(path))


def implied_convention(path: Path) -> str:
    """The normal convention a file's name implies (``_NormalDX``, ``_nor_dx``, Unreal's
    ``_N``), else OpenGL."""
    holds = _SUFFIXES.get(suffix_of(path) or "", ())
    return "dx" if "normal.dx" in holds else "gl"


def _find_file(folder: Path, name: str, role: str) -> Path | None:
    name = name.lower()
    files = [p for p in sorted(folder.iterdir()) if p.is_file()]
    for test in (lambda p: p.name.lower() == name, lambda p: p.stem.lower() == name,
                 lambda p: _RESOLUTION_TAG.sub("", p.stem.lower()).endswith(("_" + name, "-" + name))):
        found = [p for p in files if test(p) and p.suffix.lower() in TEXTURE_EXTENSIONS]
        if len(found) > 1:
            raise UsageError(f"{name!r} matches {', '.join(p.name for p in found)}; name one file",
                             where=str(folder), key=f"channels.{role}")
        if found:
            return found[0]
    return None


def describe_folder(folder: Path, found: Mapping[str, Binding]) -> list[str]:
    """``role  <- file.channel  (notes)`` lines: what ``bakery inspect-inputs`` prints."""
    width = max((len(r) for r in found), default=0)
    lines = []
    for role, b in found.items():
        note = f"  (normal {'DirectX -Y, turned OpenGL on load' if b.convention == 'dx' else 'OpenGL +Y'})" \
            if role == "normal" else ""
        lines.append(f"  {role:<{width}}  <- {b.describe(folder)}{note}")
    albedo = found.get("albedo")
    if albedo is not None and "opacity" not in found and not albedo.channels and _has_alpha(albedo.path):
        lines.append(f"  {'opacity':<{width}}  <- {albedo.describe(folder)}.a  (the albedo's alpha)")
    return lines


def _has_alpha(path: Path) -> bool:
    from PIL import Image

    try:
        with Image.open(path) as im:
            return "A" in im.getbands()
    except OSError:
        return False
