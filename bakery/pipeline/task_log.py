"""A task's log file: where it lives, the line it starts with, and how bakery knows its own.

``out/logs/`` is bakery's folder, but a person may keep notes there (or a log shipper may
drop files). ``bakery clean`` deletes a log, and a bake replaces one, only when the file
proves bakery wrote it: it starts with :data:`HEADER`, or it has the shape an earlier
bakery's log had (empty, or a first line in the log formatter's layout)."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import TextIO

from bakery.safe_files import RefusedFile, open_new_for_write, open_regular, refuse_links

#: The first line of every task log bakery writes, followed by the task's id.
HEADER = "# bakery task log: "
#: The line layout of ``logging.Formatter("%(asctime)s %(levelname)s %(message)s")``: what
#: a log written before :data:`HEADER` existed begins with.
_LEGACY_FIRST_LINE = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
_HEAD_BYTES = 256


def log_path(log_dir: Path, stage: str, asset: str) -> Path:
    """``<log_dir>/<stage>/<asset>.log`` (an asset id may hold ``/``: one folder per part)."""
    return Path(log_dir) / stage / f"{asset}.log"


def header(task_id: str) -> str:
    return f"{HEADER}{task_id}\n"


def is_task_log(path: Path) -> bool:
    """Whether ``path`` is a regular file (not through a link) that bakery wrote as a task log."""
    try:
        with open_regular(path) as f:
            head = f.read(_HEAD_BYTES)
    except OSError:
        return False
    return not head or head.startswith(HEADER.encode()) or bool(_LEGACY_FIRST_LINE.match(head))


class TaskLogHandler(logging.StreamHandler):
    """A task log's handler: a line that cannot be written (a full disk, a file-size limit)
    is dropped quietly rather than printed with a traceback; the task's own error still
    reaches the console and the report."""

    def handleError(self, record: logging.LogRecord) -> None:
        self.lost = getattr(self, "lost", 0) + 1


def open_task_log(log_dir: Path, stage: str, asset: str, task_id: str) -> tuple[Path, TextIO]:
    """The task's log, opened for writing from scratch with its header written.

    Refuses (:class:`RefusedFile`, an ``OSError``) a link on the way and a file at that
    path that bakery did not write: a bake never replaces a person's file."""
    path = log_path(log_dir, stage, asset)
    refuse_links(log_dir, path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(path) and not is_task_log(path):
        raise RefusedFile(path, f"{path} exists and was not written by bakery; refusing to replace it (move it away)")
    f = open(open_new_for_write(path, root=log_dir), "w", encoding="utf-8")
    f.write(header(task_id))
    f.flush()
    return path, f
