"""What the kmq transport adds to kombu's generic behaviour, on a real broker: ETAs held by kmq (not by the
consumer), rejects as dead letters, purge and queue size, unconfirmed publishing, the kmq:// URL."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from typing import Any

import kombu
import pytest
from confluent_kafka.admin import AdminClient

from kmq import Config
from tests.frameworks.kombu.conftest import transport_options, url
from tests.helpers import tracker_thread
from tests.markers_io import read_topic

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def conn(kombu_config: Config) -> Iterator[Any]:
    with kombu.Connection(url(kombu_config), transport_options=transport_options(kombu_config)) as connection:
        yield connection


def test_a_task_with_an_eta_is_held_by_kmq_until_due(conn: Any, kombu_config: Config) -> None:
    due = datetime.now(UTC) + timedelta(seconds=3)
    received: list[float] = []
    queue = kombu.Queue("eta", routing_key="eta")
    with tracker_thread(kombu_config), conn.channel() as channel:  # a wait longer than 1 s hops via the tracker
        kombu.Producer(channel).publish({"n": 1}, routing_key="eta", declare=[queue], headers={"eta": due.isoformat()})
        with kombu.Consumer(conn, [queue], callbacks=[lambda body, m: (received.append(time.time()), m.ack())]):
            deadline = time.monotonic() + 40
            while not received and time.monotonic() < deadline:
                with contextlib.suppress(socket.timeout):
                    conn.drain_events(timeout=0.5)
    assert received, "the delayed message never came"
    assert received[0] >= due.timestamp() - 0.01, "handed to the consumer before its eta: held in memory, not by kmq"


def test_a_message_rejected_without_requeue_is_a_dead_letter(conn: Any, kombu_config: Config) -> None:
    marker = uuid.uuid4().hex
    with closing(conn.SimpleQueue("doomed")) as queue:
        queue.put({"marker": marker})
        message = queue.get(timeout=10)
        message.reject(requeue=False)
        kmq_queue = conn.default_channel.kmq_queue("doomed")

    def of_this_queue(records: list[Any]) -> list[Any]:
        return [r for r in records if ("kmq-queue", kmq_queue.encode()) in (r.headers() or [])]

    letters = of_this_queue(read_topic(kombu_config.bootstrap_servers, kombu_config.dlq_topic,
                                       until=lambda records: bool(of_this_queue(records))))
    assert len(letters) == 1
    body = json.loads(letters[0].value())["body"]  # the kombu message as published (body base64, kombu's default)
    assert json.loads(base64.b64decode(body)) == {"marker": marker}
    assert b"requeue=False" in dict(letters[0].headers())["kmq-dead-letter-reason"]


def test_purge_empties_a_queue_and_says_how_many_waited_as_a_passive_declaration_did(conn: Any) -> None:
    with closing(conn.SimpleQueue("purged")) as queue:
        for number in range(5):
            queue.put({"n": number})
        assert queue.qsize() == 5
        assert queue.clear() == 5
        with pytest.raises(queue.Empty):
            queue.get(timeout=3)
        queue.put({"n": "after"})
        assert queue.get(timeout=10).payload == {"n": "after"}


def test_unconfirmed_publishing_still_delivers(kombu_config: Config) -> None:
    options = {**transport_options(kombu_config), "confirm_publish": False}
    with kombu.Connection(url(kombu_config), transport_options=options) as connection, \
            closing(connection.SimpleQueue("fast")) as queue:
        for number in range(20):
            queue.put({"n": number})
        got = [queue.get(timeout=10) for _ in range(20)]
        for message in got:
            message.ack()
        assert sorted(m.payload["n"] for m in got) == list(range(20))


def test_a_missing_topic_is_a_clear_error_unless_the_transport_may_create_it(kombu_config: Config,
                                                                           admin: AdminClient) -> None:
    missing = f"kombu-missing-{uuid.uuid4().hex[:8]}"
    options: dict[str, Any] = {"kmq": {"message_topic": f"{missing}.messages", "marker_topic": f"{missing}.markers"}}
    with kombu.Connection(url(kombu_config), transport_options=options) as connection, \
            pytest.raises(Exception, match="does not exist"):
        connection.connect()
    with kombu.Connection(url(kombu_config), transport_options={**options, "create_topics": True}) as connection:
        try:
            assert connection.connect()
            with closing(connection.SimpleQueue("made")) as queue:
                queue.put({"n": 1})
                assert queue.get(timeout=10).payload == {"n": 1}
        finally:
            made = [f"{missing}.messages", f"{missing}.markers", f"{missing}.messages.dlq",
                    f"{missing}.messages.control"]
            for future in admin.delete_topics(made, operation_timeout=30).values():
                future.result(timeout=30)


def test_a_message_unacked_when_its_channel_closes_is_given_back_uncounted(kombu_config: Config) -> None:
    """What a stopping Celery worker prefetched and never ran comes back at once (the tracker), delivery count 1."""
    options = transport_options(kombu_config)
    with tracker_thread(kombu_config):
        with kombu.Connection(url(kombu_config), transport_options=options) as first, \
                closing(first.SimpleQueue("handed-back")) as queue:
            queue.put({"n": 1})
            held = queue.get(timeout=10)
            assert held.delivery_info["kmq_delivery_count"] == 1
        with kombu.Connection(url(kombu_config), transport_options=options) as second, \
                closing(second.SimpleQueue("handed-back")) as queue:
            again = queue.get(timeout=30)
            again.ack()
    assert again.payload == {"n": 1}
    assert again.delivery_info["kmq_delivery_count"] == 1, "a message no handler ran was counted as a delivery"


def test_a_message_group_set_as_kombu_s_sqs_transport_does_is_kept_in_order_on_one_partition(
    conn: Any, kombu_config: Config,
) -> None:
    queue = kombu.Queue("grouped", routing_key="grouped")
    with conn.channel() as channel:
        producer = kombu.Producer(channel)
        for n in range(6):
            producer.publish({"n": n}, routing_key="grouped", declare=[queue],
                             MessageGroupId="account-7" if n % 2 else "account-9")
        kmq_queue = channel.kmq_queue("grouped")
    records = [r for r in read_topic(kombu_config.bootstrap_servers, kombu_config.message_topic,
                                     until=lambda rs: sum(r.key() == kmq_queue.encode() for r in rs) >= 6)
               if r.key() == kmq_queue.encode()]
    partitions: dict[Any, set[Any]] = {}
    for r in records:
        partitions.setdefault(dict(r.headers() or [])["kmq-group"], set()).add(r.partition())
    # Two groups may share a partition (their hashes meet one time in the partition count); a group never spans two.
    assert sorted(partitions) == [b"account-7", b"account-9"]
    assert all(len(held) == 1 for held in partitions.values()), f"a group on several partitions: {partitions}"
    got: list[tuple[str, int]] = []

    def handle(body: Any, message: Any) -> None:
        got.append((message.properties["MessageGroupId"], body["n"]))
        message.ack()

    with kombu.Consumer(conn, [queue], callbacks=[handle]):
        deadline = time.monotonic() + 40
        while len(got) < 6 and time.monotonic() < deadline:
            with contextlib.suppress(socket.timeout):
                conn.drain_events(timeout=0.5)
    for group, expected in (("account-7", [1, 3, 5]), ("account-9", [0, 2, 4])):
        assert [n for g, n in got if g == group] == expected
