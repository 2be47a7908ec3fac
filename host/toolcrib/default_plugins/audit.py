"""The audit log: one JSON line per decision (a call, a read, a prompt get), written to ``[host] audit_log``.

The call pipeline hands each decision to ``AuditLog.add`` as a tuple; a writer thread of the log's own turns it
into the JSON line and writes it, so a call pays for a queue put, not for formatting and a write (other plugins get
the same records through ``toolcrib_audit``). Lines reach the file in the order of the decisions, a few
milliseconds after them (the writer gathers what comes in ``BATCH_SECONDS`` and writes it at once, flushed);
``close`` writes whatever is still queued.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolcrib.audit import Logged, _line_or_note, line, record
from toolcrib.hookspecs import hookimpl

log = logging.getLogger(__name__)

BATCH_SECONDS = 0.005  # how long the writer lets decisions gather before it writes them

class AuditLog:
    """Appends each decision to a file as one JSON line (the file is opened on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._queue: queue.SimpleQueue[Logged | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._lock = threading.Lock()

    def log_decision(self, decision: Logged) -> None:
        """Queue one decision for the writer thread."""
        if self._writer is None:
            with self._lock:
                if self._writer is None:
                    self._writer = threading.Thread(target=self._write, name="toolcrib-audit", daemon=True)
                    self._writer.start()
                    atexit.register(self.close)  # a process that ends without closing its host loses no line
        self._queue.put(decision)

    @hookimpl
    def toolcrib_audit(self, record: Mapping[str, Any]) -> None:
        """Not used by the pipeline (which calls ``add``): kept so the log is a plugin like the others."""

    def _write(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            file = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            log.error("audit log %s cannot be opened, its lines are lost until it can: %s", self.path, exc)
            file = None
        closing = False
        while not closing:
            batch = [self._queue.get()]  # wait for one, then let a few more come: one wake-up per batch, not per
            time.sleep(BATCH_SECONDS)    # call, keeps the writer from taking the interpreter on every call
            while not self._queue.empty():
                batch.append(self._queue.get())
            if None in batch:
                closing = True
            if file is None:
                continue
            try:
                file.write("".join(_line_or_note(item) for item in batch if item is not None))
                file.flush()
            except OSError as exc:
                log.error("audit log %s: %d lines not written: %s", self.path, len(batch), exc)
        if file is not None:
            try:
                file.close()
            except OSError as exc:
                log.error("audit log %s: closing failed: %s", self.path, exc)

    def close(self) -> None:
        """Write what is queued, then close the file (a later ``add`` opens it again)."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            atexit.unregister(self.close)
            self._queue.put(None)
            writer.join()


__all__ = ["AuditLog", "line", "record"]
