"""The OTLP/HTTP trace receiver's decoding: a request body as the OpenTelemetry exporters send it
(``application/x-protobuf`` or ``application/json``, optionally gzip-compressed) turned into the
span records :mod:`ragdx.traces.openinference` reads, within limits.

Protobuf is read with opentelemetry-proto and turned into OTLP/JSON (ids as hex, as the OTLP/JSON
encoding spells them), so both encodings go through the one OTLP reader of ragdx
(:func:`ragdx.traces.openinference.otlp_spans`) and are checked alike. Every refusal is a
``_Refused`` with the HTTP status to answer and a message naming what is wrong.

Spec: https://opentelemetry.io/docs/specs/otlp/#otlphttp
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from dataclasses import dataclass
from typing import Any

from ragdx.traces.openinference import SpanRecord, otlp_spans
from ragdx.errors import InputError, MissingExtraError

__all__ = ["Limits", "decode_request", "PROTOBUF", "JSON"]

PROTOBUF = ("application/x-protobuf", "application/protobuf")
JSON = ("application/json",)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one request may hold: its body's bytes (before and after decompression) and spans."""

    max_bytes: int = 8 * 1024 * 1024
    max_spans: int = 20_000


class _Refused(Exception):  # never escapes the app: answered as its HTTP status
    """A request the receiver refuses: ``status`` is the HTTP status to answer (400, 413, 415)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _gunzip(body: bytes, limit: int) -> bytes:
    """A gzip body decompressed, refused past ``limit`` bytes without inflating the rest."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise _Refused(400, f"Content-Encoding gzip: the body is not gzip data ({exc})") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise _Refused(413, f"the decompressed body exceeds the limit of {limit} bytes (--max-request-bytes)")
    return out


def _hex(value: Any) -> Any:
    """A protobuf JSON id (base64 of the bytes) as OTLP/JSON's hex."""
    if not isinstance(value, str) or not value:
        return value
    try:
        return base64.b64decode(value, validate=True).hex()
    except (binascii.Error, ValueError):
        return value


def _protobuf_json(body: bytes) -> dict[str, Any]:
    try:
        from google.protobuf.json_format import MessageToDict
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    except ImportError:
        raise MissingExtraError("serve", "reading OTLP protobuf") from None
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except DecodeError as exc:
        raise _Refused(400, f"the body is not an OTLP ExportTraceServiceRequest in protobuf ({exc})") from None
    obj = MessageToDict(request)
    for rs in obj.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for span in ss.get("spans", ()):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _hex(span[key])
    obj.setdefault("resourceSpans", [])
    return obj


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def decode_request(body: bytes, content_type: str | None, encoding: str | None, limits: Limits,
                   source: str, number: int) -> tuple[list[SpanRecord], str | None]:
    """The spans of one OTLP/HTTP trace request, and the system it names.

    Args:
        body: the request's body as received.
        content_type: its Content-Type (parameters such as ``charset`` are ignored).
        encoding: its Content-Encoding (``gzip``, ``identity`` or none).
        limits: the most bytes and spans a request may hold.
        source, number: how messages name the request (``request 12``).

    Raises:
        _Refused: 415 for another content type or encoding, 413 past a limit, 400 for a body
            that is not a trace request (the message names the path of the bad value).
    """
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind not in PROTOBUF + JSON:
        raise _Refused(415, f"Content-Type {content_type!r} is not supported: send application/x-protobuf or "
                           "application/json (OTLP/HTTP)")
    if len(body) > limits.max_bytes:
        raise _Refused(413, f"the body has {len(body)} bytes, more than the limit of {limits.max_bytes} "
                           "(--max-request-bytes)")
    coding = (encoding or "identity").strip().lower()
    if coding == "gzip":
        body = _gunzip(body, limits.max_bytes)
    elif coding != "identity":
        raise _Refused(415, f"Content-Encoding {encoding!r} is not supported: send gzip or none")
    if kind in PROTOBUF:
        obj = _protobuf_json(body)
    else:
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise _Refused(400, f"the body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise _Refused(400, "the body is not an OTLP ExportTraceServiceRequest: expected a JSON object")
    try:  # a JSON escape may spell half a UTF-16 pair ("\\udfff"): no store can keep such a text
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _Refused(400, f"the body holds text that is not Unicode: a lone surrogate "
                            f"{exc.object[exc.start:exc.end]!r} (a JSON escape of half a UTF-16 pair)") from None
    obj.setdefault("resourceSpans", [])
    # counted before they are read (which names a value of the wrong type): only lists are counted
    count = sum(len(ss["spans"]) for rs in _list(obj["resourceSpans"]) if isinstance(rs, dict)
                for ss in _list(rs.get("scopeSpans")) if isinstance(ss, dict) and isinstance(ss.get("spans"), list))
    if count > limits.max_spans:
        raise _Refused(413, f"the request has {count} spans, more than the limit of {limits.max_spans} (--max-spans)")
    try:
        spans, system = otlp_spans(obj, source, number)
    except InputError as exc:
        raise _Refused(400, str(exc)) from None
    bad = next((s for s in spans if not s.trace_id or not s.span_id), None)
    if bad is not None:
        raise _Refused(400, f"{source}: span {bad.name!r} has no traceId or spanId")
    return spans, system
