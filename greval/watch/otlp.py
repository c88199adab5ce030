"""OTLP JSON (an OpenTelemetry export request: ``resourceSpans`` → ``scopeSpans`` → ``spans``) as Phoenix's REST
span rows, which :func:`greval.traces.openinference.span_from_row` reads.

A ``.json`` file of one request is read as it streams, a span at a time (:func:`stream_spans`): a file of one
200,000-span trace is 60 MB on disk and held whole cost 200 MB more (json's objects); streamed, it costs one span
and what the reader keeps. A span arrives as the raw object it is in the file, so a reader can drop the spans of a
trace it refused by their trace id (:func:`trace_of`) before the rest of the span is converted.
"""

from __future__ import annotations

import base64
import codecs
import json
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from greval.dataset.limits import ReadLimits, size_text
from greval.dataset.tables import stream_bytes
from greval.errors import DataError

__all__ = ["is_otlp", "otlp_row", "otlp_rows", "raw_spans", "starts_otlp", "stream_spans", "trace_of"]

_REQUEST_KEYS = ("resourceSpans", "resource_spans")
_SCOPE_KEYS = ("scopeSpans", "scope_spans", "instrumentationLibrarySpans")


def is_otlp(value: Mapping[str, Any]) -> bool:
    return any(k in value for k in _REQUEST_KEYS)


_HEX = re.compile(r"^[0-9a-fA-F]+$")


def _otlp_id(value: Any) -> str:
    """A trace or span id as hex (OTLP JSON writes hex; protobuf's JSON mapping, base64)."""
    text = str(value or "")
    if not text or (_HEX.match(text) and len(text) in (16, 32)):
        return text.lower()
    try:
        return base64.b64decode(text, validate=True).hex()
    except ValueError:
        return text


def trace_of(span: Mapping[str, Any]) -> str:
    """A raw OTLP span's trace id, as :func:`otlp_row` writes it."""
    return _otlp_id(span.get("traceId") or span.get("trace_id"))


def _any_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as Python."""
    if not isinstance(value, Mapping):
        return value
    for key in ("stringValue", "string_value", "boolValue", "bool_value", "doubleValue", "double_value"):
        if key in value:
            return value[key]
    for key in ("intValue", "int_value"):
        if key in value:
            return int(value[key])
    array = value.get("arrayValue") or value.get("array_value")
    if isinstance(array, Mapping):
        return [_any_value(v) for v in array.get("values") or []]
    kvlist = value.get("kvlistValue") or value.get("kvlist_value")
    if isinstance(kvlist, Mapping):
        return _attributes(kvlist.get("values"))
    return None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {str(p.get("key")): _any_value(p.get("value")) for p in pairs or [] if isinstance(p, Mapping)}


def _time(nanos: Any) -> str | None:
    try:
        return datetime.fromtimestamp(int(nanos) / 1e9, UTC).isoformat()
    except (TypeError, ValueError, OverflowError, OSError):
        return None


_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR", "STATUS_CODE_UNSET": "UNSET", "STATUS_CODE_OK": "OK",
           "STATUS_CODE_ERROR": "ERROR"}  # fmt: skip


def otlp_row(sp: Mapping[str, Any]) -> dict[str, Any]:
    """One raw OTLP span in the shape of Phoenix's REST spans."""
    status = sp.get("status") if isinstance(sp.get("status"), Mapping) else {}
    parent = _otlp_id(sp.get("parentSpanId") or sp.get("parent_span_id"))
    return {
        "context": {"trace_id": trace_of(sp), "span_id": _otlp_id(sp.get("spanId") or sp.get("span_id"))},
        "parent_id": parent or None,
        "name": sp.get("name") or "",
        "start_time": _time(sp.get("startTimeUnixNano") or sp.get("start_time_unix_nano")),
        "end_time": _time(sp.get("endTimeUnixNano") or sp.get("end_time_unix_nano")),
        "attributes": _attributes(sp.get("attributes")),
        "status_code": _STATUS.get((status or {}).get("code"), "UNSET"),
        "status_message": (status or {}).get("message") or "",
    }


def raw_spans(doc: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    requests: Any = next((doc[k] for k in _REQUEST_KEYS if doc.get(k)), [])
    for rs in requests if isinstance(requests, list) else []:
        if not isinstance(rs, Mapping):
            continue
        scopes: Any = next((rs[k] for k in _SCOPE_KEYS if rs.get(k)), [])
        for ss in scopes if isinstance(scopes, list) else []:
            spans = ss.get("spans") if isinstance(ss, Mapping) else None
            yield from (sp for sp in spans or [] if isinstance(sp, Mapping))


def otlp_rows(doc: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The spans of an OTLP JSON export request held whole, as Phoenix's REST spans."""
    return (otlp_row(sp) for sp in raw_spans(doc))


# ------------------------------------------------------------------------------------------- streaming
_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class _Stream:
    """A JSON document read a chunk at a time: its structure walked token by token, its values (a span, a
    resource) decoded whole, each at most ``most`` characters."""

    def __init__(self, path: Path, limits: ReadLimits) -> None:
        self.path = path
        self.most = limits.max_line_bytes
        self._chunks = stream_bytes(path, limits)
        self._utf8 = codecs.getincrementaldecoder("utf-8-sig")()
        self.buf = ""
        self.i = 0
        self.eof = False

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()

    def _more(self) -> bool:
        """Read the next chunk onto what is left of the buffer; False at the file's end."""
        if self.eof:
            return False
        chunk = next(self._chunks, None)
        try:
            text = self._utf8.decode(chunk or b"", final=chunk is None)
        except UnicodeDecodeError:
            raise DataError(f"{self.path}: not UTF-8 text; re-save the file as UTF-8") from None
        self.eof = chunk is None
        self.buf = self.buf[self.i :] + text
        self.i = 0
        return True

    def peek(self) -> str:
        """The next character that is not white space ('' at the end)."""
        while True:
            buf, i = self.buf, self.i
            if i < len(buf) and buf[i] not in " \t\n\r":
                return buf[i]
            self.i = i = _SPACE.match(buf, i).end()  # type: ignore[union-attr]  # matches the empty text
            if i < len(buf):
                return buf[i]
            if not self._more():
                return ""

    def take(self, char: str) -> None:
        if self.peek() != char:
            got = self.buf[self.i : self.i + 20] or "the end"
            raise DataError(f"{self.path}: invalid JSON (expected {char!r}, found {got!r})")
        self.i += 1

    def value(self) -> Any:
        """The next value, decoded whole (a number is read on until what follows it is in the buffer)."""
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.i)
                if end < len(self.buf) or self.eof:
                    self.i = end
                    return value
            except json.JSONDecodeError as exc:
                if self.eof:
                    raise DataError(f"{self.path}: invalid JSON ({exc.msg})") from None
            except RecursionError:
                raise DataError(f"{self.path}: JSON nested too deeply") from None
            if len(self.buf) - self.i > self.most:
                raise DataError(f"{self.path}: one value is longer than {size_text(self.most)}, the limit")
            self._more()

    def fields(self) -> Iterator[str]:
        """An object's keys, the stream left at each one's value (the caller reads or skips it); a value that is
        no object is skipped."""
        if self.peek() != "{":
            self.value()
            return
        self.i += 1
        if self.peek() == "}":
            self.i += 1
            return
        while True:
            key = self.value()
            if not isinstance(key, str):
                raise DataError(f"{self.path}: invalid JSON (an object's key is not a string)")
            self.take(":")
            yield key
            if self.peek() == ",":
                self.i += 1
                continue
            self.take("}")
            return

    def elements(self) -> Iterator[None]:
        """An array's items, the stream left at each (the caller reads or skips it); a value that is no array is
        skipped."""
        if self.peek() != "[":
            self.value()
            return
        self.i += 1
        if self.peek() == "]":
            self.i += 1
            return
        while True:
            yield None
            if self.peek() == ",":
                self.i += 1
                continue
            self.take("]")
            return


def starts_otlp(path: Path, limits: ReadLimits) -> bool:
    """Whether a ``.json`` file is an OTLP export request: an object with a ``resourceSpans`` key (the keys before
    it read past, a value at a time; a file that is no JSON object, or a value past the limit before it, is not)."""
    stream = _Stream(path, limits)
    try:
        if stream.peek() != "{":
            return False
        for key in stream.fields():
            if key in _REQUEST_KEYS:
                return True
            stream.value()
        return False
    except DataError:
        return False
    finally:
        stream.close()


def stream_spans(path: Path, limits: ReadLimits) -> Iterator[Mapping[str, Any]]:
    """The raw spans of a ``.json`` OTLP export request, a span at a time."""
    stream = _Stream(path, limits)
    try:
        yield from _request_spans(stream)
        if stream.peek():
            raise DataError(f"{path}: invalid JSON (more after the document's end)")
    finally:
        stream.close()


def _request_spans(stream: _Stream) -> Iterator[Mapping[str, Any]]:
    """``resourceSpans[*].scopeSpans[*].spans[*]``, every other value read past."""
    for key in stream.fields():
        if key not in _REQUEST_KEYS:
            stream.value()
            continue
        for _ in stream.elements():
            for scope_key in stream.fields():
                if scope_key not in _SCOPE_KEYS:
                    stream.value()
                    continue
                for _ in stream.elements():
                    for field in stream.fields():
                        if field != "spans":
                            stream.value()
                            continue
                        for _ in stream.elements():
                            span = stream.value()
                            if isinstance(span, Mapping):
                                yield span
