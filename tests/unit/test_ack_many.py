"""consumer.ack_many: a batch acked in one step (SQS DeleteMessageBatch style), through the Consumer facade and its
fake clients: every ack in one settle record, and a batch with a settled message acks the rest and says which."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from kmq.client.consumer import Consumer
from kmq.client.message import Message
from kmq.config import Config
from kmq.errors import ConsumerClosedError, MessageSettledError, UndeliveredMarkersError
from kmq.wire.marker_batch import decode_batch
from kmq.wire.markers import MarkerType
from tests.unit.fake_clients import FakeClients, FakeGroupClient, Record, receive


@contextlib.contextmanager
def _consumer(at_most_once: tuple[str, ...] = ()) -> Iterator[tuple[Consumer, FakeClients, list[Message]]]:
    clients = FakeClients(FakeGroupClient("m", partitions=1))
    config = Config(bootstrap_servers="fake:9092", message_topic="m", marker_topic="mk", connect_timeout_ms=2000,
                    next_message_timeout_ms=50, settle_linger_ms=60_000, at_most_once_queues=at_most_once)
    consumer = Consumer(config, "q", clients=clients)
    clients.group.rebalance("assign", [0])
    clients.group.feed([Record("m", 0, i, value_=b"m%d" % i) for i in range(6)])
    got = receive(consumer, 6)
    assert len(got) == 6
    try:
        yield consumer, clients, got
    finally:
        with contextlib.suppress(UndeliveredMarkersError):
            consumer.close(2)


@pytest.fixture(params=[(), ("q",)], ids=["at-least-once", "at-most-once"])
def rig(request: pytest.FixtureRequest) -> Iterator[tuple[Consumer, FakeClients, list[Message]]]:
    with _consumer(request.param) as made:
        yield made


def _acked(clients: FakeClients) -> list[int]:
    return [m.message_id.offset for r in clients.produced("mk") if r.value[:1] == b"\x00"
            for m in decode_batch(r.value).markers() if m.type is MarkerType.END]


def test_a_batch_is_acked_at_once_and_written_as_one_settle_record(
    rig: tuple[Consumer, FakeClients, list[Message]],
) -> None:
    consumer, clients, got = rig
    consumer.ack_many(got)
    assert all(m.settled for m in got)
    assert consumer.flush(2) == 0
    at_least_once = consumer._p.settler is consumer._p.in_flight
    assert _acked(clients) == ([0, 1, 2, 3, 4, 5] if at_least_once else [])
    with pytest.raises(MessageSettledError):
        got[0].ack()


def test_a_batch_with_a_settled_message_acks_the_rest_then_names_it(
    rig: tuple[Consumer, FakeClients, list[Message]],
) -> None:
    consumer, clients, got = rig
    got[2].ack()
    with pytest.raises(MessageSettledError, match=r"0:2"):
        consumer.ack_many(got)
    assert all(m.settled for m in got)
    assert consumer.flush(2) == 0
    if consumer._p.settler is consumer._p.in_flight:
        assert sorted(_acked(clients)) == [0, 1, 2, 3, 4, 5] and len(_acked(clients)) == 6


def test_after_close_a_batch_is_refused() -> None:
    with _consumer() as (consumer, _, got):
        with contextlib.suppress(UndeliveredMarkersError):
            consumer.close(2)
        with pytest.raises(ConsumerClosedError):
            consumer.ack_many(got)
