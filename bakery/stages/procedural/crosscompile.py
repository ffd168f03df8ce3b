"""Slang source compiled to HLSL or GLSL by the Slang compiler itself.

slangpy 0.43.1 compiles for its device only (SPIR-V here) and exposes no call that returns
another target's code, so this drives the compiler library slangpy ships
(libslang-compiler) through its C API: one compile request per target, the entry point
named, line directives off. The three languages then come from one Slang text and cannot
drift; the compiler, not a text rewrite, spells each one.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from pathlib import Path

#: SlangCompileTarget, SlangSourceLanguage, SlangStage, SlangLineDirectiveMode values (slang.h).
TARGETS = {"glsl": 2, "hlsl": 5}
_SOURCE_SLANG = 1
_STAGE_COMPUTE = 6
_LINE_DIRECTIVES_NONE = 1


class CrossCompileError(RuntimeError):
    """The Slang compiler refused the source; the message carries its diagnostics."""


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    import slangpy

    folder = Path(slangpy.__file__).parent
    candidates = sorted(folder.glob("libslang-compiler.so*")) + sorted(folder.glob("libslang.so*")) \
        + sorted(folder.glob("slang-compiler.dll")) + sorted(folder.glob("slang.dll")) \
        + sorted(folder.glob("libslang-compiler*.dylib")) + sorted(folder.glob("libslang*.dylib"))
    if not candidates:
        raise CrossCompileError(f"no Slang compiler library beside slangpy in {folder}")
    lib = ctypes.CDLL(str(candidates[0]))
    p, s, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    for name, res, args in (("spCreateSession", p, [s]), ("spDestroySession", None, [p]),
                            ("spCreateCompileRequest", p, [p]), ("spDestroyCompileRequest", None, [p]),
                            ("spSetCodeGenTarget", None, [p, i]), ("spSetLineDirectiveMode", None, [p, i]),
                            ("spAddTranslationUnit", i, [p, i, s]),
                            ("spAddTranslationUnitSourceString", None, [p, i, s, s]),
                            ("spAddEntryPoint", i, [p, i, s, i]), ("spCompile", i, [p]),
                            ("spGetDiagnosticOutput", s, [p]), ("spGetEntryPointSource", s, [p, i])):
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


@functools.lru_cache(maxsize=1)
def _session() -> int:
    """One Slang session per process: creating one loads the compiler's core module, most
    of a request's time (~0.2 s of ~0.25); it lives as long as the process."""
    return _library().spCreateSession(None)


#: A session takes one request at a time.
_SESSION_LOCK = threading.Lock()


def compile_to(source: str, entry: str, target: str) -> str:
    """The ``target`` ("hlsl" or "glsl") code the Slang compiler emits for compute entry
    point ``entry`` of ``source`` (self-contained: no includes)."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r} (known: {', '.join(TARGETS)})")
    lib = _library()
    with _SESSION_LOCK:
        return _compile(lib, _session(), source, entry, target)


def _compile(lib: ctypes.CDLL, session: int, source: str, entry: str, target: str) -> str:
    request = lib.spCreateCompileRequest(session)
    try:
        lib.spSetCodeGenTarget(request, TARGETS[target])
        lib.spSetLineDirectiveMode(request, _LINE_DIRECTIVES_NONE)
        unit = lib.spAddTranslationUnit(request, _SOURCE_SLANG, b"bakery_procedural")
        lib.spAddTranslationUnitSourceString(request, unit, b"bakery_procedural.slang", source.encode())
        lib.spAddEntryPoint(request, unit, entry.encode(), _STAGE_COMPUTE)
        # Only a successful request has code to ask for (asking a failed one crashes).
        code = lib.spGetEntryPointSource(request, 0) if lib.spCompile(request) >= 0 else None
        if not code:
            diagnostics = (lib.spGetDiagnosticOutput(request) or b"").decode(errors="replace").strip()
            raise CrossCompileError(f"Slang could not compile {entry} to {target}: {diagnostics}")
        return code.decode()
    finally:
        lib.spDestroyCompileRequest(request)
