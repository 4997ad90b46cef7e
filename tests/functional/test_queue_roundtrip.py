"""Producer → messages topic → Consumer → markers: per-queue filtering, payloads, headers, one Start and one End."""

from __future__ import annotations

from collections import Counter

import pytest

from kmq import Service
from kmq.wire.markers import MarkerType
from tests.conftest import ConfigFactory
from tests.helpers import receive_n
from tests.markers_io import read_markers

pytestmark = pytest.mark.timeout(90)


def test_two_queues_on_one_topic_each_get_exactly_their_own_messages(
    kmq_config: ConfigFactory, marker_format: str,
) -> None:
    config = kmq_config(partitions=3, marker_format=marker_format)
    service = Service(config)
    n, m = 40, 25
    with service.queue("A").producer() as pa, service.queue("B").producer() as pb:
        for i in range(n):
            pa.send_async(b"a%d" % i, headers={"i": str(i)})
        for i in range(m):
            pb.send(b"b%d" % i)
        assert pa.flush(10) == 0

    with service.queue("A").consumer() as ca, service.queue("B").consumer() as cb:
        got_a = receive_n(ca, n)
        got_b = receive_n(cb, m)
        for msg in got_a + got_b:
            msg.ack()
        assert ca.receive(1.0) is None and cb.receive(0.5) is None

    assert sorted(x.payload for x in got_a) == sorted(b"a%d" % i for i in range(n))
    assert sorted(x.payload for x in got_b) == sorted(b"b%d" % i for i in range(m))
    assert all(x.headers == {"i": x.payload[1:]} for x in got_a)
    assert all(x.delivery_count == 1 and x.first_message_id == x.message_id for x in got_a + got_b)

    markers = read_markers(config.bootstrap_servers, config.marker_topic,
                           until=lambda ms: sum(mk.type is MarkerType.END for mk in ms) >= n + m)
    counts = Counter((mk.queue if mk.type is MarkerType.START else None, mk.type, mk.message_id)
                     for mk in markers if mk.type is not MarkerType.KEEPALIVE)
    starts = [k for k in counts if k[1] is MarkerType.START]
    ends = {k[2] for k in counts if k[1] is MarkerType.END}
    assert len(starts) == n + m and all(counts[k] == 1 for k in counts)
    assert {s[2] for s in starts} == ends
    assert Counter(s[0] for s in starts) == {"A": n, "B": m}
