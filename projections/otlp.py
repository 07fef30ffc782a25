"""OTLP, the OpenTelemetry protocol, for the spans of `otel`: its JSON file encoding and
its HTTP exporter.

- **OTLP JSON** (`otlp_json`, `render`): one `ExportTraceServiceRequest` a line (the OTLP
  file format is JSON Lines), built by `opentelemetry-proto`'s encoder and written by
  protobuf's JSON mapping with OTLP's rules: trace and span ids as hex, enums as
  integers, lowerCamelCase keys. Inert (`render.inert_json`): every character a terminal
  would act on is a `\\uXXXX` escape.
- **OTLP/HTTP** (`traces_url`, `http_exporter`, `send`): the SDK's protobuf exporter;
  headers and TLS come from the `OTEL_EXPORTER_OTLP_*` environment, never from a URL.

Needs the `otel` extra (`opentelemetry-exporter-otlp-proto-http`).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator, Sequence
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from convstore.adapters.terminal.render import inert_json
from convstore.domain.errors import ConfigurationError
from convstore.projections.otel import TracedConversation, spans

__all__ = ["EXTENSION", "http_exporter", "otlp_json", "render", "send", "traces_url"]

_ID_FIELDS: Final = ("traceId", "spanId", "parentSpanId")


def _hex_ids(data: Any) -> Any:
    """OTLP's JSON encoding writes trace and span ids as hex, where protobuf's writes base64."""
    if isinstance(data, dict):
        return {
            key: base64.b64decode(value).hex() if key in _ID_FIELDS else _hex_ids(value)
            for key, value in data.items()
        }
    if isinstance(data, list):
        return [_hex_ids(value) for value in data]
    return data


def otlp_json(trace: Sequence[ReadableSpan]) -> str:
    """The spans as one OTLP/JSON `ExportTraceServiceRequest` (one line, no newline): the
    protobuf JSON mapping with OTLP's rules (hex ids, enums as integers, camelCase keys)."""
    request = encode_spans(trace)
    data = json_format.MessageToDict(request, use_integers_for_enums=True)
    return inert_json(json.dumps(_hex_ids(data), ensure_ascii=False, separators=(",", ":")))


EXTENSION: Final = "otlp.jsonl"
"""The extension of an OTLP JSON file (JSON Lines: one `ExportTraceServiceRequest` a line)."""


def render(traced: TracedConversation, *, content: bool = True) -> Iterator[str]:
    """The conversation's spans as one OTLP JSON line (with its newline)."""
    yield otlp_json(spans(traced, content=content)) + "\n"


def traces_url(text: str) -> str:
    """The OTLP/HTTP traces URL `text` names: an `http(s)://` URL; a bare server (no path)
    gets OTLP's `/v1/traces`. ConfigurationError for anything else, and for a URL holding
    credentials (the exporter reads headers from `OTEL_EXPORTER_OTLP_HEADERS`)."""
    given = text.strip()
    try:
        parts = urlsplit(given)
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(
            f"--otlp-endpoint {given[:80]!r} is not an http:// or https:// URL (such as "
            "http://127.0.0.1:4318/v1/traces)"
        )
    if parts.username is not None or parts.password is not None:
        raise ConfigurationError(
            "--otlp-endpoint: a URL with credentials is refused; give them as headers in "
            "OTEL_EXPORTER_OTLP_HEADERS"
        )
    if parts.path in ("", "/"):
        parts = parts._replace(path="/v1/traces")
    return urlunsplit(parts)


def http_exporter(url: str, timeout: float = 10.0) -> SpanExporter:
    """The OTLP/HTTP (protobuf) exporter to the traces URL `url` (see `traces_url`);
    headers and TLS settings come from the `OTEL_EXPORTER_OTLP_*` environment."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=url, timeout=timeout)


def send(trace: Sequence[ReadableSpan], exporter: SpanExporter) -> bool:
    """Hand the spans to `exporter` (the OTLP HTTP exporter; an in-memory one in tests);
    True when it took them. Logging is off meanwhile: the exporter would log the
    receiver's answer, which is untrusted text (the caller says what failed)."""
    level = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        return exporter.export(trace) is SpanExportResult.SUCCESS
    finally:
        logging.disable(level)
