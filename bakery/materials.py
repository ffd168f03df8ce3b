"""Texture roles and material texture sets: the one table of what a role is.

A pipeline asset names its files by role (``image``, ``albedo``, ``normal``, ...), each
a :class:`Binding` (which file, which channels, which normal convention; a material
folder's come from its file names, bakery.naming). :func:`load_textures` is the one
reader every material stage uses: packed maps split, normals in OpenGL convention under
one policy (:func:`unit_normals`). Stages that read a whole material stack its textures
as one multi-channel image (:func:`load_material`), in the table's role order, so a
decoder's outputs map to textures the same way in every bundle. Colour (albedo) stays in
its sRGB storage space: a loss compares what the engine will sample. Normals are 3
channels in [0, 1] storage space.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from bakery.errors import UsageError, did_you_mean
from bakery.formats.images import load_image


@dataclass(frozen=True)
class Role:
    """What one texture role holds."""

    channels: int | None      # channels kept (None: as the file has)
    srgb: bool = False        # authored in sRGB: BC1/BC7 outputs are tagged sRGB
    in_material_set: bool = True  # stacked into a material set (False: read on its own)


#: Every role a pipeline asset may declare; material-set roles in channel order.
ROLE_TABLE = {
    "albedo": Role(None, srgb=True), "normal": Role(3), "roughness": Role(1), "metalness": Role(1),
    "ao": Role(1), "height": Role(1), "emissive": Role(3), "opacity": Role(1), "specular": Role(1),
    "image": Role(None, in_material_set=False), "displacement": Role(1, in_material_set=False),
    "mask": Role(1, in_material_set=False),
}
#: Roles a material set stacks, in channel order, with their channel counts.
ROLES = {name: r.channels for name, r in ROLE_TABLE.items() if r.in_material_set}
#: Roles authored in sRGB.
SRGB_ROLES = tuple(name for name, r in ROLE_TABLE.items() if r.srgb)
MAX_CHANNELS = 16
#: Normal map conventions: OpenGL (+Y, glTF, MaterialX, Blender, Unity) is the one bakery
#: works in; DirectX (-Y, Unreal, 3ds Max) is converted on load by flipping green.
NORMAL_CONVENTIONS = ("gl", "dx")
_CHANNEL_INDEX = {"r": 0, "g": 1, "b": 2, "a": 3}


@dataclass(frozen=True)
class Binding:
    """Where one role is read from: a file, which of its channels (``""``: the role's
    default ones), inverted or not (HDRP smoothness as roughness), and for a normal map
    its convention. An asset's ``files`` carry bindings as keys, ``role`` or
    ``role.CHANNELS[.inverted][.dx]`` (:meth:`key`), so the cache key, the planner and the
    workers see them as they see any role."""

    role: str
    path: Path
    channels: str = ""
    invert: bool = False
    convention: str = "gl"

    @classmethod
    def parse(cls, key: str, path: Path) -> "Binding":
        role, *rest = key.split(".")
        fields: dict = {}
        for token in rest:
            if token == "inverted":
                fields["invert"] = True
            elif token in NORMAL_CONVENTIONS:
                fields["convention"] = token
            elif token and all(ch in _CHANNEL_INDEX for ch in token):
                fields["channels"] = token
            else:
                raise UsageError(f"{token!r} in {key!r} is not a channel selection (letters of rgba), "
                                 f"'inverted' or a normal convention ({', '.join(NORMAL_CONVENTIONS)})", key=key)
        return cls(role, Path(path), **fields)

    def key(self) -> str:
        parts = [self.role, self.channels, "inverted" if self.invert else "",
                 self.convention if self.convention != "gl" else ""]
        return ".".join(p for p in parts if p)

    def with_convention(self, convention: str) -> "Binding":
        if convention not in NORMAL_CONVENTIONS:
            raise UsageError(f"normal convention {convention!r}: expected one of {', '.join(NORMAL_CONVENTIONS)}",
                             key="normal_convention")
        return Binding(self.role, self.path, self.channels, self.invert, convention if self.role == "normal" else "gl")

    def describe(self, folder: Path | None = None) -> str:
        """``1 - file.png.a`` as messages and ``inspect-inputs`` show it."""
        name = self.path.name if folder is not None and self.path.parent == Path(folder).resolve() else str(self.path)
        text = f"{name}.{self.channels}" if self.channels else name
        return f"1 - {text}" if self.invert else text


def bindings(files: Mapping[str, Path]) -> dict[str, Binding]:
    """An asset's ``files`` (binding keys -> paths) as role -> Binding; one role twice is
    an error naming both."""
    out: dict[str, Binding] = {}
    for key, path in files.items():
        b = Binding.parse(key, path)
        if b.role in out:
            raise UsageError(f"role {b.role!r} is given twice: {out[b.role].describe()} and {b.describe()}", key=key)
        out[b.role] = b
    return out


def binding_role(key: str) -> str:
    """The role of a binding key (``roughness.g`` -> ``roughness``)."""
    return key.split(".")[0]


def role_names(files: Mapping[str, Path]) -> set[str]:
    """The roles an asset's ``files`` give (binding keys without their selections)."""
    return {binding_role(key) for key in files}


@dataclass(frozen=True)
class MaterialSet:
    roles: tuple[str, ...]
    slices: tuple[tuple[int, int], ...]  # (first channel, channel count) per role
    image: np.ndarray                    # [H, W, C] float32
    renormalised: int = 0                # normal texels that were off unit (see unit_normals)
    notes: tuple[str, ...] = ()          # what loading chose for the user (Textures.notes)

    @property
    def channels(self) -> int:
        return self.image.shape[2]

    @property
    def normal_channel(self) -> int:
        return self.slices[self.roles.index("normal")][0] if "normal" in self.roles else -1

    def split(self, image: np.ndarray) -> dict[str, np.ndarray]:
        return {r: image[..., a:a + n] for r, (a, n) in zip(self.roles, self.slices)}


#: How far a decoded normal's length may be from 1 and still count as unit: 8-bit storage
#: is off by < 0.01, JPEG and resized maps by more.
UNIT_TOLERANCE = 0.06
#: Shorter than this, a normal has no direction to renormalise to: a few 8-bit steps
#: around the (128, 128, 128) "no normal" texel point anywhere.
MIN_NORMAL_LENGTH = 0.05


def unit_normals(stored: np.ndarray, *, where: str) -> tuple[np.ndarray, int]:
    """The one normal-map policy of every stage: [0, 1] storage -> unit vectors, and how
    many texels were off unit length by more than 8-bit storage explains (JPEG, resized
    maps; renormalised, the caller logs the count). Zero-length or non-finite texels have
    no direction and are refused with one line naming the first."""
    n = stored[..., :3].astype(np.float32) * 2.0 - 1.0
    length = np.linalg.norm(n, axis=-1)
    bad = ~np.isfinite(length) | (length < MIN_NORMAL_LENGTH)
    if bad.any():
        y, x = map(int, np.argwhere(bad)[0])
        raise UsageError(f"{int(bad.sum())} texel(s) have no direction (first at x={x}, y={y}: length "
                         f"{length[y, x]:.3g}); expected a tangent-space normal map encoded as n * 0.5 + 0.5",
                         where=where, key="normal")
    off = int((np.abs(length - 1.0) > UNIT_TOLERANCE).sum())
    return n / length[..., None], off


def renormalize_normals(image: np.ndarray, normal_channel: int, *, in_place: bool = False) -> np.ndarray:
    """Unit-length normals in [0, 1] storage space (what the loss and engines see);
    ``in_place``: into ``image`` itself (a fresh decode nobody else holds), not a copy."""
    if normal_channel < 0:
        return image
    out = image if in_place else image.copy()
    n = out[..., normal_channel:normal_channel + 3] * 2.0
    n -= 1.0
    squares = n * n   # x + y, then + z: (n * n).sum(-1)'s order, without its slow short-axis reduction
    length = squares[..., 0]
    length += squares[..., 1]
    length += squares[..., 2]
    length += 1e-6
    n /= np.sqrt(length, out=length)[..., None]
    n *= 0.5
    n += 0.5
    out[..., normal_channel:normal_channel + 3] = n
    return out


@dataclass(frozen=True)
class Textures:
    """A material's textures by role, in storage space ([0, 1], colour still sRGB), all of
    one size, each with the channel count its role keeps; ``sources`` names where each
    came from (for messages), ``renormalised`` counts normal texels that were off unit;
    ``notes`` say, one line each, what loading chose that the user did not declare (a
    channel kept, texels renormalised), for the task log."""

    maps: dict[str, np.ndarray]
    sources: dict[str, str]
    renormalised: int = 0
    notes: tuple[str, ...] = ()

    def __getitem__(self, role: str) -> np.ndarray:
        return self.maps[role]

    def __contains__(self, role: str) -> bool:
        return role in self.maps

    def __iter__(self):
        return iter(self.maps)

    def source(self, role: str) -> str:
        return self.sources[role]

    @property
    def shape(self) -> tuple[int, int]:
        """(height, width) shared by every texture."""
        return next(iter(self.maps.values())).shape[:2]


def load_textures(files: Mapping[str, Path], roles: Sequence[str] | None = None) -> Textures:
    """The one material reader: each role's texture (of ``roles``, default every
    material-set role) from its :class:`Binding`, in the role's channel count, checked.

    Packed maps are split by channel; a DirectX normal map is turned OpenGL (green
    flipped), a two-channel one (RG, as BC5 stores it) gets Z rebuilt, and texels off unit
    length are renormalised and counted (:func:`unit_normals`). An alpha channel in the
    albedo becomes ``opacity`` when the set has none. All textures must share one size:
    resampling would silently change what the artist authored, so a mismatch is an error
    naming both.
    """
    wanted = tuple(ROLES) if roles is None else tuple(roles)
    given = bindings(files)
    unknown = sorted(set(given) - set(ROLES))
    if unknown:
        hint = did_you_mean(unknown[0], ROLES) if len(unknown) == 1 else ""
        raise UsageError(f"unknown texture role(s) {', '.join(unknown)}{hint} (known: {', '.join(ROLES)})", key="inputs")
    peek_alpha = "albedo" in given and "opacity" not in given and "opacity" in wanted and not given["albedo"].channels
    read = _read_files([given[r] for r in ROLES if r in given and (r in wanted or (r == "albedo" and peek_alpha))])

    def image(b: Binding) -> np.ndarray:
        if b.path not in read:
            read[b.path] = load_image(b.path, key=b.role)
        return read[b.path]

    if peek_alpha:
        if image(given["albedo"]).shape[2] in (2, 4):  # LA or RGBA: the alpha is the opacity
            given["opacity"] = Binding("opacity", given["albedo"].path, "a" if read[given["albedo"].path].shape[2] == 4
                                       else "g")
    maps, sources, notes, first, off = {}, {}, [], None, 0
    for role in ROLES:
        if role not in given or role not in wanted:
            continue
        b = given[role]
        where = b.describe()
        img = _select(image(b), b, where, notes)
        if first is None:
            first = (role, img.shape[:2])
        elif img.shape[:2] != first[1]:
            raise UsageError(f"size {img.shape[1]}x{img.shape[0]} differs from {first[0]}'s "
                             f"{first[1][1]}x{first[1][0]}; textures of one material must share a size",
                             where=where, key=role)
        if role == "normal":
            img, off = _normal_policy(img, where)
            if off:
                notes.append(f"{off} normal texel(s) off unit length, renormalised")
        maps[role], sources[role] = img, where
    return Textures(maps, sources, off, tuple(notes))


#: Files of one material decoded at once: PNG and JPEG decoding releases the GIL, and a
#: 2048^2 material's five or six files are most of a stage's load time.
READ_THREADS = 4


def _read_files(bindings_in_order: list[Binding]) -> dict[Path, np.ndarray]:
    """Each distinct file of ``bindings_in_order`` decoded (on threads), by path; a file
    that cannot be read raises for the first binding naming it, in that order, as a
    one-at-a-time read would."""
    first = {}
    for b in bindings_in_order:
        first.setdefault(b.path, b.role)
    if len(first) <= 1:
        return {p: load_image(p, key=role) for p, role in first.items()}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(first))) as pool:
        futures = {p: pool.submit(load_image, p, key=role) for p, role in first.items()}
        return {p: f.result() for p, f in futures.items()}


def _select(img: np.ndarray, b: Binding, where: str, notes: list[str]) -> np.ndarray:
    """The channels ``b`` names, as many as its role keeps, in OpenGL convention. A
    one-channel role read from a file whose colour channels differ keeps the first and
    says so in ``notes`` (a declared channel chooses another)."""
    have = img.shape[2]
    if b.channels:
        missing = [ch for ch in b.channels if _CHANNEL_INDEX[ch] >= have]
        if missing:
            raise UsageError(f"channel {missing[0]} asked for {b.role}, the file has {have} channel(s)",
                             where=where, key=b.role)
        img = img[..., [_CHANNEL_INDEX[ch] for ch in b.channels]]
    want = ROLES[b.role]
    if b.role == "normal":
        img = _normal_xyz(img, where)
        if b.convention == "dx":
            img = img.copy()
            img[..., 1] = complement(img[..., 1])
    elif want == 1:
        colour = img[..., :3] if img.shape[2] >= 3 else img[..., :1]
        if colour.shape[2] > 1 and not (colour[..., 1:] == colour[..., :1]).all():
            notes.append(f"{b.role}: kept channel r of {where}, whose colour channels differ "
                         f"(declare another: channels = {{ {b.role} = \"{b.path.stem}.g\" }})")
        img = img[..., :1]
    elif want == 3:
        if img.shape[2] < 3:
            raise UsageError(f"{b.role} needs 3 channels, the file has {img.shape[2]}", where=where, key=b.role)
        img = img[..., :3]
    elif img.shape[2] in (2, 4) and not b.channels:  # albedo: its alpha is opacity, not colour
        img = img[..., :img.shape[2] - 1]
    if b.invert:
        img = complement(img)
    return np.ascontiguousarray(img, np.float32)


def complement(values: np.ndarray) -> np.ndarray:
    """``1 - values``, exact on the 8- or 16-bit grid the values were stored on: a
    DirectX map's flipped green (or HDRP smoothness turned roughness) equals, bit for
    bit, what the OpenGL twin (the roughness map) reads as."""
    values = np.asarray(values, np.float32)
    for q in (255, 65535):
        k = np.rint(values * q)
        if np.array_equal((k / q).astype(np.float32), values):
            return ((q - k) / q).astype(np.float32)
    return (1.0 - values).astype(np.float32)


def _normal_xyz(img: np.ndarray, where: str) -> np.ndarray:
    """Three storage-space channels: XYZ as stored, or XY with Z = sqrt(1 - x^2 - y^2)
    rebuilt (BC5-style two-channel maps; an L+A file counts as two channels)."""
    if img.shape[2] >= 3:
        return img[..., :3]
    if img.shape[2] != 2:
        raise UsageError(f"normal map has {img.shape[2]} channel(s); expected RGB = XYZ or RG = XY encoded as "
                         "n * 0.5 + 0.5", where=where, key="normal")
    xy = img * 2.0 - 1.0
    z = np.sqrt(np.clip(1.0 - (xy * xy).sum(-1, keepdims=True), 0.0, None))
    return np.concatenate([img, z * 0.5 + 0.5], -1)


def _normal_policy(stored: np.ndarray, where: str) -> tuple[np.ndarray, int]:
    """Storage-space normals with only the off-unit texels renormalised (the others keep
    their authored bytes), and how many there were."""
    unit, off = unit_normals(stored, where=where)
    if not off:
        return stored, 0
    n = stored * 2.0 - 1.0
    wrong = np.abs(np.linalg.norm(n, axis=-1) - 1.0) > UNIT_TOLERANCE
    out = stored.copy()
    out[wrong] = unit[wrong] * 0.5 + 0.5
    return out, off


def load_material(files: Mapping[str, Path]) -> MaterialSet:
    """A material's textures (:func:`load_textures`) stacked as one multi-channel image
    in the table's role order."""
    if not files:
        raise UsageError("no textures in material", key="inputs")
    textures = load_textures(files)
    roles, slices, c = [], [], 0
    for role in textures:
        roles.append(role)
        slices.append((c, textures[role].shape[2]))
        c += textures[role].shape[2]
    if c > MAX_CHANNELS:
        raise UsageError(f"{c} channels in the set; at most {MAX_CHANNELS} fit one decoder", key="inputs")
    return MaterialSet(tuple(roles), tuple(slices), np.concatenate([textures[r] for r in roles], -1).astype(np.float32),
                       textures.renormalised, textures.notes)
