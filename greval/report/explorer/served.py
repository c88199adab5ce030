"""The report and record explorer of a store as ``greval serve`` shows them under ``/ui``: the same files
``greval report`` writes, built in a temporary folder when first asked for and rebuilt when the store has new
verdicts or labels (checked at most every CHECK_EVERY seconds)."""

from __future__ import annotations

import mimetypes
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from greval.store.store import Store

CHECK_EVERY = 5.0
#: Bootstrap resamples of the served report (the CLI's default is 1000; a page built on request stays quick).
RESAMPLES = 500


class ServedReport:
    """One store's report folder, kept fresh; ``file(path)`` answers a request under /ui."""

    def __init__(self, store_path: str | Path, system_column: str = "system") -> None:
        self.store_path = store_path
        self.system_column = system_column
        self.folder: Path | None = None
        self.stamp: Any = None
        self.checked = 0.0
        self.lock = threading.Lock()

    def _stamp(self) -> Any:
        with Store(self.store_path) as st:
            return st.activity()

    def _build(self) -> Path:
        from greval.report.store_report import build, write

        folder = Path(tempfile.mkdtemp(prefix="greval-ui-"))
        rep = build(self.store_path, (), self.system_column, RESAMPLES, folder)
        write(rep, folder)
        return folder

    def fresh(self) -> Path:
        """The report folder, rebuilt first when the store changed since it was built."""
        with self.lock:
            now = time.monotonic()
            if self.folder is None or now - self.checked > CHECK_EVERY:
                self.checked = now
                stamp = self._stamp()
                if self.folder is None or stamp != self.stamp:
                    old, self.folder, self.stamp = self.folder, self._build(), stamp
                    if old is not None:
                        shutil.rmtree(old, ignore_errors=True)
            return self.folder

    def file(self, path: str) -> tuple[bytes, str] | None:
        """The bytes and media type of ``path`` inside the report folder (``''``: index.html); None when there is
        no such file or the path leaves the folder."""
        folder = self.fresh().resolve()
        target = (folder / (path or "index.html")).resolve()
        if target.is_dir():
            target = target / "index.html"
        if not target.is_relative_to(folder) or not target.is_file():
            return None
        kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind.endswith("javascript"):
            kind += "; charset=utf-8"
        return target.read_bytes(), kind

    def close(self) -> None:
        with self.lock:
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
                self.folder = None
