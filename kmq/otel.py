"""OpenTelemetry traces across the queue (extra ``kmq[otel]``): send → process → settle, redeliveries included.

- The producer starts a ``send <queue>`` span (kind PRODUCER) and injects its context into the message's headers
  with the global propagator (W3C ``traceparent`` by default). Those headers are the user's (not ``kmq-``): they
  travel with the payload through Starts, the tracker's copies and dead letters.
- A worker runs each handler inside a ``process <queue>`` span (kind CONSUMER) whose parent is the producer's span
  and which links to it, on redelivered copies too; ``process_span(message)`` does the same for a hand-written loop.
- Settles (ack, release, reject, give back) and dead letters are events on the process span; a tracker's copy of
  an expired message is a ``redeliver <queue>`` span in the producer's trace.

Attributes follow the OpenTelemetry messaging conventions for Kafka (``messaging.system``,
``messaging.destination.name`` = the messages topic, ``messaging.consumer.group.name``, ``messaging.message.id``,
``messaging.destination.partition.id``, ``messaging.kafka.offset``, ``messaging.kafka.message.key`` = the queue,
which is the record key) plus kmq's own: ``messaging.kmq.queue``, ``messaging.kmq.delivery_count``,
``messaging.kmq.first_message_id``.

No cost when not installed or not configured: kmq never imports opentelemetry itself (an application that
configures tracing has imported it), so ``import kmq`` costs nothing more; ``tracer()``, asked once per send and
per handler run, answers None from a cached check and looks again at most once a second (so a provider set after
kmq's clients were made is picked up); and nothing is added to any message.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol

from kmq.wire import MessageId, consumer_group


def _installed() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry") is not None  # a top-level name: nothing is imported
    except (ImportError, ValueError):  # ValueError: a module whose import was blocked (sys.modules[name] = None)
        return False


#: The extra (opentelemetry-api) is installed; kmq imports it only once an application has set tracing up.
INSTALLED = _installed()

#: How often, at most, kmq asks the OpenTelemetry API whether a TracerProvider was configured meanwhile.
RECHECK_S = 1.0

_provider: Any = None
_tracer: Any = None
_next_check = 0.0


class Traced(Protocol):
    """What the hooks read from a kmq Message (``kmq.Message``, or ``kmq.aio.AsyncMessage.message``)."""

    @property
    def queue(self) -> str: ...
    @property
    def message_id(self) -> MessageId: ...
    @property
    def first_message_id(self) -> MessageId: ...
    @property
    def delivery_count(self) -> int: ...
    @property
    def headers(self) -> dict[str, bytes]: ...

    _span: Any


def use(tracer_provider: Any) -> None:
    """Traces kmq with ``tracer_provider`` instead of the global one (None: the global one again). For tests and
    applications that keep kmq's spans apart; most set the global provider and never call this."""
    global _provider, _tracer, _next_check
    _provider, _tracer, _next_check = tracer_provider, None, 0.0


def tracer() -> Any:
    """kmq's Tracer when tracing is on (a TracerProvider is configured), else None. Called once per message."""
    global _tracer, _next_check
    found = _tracer
    if found is not None:
        return found
    now = time.monotonic()
    if now < _next_check:
        return None
    _next_check = now + RECHECK_S
    provider = _provider
    if provider is None:
        api = sys.modules.get("opentelemetry.trace")
        if api is None:  # nobody in this process set tracing up (or the extra is not installed)
            return None
        provider = api.get_tracer_provider()
    from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider

    if isinstance(provider, ProxyTracerProvider | NoOpTracerProvider):
        return None
    _tracer = provider.get_tracer("kmq", _version())
    return _tracer


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kmq")
    except PackageNotFoundError:
        return ""


# --- send ------------------------------------------------------------------------------------------------------


def start_send(found: Any, topic: str, queue: str, headers: list[tuple[str, bytes]]) -> Any:
    """Starts the ``send`` span of one message and adds its context to ``headers`` (a header the caller set itself
    is kept, not overwritten); the caller ends it with ``end_send``."""
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind

    span = found.start_span(f"send {queue}", kind=SpanKind.PRODUCER, attributes={
        **_base(topic, queue), "messaging.operation.type": "send", "messaging.operation.name": "send"})
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    present = {name for name, _ in headers}
    headers.extend((name, value.encode()) for name, value in carrier.items() if name not in present)
    return span


def end_send(span: Any, message_id: MessageId | None, error: BaseException | None) -> None:
    """Ends a ``send`` span when the delivery report came (on the producer's thread)."""
    from opentelemetry.trace import Status, StatusCode

    if error is not None:
        span.set_status(Status(StatusCode.ERROR, str(error)))
        span.set_attribute("error.type", type(error).__name__)
    elif message_id is not None:
        span.set_attributes(_position(message_id))
    span.end()


# --- process ----------------------------------------------------------------------------------------------------


def process_span(message: Traced, topic: str = "") -> AbstractContextManager[Any]:
    """``with kmq.otel.process_span(message):`` runs the block inside a ``process <queue>`` span whose parent is
    the producer's span (and which links to it); settles inside it are recorded as its events, an exception that
    leaves it as its status. ``topic``: the messages topic, for ``messaging.destination.name``. Takes a Message or
    an AsyncMessage; yields the span, or None when tracing is off."""
    found = tracer()
    target: Traced = getattr(message, "message", message)  # an AsyncMessage carries the Message
    return nullcontext() if found is None else processing(found, target, topic)


@contextmanager
def processing(found: Any, message: Traced, topic: str) -> Iterator[Any]:
    """The ``process`` span of one delivery, current inside the block (the handler's own spans nest in it)."""
    from opentelemetry import trace

    span = start_process(found, message, topic)
    try:
        with trace.use_span(span, end_on_exit=False, record_exception=True, set_status_on_exception=True):
            yield span
    finally:
        end_process(message, span)


def start_process(found: Any, message: Traced, topic: str) -> Any:
    """Starts the ``process`` span of one delivery; settles of ``message`` are recorded on it until
    ``end_process``. The caller makes it current (``trace.use_span``) where the handler runs."""
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind

    parent = _extract(message.headers)
    creation = trace.get_current_span(parent).get_span_context() if parent is not None else trace.INVALID_SPAN_CONTEXT
    valid = creation.is_valid
    attributes = {**_base(topic, message.queue), **_position(message.message_id),
                  "messaging.operation.type": "process", "messaging.operation.name": "process",
                  "messaging.consumer.group.name": consumer_group(message.queue),
                  "messaging.kmq.delivery_count": message.delivery_count,
                  "messaging.kmq.first_message_id": str(message.first_message_id)}
    span = found.start_span(f"process {message.queue}", context=parent if valid else None, kind=SpanKind.CONSUMER,
                            links=[Link(creation)] if valid else None, attributes=attributes)
    message._span = span
    return span


def end_process(message: Traced, span: Any) -> None:
    """Ends a ``process`` span; later settles of ``message`` are no longer recorded on it."""
    if message._span is span:
        message._span = None
    span.end()


def failed(span: Any, failure: str) -> None:
    """The handler failed (an exception, or its time limit): the span's status says so."""
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, failure))
    span.set_attribute("error.type", failure.partition(":")[0])


# --- settle -----------------------------------------------------------------------------------------------------


def settled(span: Any, how: str, **details: str | float) -> None:
    """A settle of the message whose process span is ``span``: an event (ack, release, reject, give_back)."""
    if span.is_recording():
        span.add_event(how, {"messaging.operation.type": "settle", "messaging.operation.name": how,
                             **{f"messaging.kmq.{name}": value for name, value in details.items()}})


def dead_lettered(span: Any, topic: str, reason: str) -> None:
    if span.is_recording():
        span.add_event("dead_letter", {"messaging.operation.type": "send", "messaging.destination.name": topic,
                                       "messaging.kmq.reason": reason})


# --- the tracker --------------------------------------------------------------------------------------------------


def redelivered(headers: Sequence[tuple[str, bytes]], queue: str, topic: str, message_id: MessageId,
                delivery_count: int, dead_letter: bool) -> None:
    """A tracker copied an expired message (to ``topic``): a ``redeliver`` span in the producer's trace. Nothing for
    messages sent without a trace context."""
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind

    found = tracer()
    if found is None or not headers:
        return
    parent = _extract(dict(headers))
    if parent is None:
        return
    creation = trace.get_current_span(parent).get_span_context()
    if not creation.is_valid:
        return
    span = found.start_span(f"redeliver {queue}", context=parent, kind=SpanKind.PRODUCER, links=[Link(creation)],
                            attributes={**_base(topic, queue), "messaging.operation.type": "send",
                                        "messaging.operation.name": "redeliver",
                                        "messaging.kmq.expired_message_id": str(message_id),
                                        "messaging.kmq.delivery_count": delivery_count,
                                        "messaging.kmq.dead_letter": dead_letter})
    span.end()


# --- attributes and carriers -----------------------------------------------------------------------------------------


def _base(topic: str, queue: str) -> dict[str, str]:
    attributes = {"messaging.system": "kafka", "messaging.kafka.message.key": queue, "messaging.kmq.queue": queue}
    if topic:
        attributes["messaging.destination.name"] = topic
    return attributes


def _position(message_id: MessageId) -> dict[str, str | int]:
    return {"messaging.message.id": str(message_id),
            "messaging.destination.partition.id": str(message_id.partition),
            "messaging.kafka.offset": message_id.offset}


def _extract(headers: Mapping[str, bytes]) -> Any:
    """The context the producer injected into ``headers``, or None if it injected none."""
    from opentelemetry import propagate

    if not headers:
        return None
    carrier = {name: headers[name].decode("latin-1") for name in propagate.get_global_textmap().fields
               if name in headers}
    return propagate.extract(carrier) if carrier else None
