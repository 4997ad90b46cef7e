"""kmq.otel on a real broker: one trace from send through a crashed worker, the tracker's redelivery and the second
delivery's ack, in both marker formats; and a coroutine handler inside its process span."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from kmq import Config, Message, Service, Worker
from tests.functional.test_worker import Workers
from tests.helpers import FAST_GROUP, ConfigFactory, tracker_thread
from tests.markers_io import wait_for
from tests.otel_spans import named, recorded_spans

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    started = Workers(tmp_path / "runs.jsonl")
    yield started
    for proc in started.procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


class InProcessWorker:
    """A Worker on a thread of the test process (its spans go to the test's exporter)."""

    def __init__(self, config: Config, queue: str, handler: Callable[[Message], Any]) -> None:
        self.worker = Worker(config, [queue], handler, 1, drain_timeout_s=5, close_timeout_s=10)
        self.thread = threading.Thread(target=self.worker.run, kwargs={"install_signals": False}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the worker did not stop within 30 s"


def hex_id(span_id: int) -> str:
    return f"{span_id:016x}"


@pytest.mark.parametrize("marker_format", ["kmq", "kafka-mq-go"])
def test_one_trace_from_send_through_a_crash_and_the_redelivery_to_the_second_deliverys_ack(
    kmq_config: ConfigFactory, workers: Workers, marker_format: str,
) -> None:
    config = kmq_config(redelivery_timeout_ms=4_000, marker_format=marker_format, consumer_kafka=FAST_GROUP)
    queue = Service(config).queue("traced")
    seen: list[tuple[int, Any]] = []

    def handle(message: Message) -> None:
        seen.append((message.delivery_count, trace.get_current_span()))

    with recorded_spans() as exporter, tracker_thread(config):
        tracer = trace.get_tracer("test", tracer_provider=exporter_provider(exporter))
        with tracer.start_as_current_span("request"), queue.producer() as producer:
            sent = producer.send(b"job")
        crashed = workers.start(config, "tests.handlers:block_until_released", "traced")
        assert wait_for(lambda: len(workers.runs()) == 1, timeout_s=60), "the first worker never ran the job"
        crashed.kill()  # mid-handler: no settle, no keep-alive from now on; the tracker redelivers it
        crashed.communicate(timeout=30)
        second = InProcessWorker(config, "traced", handle)
        try:
            assert wait_for(lambda: second.worker.counts["acked"] == 1, timeout_s=90), second.worker.counts
        finally:
            second.stop()
        spans = exporter.get_finished_spans()
    (request,) = named(spans, "request")
    (send,) = named(spans, "send traced")
    (redeliver,) = named(spans, "redeliver traced")
    (process,) = named(spans, "process traced")
    assert {s.context.trace_id for s in (request, send, redeliver, process)} == {request.context.trace_id}, \
        "one trace"
    assert send.parent is not None and send.parent.span_id == request.context.span_id
    assert send.attributes is not None and send.attributes["messaging.message.id"] == str(sent)
    # The copy's process span is the producer's child and links to it; the tracker's copy is in the trace too.
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert redeliver.parent is not None and redeliver.parent.span_id == send.context.span_id
    assert redeliver.attributes is not None and redeliver.attributes["messaging.kmq.expired_message_id"] == str(sent)
    attributes = dict(process.attributes or {})
    assert attributes["messaging.kmq.delivery_count"] == 2
    assert attributes["messaging.kmq.first_message_id"] == str(sent)
    assert attributes["messaging.message.id"] != str(sent), "the second delivery is the tracker's copy"
    assert attributes["messaging.destination.name"] == config.message_topic
    assert attributes["messaging.consumer.group.name"] == "kafka-mq-traced"
    assert [e.name for e in process.events] == ["ack"]
    # The handler ran inside the process span (its own spans nest there).
    assert [(count, hex_id(span.get_span_context().span_id)) for count, span in seen] == \
        [(2, hex_id(process.context.span_id))]


def exporter_provider(exporter: Any) -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def test_a_coroutine_handler_runs_inside_its_process_span_and_a_dead_letter_is_recorded(
    kmq_config: ConfigFactory,
) -> None:
    from kmq import Reject

    config = kmq_config()
    queue = Service(config).queue("atraced")
    current: list[int] = []

    async def handle(message: Message) -> None:
        current.append(trace.get_current_span().get_span_context().span_id)
        if message.payload == b"bad":
            raise Reject("bad payload")

    with recorded_spans() as exporter:
        with queue.producer() as producer:
            producer.send(b"good")
            producer.send(b"bad")
        worker = InProcessWorker(config, "atraced", handle)
        try:
            assert wait_for(lambda: worker.worker.counts["acked"] + worker.worker.counts["rejected"] == 2,
                            timeout_s=60), worker.worker.counts
        finally:
            worker.stop()
        spans = exporter.get_finished_spans()
    processes: list[ReadableSpan] = named(spans, "process atraced")
    sends = {s.context.span_id: s for s in named(spans, "send atraced")}
    assert len(processes) == 2 and len(sends) == 2
    assert sorted(current) == sorted(p.context.span_id for p in processes)
    events = {}
    for process in processes:
        assert process.parent is not None and process.parent.span_id in sends
        events[process.attributes["messaging.message.id"] if process.attributes else ""] = \
            [e.name for e in process.events]
    assert sorted(events.values()) == [["ack"], ["dead_letter", "reject"]]
