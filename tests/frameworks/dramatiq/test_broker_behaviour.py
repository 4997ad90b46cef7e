"""How Dramatiq's concepts land on kmq: retries, dead letters, flush, join, time limits and keep-alives.

Dramatiq keeps its own tests of these (tests/middleware/) out of its sdist; these are ours, on a real Kafka broker.
``stub_broker`` / ``stub_worker`` are the conftest's KmqBroker and worker (the names Dramatiq's tests use).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import dramatiq
import pytest
from dramatiq import Worker
from dramatiq.errors import QueueJoinTimeout
from dramatiq.middleware import CurrentMessage

from kmq.dramatiq import KmqBroker, KmqMessageProxy
from kmq.ops.dlq import list_dead_letters
from tests.frameworks.dramatiq.common import worker
from tests.frameworks.dramatiq.conftest import DramatiqSession, new_broker


@dataclass(frozen=True)
class Run:
    at: float
    retries: int
    delivery_count: int
    deliver_at: float | None
    time_limit: float | None
    kmq_id: str


def current_run() -> Run:
    proxy = CurrentMessage.get_current_message()
    assert isinstance(proxy, KmqMessageProxy)
    kmq = proxy.kmq_message
    return Run(time.time(), proxy.options.get("retries", 0), proxy.delivery_count,
               kmq.deliver_at.timestamp() if kmq.deliver_at else None, kmq.time_limit, str(kmq.message_id))


@pytest.fixture
def tracked(stub_broker: KmqBroker) -> KmqBroker:
    stub_broker.add_middleware(CurrentMessage())
    return stub_broker


def test_a_retry_is_a_new_kmq_message_held_back_by_a_kmq_delay(tracked: KmqBroker, stub_worker: Worker) -> None:
    # Given an actor that asks twice to be retried in 0.3 s
    runs: list[Run] = []

    @dramatiq.actor(max_retries=3)
    def flaky() -> None:
        runs.append(current_run())
        if len(runs) < 3:
            raise dramatiq.Retry(delay=300)

    # When it runs
    flaky.send()
    tracked.join(flaky.queue_name)

    # Then each retry was a kmq message of its own (a first delivery), sent with a due time no handler ran before
    assert [r.retries for r in runs] == [0, 1, 2]
    assert [r.delivery_count for r in runs] == [1, 1, 1]
    assert len({r.kmq_id for r in runs}) == 3
    assert runs[0].deliver_at is None
    for run in runs[1:]:
        assert run.deliver_at is not None and run.at >= run.deliver_at - 0.005
    # And no delay queue exists on either side
    assert tracked.get_declared_delay_queues() == set()
    assert set(stub_worker.consumers) == {"default"}


def test_exhausted_retries_go_to_the_kmq_dead_letter_topic_and_redrive_brings_them_back(
        stub_broker: KmqBroker, stub_worker: Worker) -> None:
    # Given an actor that fails until it is fixed
    fixed, done = False, []

    @dramatiq.actor(max_retries=1, min_backoff=10, max_backoff=20)
    def doomed(n: int) -> None:
        if not fixed:
            raise ValueError(f"boom {n}")
        done.append(n)

    # When its retries run out
    message = doomed.send(7)

    # Then join fails fast with its exception, and the message is a dead letter here and on the topic
    with pytest.raises(ValueError, match="boom 7"):
        stub_broker.join(doomed.queue_name)
    assert [m.message_id for m in stub_broker.dead_letters] == [message.message_id]
    kmq_queue = stub_broker.queue_prefix + doomed.queue_name
    letters = list_dead_letters(stub_broker.config, kmq_queue)
    assert [letter.reason for letter in letters] == ["ValueError: boom 7"]
    assert letters[0].headers["dramatiq-message-id"] == message.message_id.encode()

    # And kmq's redrive puts it back on the queue, where the fixed actor handles it
    from kmq.ops.dlq import redrive

    fixed = True
    assert redrive(stub_broker.config, kmq_queue) == 1
    stub_broker.join(doomed.queue_name, fail_fast=False)
    assert done == [7]


def test_flush_drops_waiting_and_delayed_messages_and_join_sees_it_at_once(stub_broker: KmqBroker) -> None:
    # Given waiting and delayed messages and no worker
    calls: list[int] = []

    @dramatiq.actor(queue_name="flushed")
    def count(n: int) -> None:
        calls.append(n)

    for n in range(3):
        count.send(n)
    count.send_with_options(args=(3,), delay=60_000)
    with pytest.raises(QueueJoinTimeout):
        stub_broker.join("flushed", timeout=300)

    # When the queue is flushed
    stub_broker.flush("flushed")

    # Then nothing is left to wait for, and a worker runs only what is sent afterwards
    stub_broker.join("flushed", timeout=10_000)
    with worker(stub_broker, worker_timeout=100):
        count.send(4)
        stub_broker.join("flushed", timeout=30_000)
    assert calls == [4]


def test_join_counts_what_another_broker_sends_delays_and_handles(
        dramatiq_session: DramatiqSession, stub_broker: KmqBroker) -> None:
    # Given another broker (another process's view) on the same queues, sending a delayed message
    other = KmqBroker(dramatiq_session.config, queue_prefix=stub_broker.queue_prefix)
    try:
        runs: list[int] = []

        @dramatiq.actor(queue_name="shared", broker=other)
        def job() -> None:
            runs.append(1)

        job.send_with_options(delay=1500)
        stub_broker.declare_queue("shared")

        # Then this broker's join waits for it while it is delayed
        with pytest.raises(QueueJoinTimeout):
            stub_broker.join("shared", timeout=500)
        # And returns once the other broker's worker handled it
        with worker(other, worker_timeout=100):
            stub_broker.join("shared", timeout=30_000)
            assert runs == [1]
    finally:
        other.close()


def test_the_kmq_record_carries_the_time_limit_dramatiq_applies(tracked: KmqBroker, stub_worker: Worker) -> None:
    limits: dict[str, float | None] = {}

    @dramatiq.actor
    def default_limit() -> None:
        limits["default"] = current_run().time_limit

    @dramatiq.actor(time_limit=1500)
    def actor_limit() -> None:
        limits["actor"] = current_run().time_limit

    @dramatiq.actor(time_limit=float("inf"))
    def no_limit() -> None:
        limits["none"] = current_run().time_limit

    default_limit.send()
    actor_limit.send()
    actor_limit.send_with_options(time_limit=2500)
    no_limit.send()
    tracked.join("default")
    # TimeLimit's default is 10 minutes; a message's own limit wins over its actor's, as in the middleware
    assert limits["default"] == 600.0
    assert limits["actor"] in (1.5, 2.5)
    assert limits["none"] is None


@pytest.fixture
def short_deadline_broker(dramatiq_session: DramatiqSession) -> Iterator[KmqBroker]:
    """A broker whose messages the tracker redelivers after 1 s without a keep-alive."""
    session = DramatiqSession(dramatiq_session.config.replace(redelivery_timeout_ms=1000), dramatiq_session.tag)
    broker = new_broker(session)
    broker.add_middleware(CurrentMessage())
    broker.emit_after("process_boot")
    dramatiq.set_broker(broker)
    yield broker
    broker.close()


def test_an_actor_running_past_the_redelivery_timeout_is_kept_alive_not_redelivered(
        short_deadline_broker: KmqBroker) -> None:
    runs: list[Run] = []

    @dramatiq.actor(max_retries=0)
    def long_job() -> None:
        runs.append(current_run())
        time.sleep(3.5)

    with worker(short_deadline_broker, worker_timeout=100, worker_threads=2) as running:
        long_job.send()
        short_deadline_broker.join(long_job.queue_name, timeout=60_000)
        running.join()
    assert [r.delivery_count for r in runs] == [1]


def test_an_actor_over_its_time_limit_is_interrupted_and_retried_through_a_kmq_delay(
        tracked: KmqBroker, stub_worker: Worker) -> None:
    runs: list[Run] = []

    @dramatiq.actor(time_limit=300, min_backoff=100, max_backoff=200)
    def stuck_once() -> None:
        runs.append(current_run())
        while len(runs) == 1:  # Python code: TimeLimitExceeded lands at the next bytecode
            time.sleep(0.01)

    stuck_once.send()
    tracked.join(stuck_once.queue_name, timeout=60_000)
    assert [(r.retries, r.delivery_count) for r in runs] == [(0, 1), (1, 1)]
    assert runs[1].deliver_at is not None




def test_a_dedup_id_runs_a_message_once_and_never_drops_its_retries(tracked: KmqBroker, stub_worker: Worker) -> None:
    # Given an actor that fails its first run, sent twice with one dedup id (a producer's retry after a timeout)
    runs: list[Run] = []

    @dramatiq.actor(max_retries=2, min_backoff=10, max_backoff=20)
    def charge() -> None:
        runs.append(current_run())
        if len(runs) == 1:
            raise RuntimeError("card network busy")

    charge.send_with_options(dedup_id="order-991")
    charge.send_with_options(dedup_id="order-991")
    tracked.join(charge.queue_name)
    time.sleep(1.0)  # a second run of the duplicate would have come by now

    # Then the duplicate never ran, and the retry (a new send of the same message) was not taken for one
    assert [r.retries for r in runs] == [0, 1]
