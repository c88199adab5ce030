"""A griffe extension for the API reference (mkdocs.yml, mkdocstrings): greval's docstrings are plain text with
code spans, not Markdown. Sphinx roles (``:func:`evaluate```, ``:class:`~greval.Store```) are shown as code,
and outside code spans the characters Markdown would read as links, emphasis or HTML (``human[, group]``,
``FActScore*``, ``<judge>``) are escaped, so the page shows what the docstring says."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|meth|class|attr|mod|data|exc|obj|const|type):`~?([^`]+)`")
CODE = re.compile(r"(``.+?``|`[^`\n]+`)", re.S)
SPECIAL = re.compile(r"([\[\]*_\\])")


def plain(text: str) -> str:
    """``text`` with roles as code spans and Markdown's special characters escaped outside code spans."""
    parts = CODE.split(ROLE.sub(r"`\1`", text))
    return "".join(p if i % 2 else SPECIAL.sub(r"\\\1", p).replace("<", "&lt;") for i, p in enumerate(parts))


class PlainDocstrings(griffe.Extension):
    """Every docstring through :func:`plain` before mkdocstrings parses it."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
