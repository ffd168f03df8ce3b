"""Line numbers for TOML keys, so every configuration error can say ``file:line``.

tomllib gives positions only for syntax errors. This scanner reads the text line by
line, tracks the current ``[table]`` header and records where each key (including keys
of one-line inline tables) is written. It is not a TOML parser: it only has to be right
for files that tomllib already accepted, and falls back to the nearest enclosing table.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=""")
_INLINE_KEY = re.compile(r"""[{,]\s*([A-Za-z0-9_-]+|"[^"]*")\s*=""")


def _split_dotted(s: str) -> tuple[str, ...]:
    parts = re.findall(r"""\s*("[^"]*"|'[^']*'|[^.\s]+)\s*(?:\.|$)""", s)
    return tuple(p[1:-1] if p[:1] in "\"'" else p for p in parts)


class SourceMap:
    """Maps dotted key paths (``("stages", "blur", "params", "radius")``) to 1-based lines."""

    def __init__(self, text: str):
        self.lines: dict[tuple[str, ...], int] = {}
        table: tuple[str, ...] = ()
        for no, line in enumerate(text.splitlines(), start=1):
            m = _HEADER.match(line)
            if m and "=" not in line.split("#")[0].split("]")[0]:
                table = _split_dotted(m.group(1))
                for n in range(1, len(table) + 1):  # [a.b.c] also defines a and a.b
                    self.lines.setdefault(table[:n], no)
                continue
            m = _KEY.match(line)
            if not m:
                continue
            key = table + _split_dotted(m.group(1))
            self.lines.setdefault(key, no)
            rest = line[m.end():]
            if rest.lstrip().startswith("{"):
                for sub in _INLINE_KEY.finditer(rest):
                    name = sub.group(1).strip("\"")
                    self.lines.setdefault(key + (name,), no)

    def line_of(self, path: tuple[str, ...] | str) -> int | None:
        """The line of ``path``, else of its nearest written ancestor, else None."""
        if isinstance(path, str):
            path = _split_dotted(path)
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return None
