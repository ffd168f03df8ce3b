"""Content-hash cache: a task's output is reused when everything that could change it is
unchanged.

Key = sha256 over: input file bytes (by role), the asset name, upstream task keys, params
(the values the stage runs with, ``auto`` resolved, and what the pipeline asked for),
seed, stage type and version, bakery version, the stage's code fingerprint (every
Python and Slang file its output depends on, see fingerprint.py), and the device class and
toolchain (slangpy and Slang versions, backend, CoopVec, adapter, driver: bakery.device.Toolchain;
only for stages that use a device, so pure-CPU stages never look for one just to compute a key).

Layout under the cache folder::

    entries/<key>/bundle/...     the bundle exactly as the stage wrote it
    entries/<key>/sums.json      size + sha256 of every bundle file; written last, so an
                                 entry without it is incomplete (a killed bake) and ignored
    records/<stage>/<asset>.json the key parts of the last bake of that task, to explain
                                 *why* a task rebuilds (new, input/params/version changed)
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import bakery
from bakery.formats import canonical_json
from bakery.pipeline.cache_records import well_formed_record, well_formed_sums
from bakery.safe_files import MAX_METADATA_BYTES, is_regular, read_regular

#: What :meth:`Cache.sums` returns for a sums.json that exists but cannot be parsed (cut
#: short by a full disk, a FIFO, garbage): the entry is corrupt, not missing.
CORRUPT_SUMS = "corrupt"

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """The file's sha256, read as a regular file only (a FIFO or a link planted in the
    cache or out/ is refused with :class:`bakery.safe_files.RefusedFile`, never waited on)."""
    from bakery.safe_files import open_regular

    h = hashlib.sha256()
    with open_regular(path) as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def key_parts(*, stage_type: str, stage_version: str, asset: str, params: dict, given: dict, seed: int,
              inputs: dict[str, str], upstream: dict[str, str], code: str,
              device_class: str | None, toolchain: dict | None = None) -> dict:
    return {
        "stage": stage_type,
        "stage_version": stage_version,
        "bakery_version": bakery.__version__,
        "asset": asset,  # stages see StageInput.name, so it may shape their output
        "params": params,  # the values used: the manifest's resolved_params
        "given": given,    # as the pipeline wrote them (``auto`` kept): the manifest's params
        "seed": seed,
        "inputs": inputs,
        "upstream": upstream,
        "code": code,  # the stage's code closure (bakery.pipeline.fingerprint)
        "device_class": device_class,
        "toolchain": toolchain,  # compiler, backend, driver (bakery.device.Toolchain): device stages only
    }


def key_of(parts: dict) -> str:
    return hashlib.sha256(canonical_json.dumps(parts)).hexdigest()


def why_rebuild(old: dict | None, new: dict) -> str:
    """A short human reason: new, input changed, params changed, version changed, ..."""
    if old is None:
        return "new"
    reasons = []
    changed_roles = sorted(r for r in set(old.get("inputs", {})) | set(new["inputs"])
                           if old.get("inputs", {}).get(r) != new["inputs"].get(r))
    if old.get("upstream") != new["upstream"]:
        changed_roles.append("upstream output")
    if changed_roles:
        reasons.append(f"input changed ({', '.join(changed_roles)})")
    names = sorted({k for part in ("params", "given") if part in old for k in set(old[part]) | set(new[part])
                    if old[part].get(k) != new[part].get(k)})
    if names:
        reasons.append(f"params changed ({', '.join(names)})")
    if old.get("seed") != new["seed"]:
        reasons.append("seed changed")
    for k, label in (("stage_version", "stage version"), ("bakery_version", "bakery version")):
        if old.get(k) != new[k]:
            reasons.append(f"version changed ({label} {old.get(k)} -> {new[k]})")
    if old.get("code") != new["code"]:
        reasons.append("version changed (stage code)")
    if old.get("device_class") != new["device_class"]:
        reasons.append(f"device changed ({new['device_class']})")
    elif old.get("toolchain") != new.get("toolchain"):
        reasons.append(f"toolchain changed ({toolchain_change(old.get('toolchain'), new.get('toolchain'))})")
    if old.get("stage") != new["stage"]:
        reasons.append(f"stage type changed ({old.get('stage')} -> {new['stage']})")
    return "; ".join(reasons) or "cache entry missing"


def toolchain_change(old: dict | None, new: dict | None) -> str:
    """The toolchain fields that differ, as "driver 580.1 -> 580.2" (bakery.device.Toolchain)."""
    if not old or not new:
        return "not recorded before" if new else "no device now"
    names = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return ", ".join(f"{k} {old.get(k, 'none')} -> {new.get(k, 'none')}" for k in names) or "not recorded"


def tree_sums(root: Path) -> dict[str, list]:
    """relative path -> [size, sha256] for every file below ``root``."""
    return {p.relative_to(root).as_posix(): [p.stat().st_size, sha256_file(p)]
            for p in sorted(root.rglob("*")) if p.is_file()}


def _write_json_atomic(path: Path, obj: Any) -> None:
    from bakery.formats.publish import write_atomic

    write_atomic(path, json.dumps(obj, indent=1, sort_keys=True).encode())


@dataclass
class EntryCheck:
    """Result of checking a cache entry: ``ok``, or why not (``missing`` / ``corrupt``)."""

    state: str  # ok | missing | corrupt
    detail: str = ""


class Cache:
    """The cache folder of one pipeline, behind a small interface: :meth:`check` verifies
    an entry, :meth:`bundle_dir` and :meth:`sums` read it, :meth:`put` fills and seals
    one. Another store (a shared path, an object store) need only provide the same calls."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def entry_dir(self, key: str) -> Path:
        return self.root / "entries" / key

    def bundle_dir(self, key: str) -> Path:
        return self.entry_dir(key) / "bundle"

    def record_path(self, stage: str, asset: str) -> Path:
        return self.root / "records" / stage / f"{asset}.json"

    def read_record(self, stage: str, asset: str) -> dict | None:
        try:
            record = json.loads(read_regular(self.record_path(stage, asset), limit=MAX_METADATA_BYTES))
        except (OSError, ValueError, RecursionError):
            return None
        return record if well_formed_record(record) else None

    def write_record(self, stage: str, asset: str, key: str, parts: dict, build_seconds: float | None = None) -> None:
        """What the task's bundle was keyed by (to explain rebuilds) and how long it took to build."""
        record = {"key": key, "parts": parts}
        if build_seconds is not None:
            record["build_seconds"] = round(float(build_seconds), 3)
        _write_json_atomic(self.record_path(stage, asset), record)

    def sums(self, key: str) -> dict | None:
        try:
            return json.loads(read_regular(self.entry_dir(key) / "sums.json", limit=MAX_METADATA_BYTES))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError):
            return CORRUPT_SUMS

    def check(self, key: str) -> EntryCheck:
        """Verifies every file of the entry against its recorded size and sha256."""
        entry, bundle = self.entry_dir(key), self.bundle_dir(key)
        if entry.is_symlink() or (entry.exists() and not entry.is_dir()):
            return EntryCheck("corrupt", "the entry is not a folder")
        sums = self.sums(key)
        if sums is None or not bundle.is_dir():
            return EntryCheck("missing")
        if sums is CORRUPT_SUMS:
            return EntryCheck("corrupt", "sums.json is unreadable or cut short")
        if not well_formed_sums(sums):
            return EntryCheck("corrupt", "sums.json is malformed")
        for rel, (size, digest) in sums.items():
            p = bundle / rel
            if not is_regular(p) or any(q.is_symlink() for q in p.parents if q.is_relative_to(bundle)):
                return EntryCheck("corrupt", f"{rel} is missing or not a regular file")
            try:
                same = p.stat().st_size == size and sha256_file(p) == digest
            except OSError:
                same = False
            if not same:
                return EntryCheck("corrupt", f"{rel} checksum mismatch")
        extra = sorted(set(tree_sums_names(bundle)) - set(sums))
        if extra:
            return EntryCheck("corrupt", f"unexpected file {extra[0]}")
        return EntryCheck("ok")

    def put(self, key: str, write: Callable[[Path], Any], *, replace: bool = False) -> dict:
        """Builds entry ``key``: ``write(folder)`` must publish a bundle at ``folder``
        atomically; the entry is then sealed. Returns the entry's checksums.

        Safe against several writers of one key (a retried or duplicated cluster task):
        each fills and seals a private staging entry, and a rename that fails when the
        key already exists installs it. The first complete entry wins; later writers
        drop theirs and return the winner's checksums, so an entry is never replaced
        half-way or sealed twice. ``replace`` (a forced rebuild) drops the existing
        entry first. An incomplete or corrupt entry in the way is moved aside.
        """
        from bakery.formats.publish import make_staging_dir

        if replace:
            self.discard(key)
        final = self.entry_dir(key)
        staging = make_staging_dir(final)
        try:
            write(staging / "bundle")
            sums = tree_sums(staging / "bundle")
            _write_json_atomic(staging / "sums.json", sums)
            while True:
                try:
                    os.rename(staging, final)  # fails when ``final`` exists (non-empty)
                    return sums
                except OSError as e:
                    if e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                        raise
                if self.check(key).state == "ok":
                    return self.sums(key) or sums  # another writer won; theirs stays
                self._move_aside(key)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _move_aside(self, key: str) -> None:
        """Renames an incomplete entry out of the way (one rename: racing writers agree)."""
        from bakery.formats.publish import make_staging_dir

        final = self.entry_dir(key)
        if final.is_symlink() or (final.exists() and not final.is_dir()):
            final.unlink(missing_ok=True)  # a file or link where an entry belongs (entries/ is bakery's)
            return
        doomed = make_staging_dir(final)
        try:
            os.replace(final, doomed)  # ``doomed`` is empty, so this rename may replace it
        except FileNotFoundError:
            pass  # another writer moved it already
        shutil.rmtree(doomed, ignore_errors=True)

    def discard(self, key: str) -> None:
        shutil.rmtree(self.entry_dir(key), ignore_errors=True)


def tree_sums_names(root: Path) -> list[str]:
    """Every non-folder below ``root`` (links and FIFOs included: they are never bakery's)."""
    return [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_symlink() or not p.is_dir()]


def output_matches(out_dir: Path, sums: dict) -> bool:
    """True when ``out_dir`` holds exactly the entry's files, byte for byte."""
    if not out_dir.is_dir():
        return False
    if not set(sums) <= set(tree_sums_names(out_dir)):  # files bakery did not write (.meta) are kept
        return False
    for rel, (size, digest) in sums.items():
        p = out_dir / rel
        try:
            if not is_regular(p) or p.stat().st_size != size or sha256_file(p) != digest:
                return False
        except OSError:
            return False
    return True
