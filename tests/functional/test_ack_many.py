"""consumer.ack_many against a real broker, in both marker formats: a batch acked at once is never redelivered."""

from __future__ import annotations

import pytest

from kmq import Service
from kmq.wire.markers import MarkerType
from tests.helpers import ConfigFactory, receive_n, tracker_thread
from tests.markers_io import read_markers

pytestmark = pytest.mark.timeout(90)


def test_a_batch_acked_at_once_is_ended_and_never_redelivered(kmq_config: ConfigFactory, marker_format: str) -> None:
    config = kmq_config(redelivery_timeout_ms=2000, marker_format=marker_format)
    queue = Service(config).queue("batch")
    with queue.producer() as producer:
        for i in range(50):
            producer.send_async(b"%d" % i)
    with tracker_thread(config), queue.consumer() as consumer:
        got = receive_n(consumer, 50)
        consumer.ack_many(got)
        assert consumer.flush(10) == 0
        assert consumer.receive(4.0) is None, "an acked message came back"
    ends = {m.message_id for m in read_markers(config.bootstrap_servers, config.marker_topic,
                                               until=lambda ms: sum(m.type is MarkerType.END for m in ms) >= 50)
            if m.type is MarkerType.END}
    assert ends == {m.message_id for m in got}
