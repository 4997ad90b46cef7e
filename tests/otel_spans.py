"""Spans kmq records while a test runs, through the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kmq import otel


@contextmanager
def recorded_spans() -> Iterator[InMemorySpanExporter]:
    """kmq traces into a provider of its own (``kmq.otel.use``) for the block: the process's global provider stays
    unset, so other tests run untraced."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.use(provider)
    try:
        yield exporter
    finally:
        otel.use(None)
        provider.shutdown()


def named(spans: tuple[ReadableSpan, ...] | list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]
