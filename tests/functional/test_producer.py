"""The producer's synchronous send beside asynchronous ones: each send returns its own record's id once durable,
whatever other threads have queued (the flush that makes a send skip linger.ms must not mix up reports)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from kmq import MessageId, Service
from tests.helpers import ConfigFactory
from tests.markers_io import read_topic

pytestmark = pytest.mark.timeout(120)


def test_sync_sends_from_many_threads_beside_an_async_flood_each_return_their_own_record(
    kmq_config: ConfigFactory,
) -> None:
    config = kmq_config(partitions=3)
    threads, per_thread, flood = 4, 50, 5_000
    got: dict[bytes, MessageId] = {}
    errors: list[BaseException] = []
    with Service(config).queue("q").producer() as producer:
        def send_sync(t: int) -> None:
            try:
                for i in range(per_thread):
                    payload = b"sync-%d-%d" % (t, i)
                    got[payload] = producer.send(payload, timeout=60)
            except BaseException as err:  # noqa: BLE001 - reported by the assertion below
                errors.append(err)

        workers = [threading.Thread(target=send_sync, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        deliveries = [producer.send_async(b"async-%d" % i) for i in range(flood)]
        for worker in workers:
            worker.join(90)
        assert producer.flush(60) == 0
    assert not errors
    assert len(got) == threads * per_thread
    assert all(d.done() and d.exception() is None for d in deliveries)
    total = threads * per_thread + flood
    records = read_topic(config.bootstrap_servers, config.message_topic, until=lambda rs: len(rs) >= total)
    at = {MessageId(r.partition(), r.offset()): r.value() for r in records}
    assert all(at[message_id] == payload for payload, message_id in got.items())


def test_a_burst_of_sends_spreads_evenly_over_the_partitions_so_as_many_workers_share_it(
        kmq_config: ConfigFactory) -> None:
    """librdkafka's random partitioner put 13 of 30 records on one of 4 partitions: the two workers owning two
    partitions each would have run 19 and 11 of them."""
    config = kmq_config(partitions=4)
    with Service(config).queue("burst").producer() as producer:
        producer.send(b"first")  # by then it knows the partitions (it asks when it starts)
        sync = Counter(producer.send(b"s").partition for _ in range(30))
        sent = [producer.send_async(b"a") for _ in range(30)]
        assert producer.flush(30) == 0
        burst = Counter(d.result(0).partition for d in sent)
    for counts in (sync, burst):
        assert sorted(counts) == [0, 1, 2, 3] and max(counts.values()) - min(counts.values()) <= 1, counts
