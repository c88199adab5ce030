"""The explorer's data files are JavaScript: one call each, with JSON arguments (``<script>`` files, so the
folder opens from disk). Below both writers of them, the record data (:mod:`.data`) and the judge's prompts
(:mod:`.prompts`)."""

from __future__ import annotations

import json
from typing import Any


def js_call(call: str, *args: Any) -> str:
    """A data file's text: one call with JSON arguments (``</`` escaped, so no string closes a script)."""
    body = ",".join(json.dumps(a, ensure_ascii=False, separators=(",", ":")) for a in args)
    safe = body.replace("</", "<\\/")
    return f"{call}({safe});\n"
