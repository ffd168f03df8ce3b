"""Errors that end a command with a one-line message and a documented exit code.

Exit codes are part of the CLI contract that pipeline hooks script against:
0 everything built or cached, 1 some task failed, 2 configuration or usage error.
"""

from __future__ import annotations

import re
from pathlib import Path

EXIT_OK = 0
EXIT_TASK_FAILED = 1
EXIT_USAGE = 2


class BakeryError(Exception):
    """An expected failure with a one-line, user-facing message."""

    exit_code = EXIT_TASK_FAILED

    def __init__(self, message: str, *, where: str | None = None, key: str | None = None):
        self.message = message
        self.where = where
        self.key = key
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = [p for p in (self.where, self.key) if p]
        prefix = ": ".join(parts)
        text = f"{prefix}: {self.message}" if prefix else self.message
        return " ".join(text.split())


class UsageError(BakeryError):
    """Bad configuration, parameters or input files: nothing was run or written."""

    exit_code = EXIT_USAGE


class DeviceError(UsageError):
    """No usable GPU/Vulkan device; the message says what to install."""


class TaskError(BakeryError):
    """A bake task failed while running; other tasks may still build."""

    exit_code = EXIT_TASK_FAILED


class ConfigError(UsageError):
    """One or more problems in a TOML file (a pipeline, a fit spec); ``lines`` holds one
    ``file:line: key: message`` per problem, all collected before giving up."""

    def __init__(self, lines: list[str]):
        self.lines = lines
        more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
        super().__init__(lines[0] + more)

    def one_line(self) -> str:  # the lines are already formatted
        return self.message

    @classmethod
    def from_toml(cls, path: Path, e: Exception) -> "ConfigError":
        """A ``tomllib.TOMLDecodeError`` as one ``file:line:column: toml: ...`` line."""
        msg = str(e)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        if m:
            text = msg[:m.start()].strip()
            return cls([f"{display_path(path)}:{m.group(1)}:{m.group(2)}: toml: {text}"])
        return cls([f"{display_path(path)}:1: toml: {msg}"])


def display_path(p: Path) -> str:
    """``p`` relative to the working directory when it is below it (shorter messages)."""
    try:
        return str(Path(p).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def did_you_mean(word: object, choices) -> str:
    """``" (did you mean 'psnr_db'?)"`` for the closest of ``choices`` to a misspelt
    ``word``, or ``""`` where none is close: appended to every "unknown ..." message."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
