"""kmq.otel without a broker: off when not installed or not configured, and what the spans carry when on."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from opentelemetry.trace import SpanKind

from kmq import Config, otel
from kmq.client.consumer.record_messages import to_message
from kmq.client.message import Message
from kmq.client.producer import Producer
from kmq.wire import MessageId
from tests.helpers import ROOT
from tests.otel_spans import named, recorded_spans

OFFLINE = Config(bootstrap_servers="127.0.0.1:1")


class Settles:
    """A Settler that accepts every settle (the spans are what these tests look at)."""

    def _ack(self, message: Message) -> None:
        message._settled_as = "ack"

    def _release(self, message: Message, delay_ms: int) -> None:
        message._settled_as = "release"

    def _reject(self, message: Message, reason: str) -> None:
        message._settled_as = "reject"

    def _give_back(self, message: Message) -> None:
        message._settled_as = "give back"

    def _keep_alive(self, message: Message) -> None:
        pass


def delivered(headers: dict[str, bytes], count: int = 1) -> Message:
    mid = MessageId(2, 41)
    return Message(b"p", headers, "emails", mid, count, MessageId(0, 7) if count > 1 else mid, 0, Settles())


def prepared_headers(headers: dict[str, str | bytes] | None = None) -> list[tuple[str, bytes]]:
    producer = Producer(OFFLINE, "emails")  # no I/O until something is produced
    try:
        return producer._prepare(b"x", headers, time_limit=None, delay=None, deliver_at=None, ttl=None).headers
    finally:
        producer.close(0)


def test_without_opentelemetry_installed_kmq_works_and_touches_no_message() -> None:
    script = textwrap.dedent("""
        import sys
        sys.modules["opentelemetry"] = None  # what an environment without the extra looks like to an import
        import kmq
        from kmq import otel
        from kmq.client.producer import Producer
        from kmq.worker import Worker
        assert not otel.INSTALLED and otel.tracer() is None
        producer = Producer(kmq.Config(bootstrap_servers="127.0.0.1:1"), "q")
        record = producer._prepare(b"x", {"a": "b"}, time_limit=None, delay=None, deliver_at=None, ttl=None)
        assert record.headers == [("a", b"b")] and record.span is None, record
        producer.close(0)
        print("ok", sorted(m for m in sys.modules if m.startswith("opentelemetry")))
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok ['opentelemetry']"  # only the blocked name: nothing else was imported


def test_with_opentelemetry_installed_and_not_set_up_kmq_does_not_even_import_it() -> None:
    script = textwrap.dedent("""
        import sys
        import kmq
        from kmq import otel
        from kmq.client.producer import Producer
        assert otel.INSTALLED and otel.tracer() is None
        producer = Producer(kmq.Config(bootstrap_servers="127.0.0.1:1"), "q")
        record = producer._prepare(b"x", None, time_limit=None, delay=None, deliver_at=None, ttl=None)
        assert record.headers == [] and record.span is None, record
        producer.close(0)
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_with_the_api_but_no_tracer_provider_nothing_is_traced() -> None:
    assert otel.INSTALLED
    assert otel.tracer() is None
    assert prepared_headers({"a": "b"}) == [("a", b"b")]
    message = delivered({})
    with otel.process_span(message) as span:
        assert span is None
        message.ack()
    assert message._span is None


def test_the_send_span_is_injected_and_the_process_span_is_its_child_and_links_to_it() -> None:
    with recorded_spans() as exporter:
        headers = prepared_headers({"user": "1"})
        names = [name for name, _ in headers]
        assert names[0] == "user" and "traceparent" in names
        record_span = exporter.get_finished_spans()  # the send span ends with the delivery report
        assert record_span == ()
        message = delivered(dict(headers), count=2)
        with otel.process_span(message, "kmq.messages") as span:
            assert span is not None and message._span is span
            message.release(1.5)
        assert message._span is None
        message2 = delivered(dict(headers))
        with otel.process_span(message2):
            message2.reject("bad input")
        (first, second) = named(exporter.get_finished_spans(), "process emails")
    traceparent = dict(headers)["traceparent"].decode()
    trace_id, parent_id = traceparent.split("-")[1], traceparent.split("-")[2]
    assert f"{first.context.trace_id:032x}" == trace_id
    assert first.parent is not None and f"{first.parent.span_id:016x}" == parent_id
    assert [f"{link.context.span_id:016x}" for link in first.links] == [parent_id]
    assert first.kind is SpanKind.CONSUMER
    assert dict(first.attributes or {}) == {
        "messaging.system": "kafka", "messaging.destination.name": "kmq.messages",
        "messaging.kafka.message.key": "emails", "messaging.kmq.queue": "emails",
        "messaging.message.id": "2:41", "messaging.destination.partition.id": "2", "messaging.kafka.offset": 41,
        "messaging.operation.type": "process", "messaging.operation.name": "process",
        "messaging.consumer.group.name": "kafka-mq-emails", "messaging.kmq.delivery_count": 2,
        "messaging.kmq.first_message_id": "0:7"}
    assert [(e.name, dict(e.attributes or {})) for e in first.events] == [
        ("release", {"messaging.operation.type": "settle", "messaging.operation.name": "release",
                     "messaging.kmq.delay_s": 1.5})]
    assert [e.name for e in second.events] == ["reject"]


def test_a_trace_context_the_sender_set_itself_is_kept() -> None:
    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with recorded_spans():
        headers = prepared_headers({"traceparent": own})
    assert [v for k, v in headers if k == "traceparent"] == [own.encode()]


def test_the_consumer_keeps_the_trace_headers_of_a_record() -> None:
    class Record:
        def partition(self) -> int:
            return 1

        def offset(self) -> int:
            return 9

        def value(self) -> bytes:
            return b"v"

        def timestamp(self) -> tuple[int, int]:
            return 1, 1_700_000_000_000

        def headers(self) -> list[tuple[str, bytes]]:
            return [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
                    ("tracestate", b"k=v"), ("kmq-delivery-count", b"3")]

    message = to_message(Record(), "emails", Settles(), 0.0)  # type: ignore[arg-type]
    assert message.delivery_count == 3
    assert set(message.headers) == {"traceparent", "tracestate"}


def test_a_message_sent_without_a_trace_context_gets_a_process_span_of_its_own() -> None:
    with recorded_spans() as exporter:
        message = delivered({})
        with otel.process_span(message):
            message.ack()
        (span,) = exporter.get_finished_spans()
    assert span.parent is None and not span.links
    assert [e.name for e in span.events] == ["ack"]
