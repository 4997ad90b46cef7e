"""kmq.aio end to end on a real broker: the async producer and consumer, settles, and cancellation."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from kmq import Config, KmqError, MessageSettledError, Service
from kmq.aio import AsyncConsumer, AsyncMessage
from tests.functional.test_cli import stats
from tests.helpers import ConfigFactory, tracker_thread
from tests.markers_io import wait_for

pytestmark = pytest.mark.timeout(180)


async def receive_until(consumer: AsyncConsumer, count: int, timeout_s: float = 30.0) -> list[AsyncMessage]:
    got: list[AsyncMessage] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += await consumer.receive_many(count - len(got), 0.5)
    return got


def test_async_producer_and_consumer_send_receive_and_settle_every_way(kmq_config: ConfigFactory) -> None:
    config = kmq_config(redelivery_timeout_ms=10_000)
    queue = Service(config).queue("aio")

    async def scenario() -> None:
        async with queue.async_producer() as producer:
            first = await producer.send(b"ack-me", headers={"k": "v"})
            futures = [producer.send_async(f"bulk-{i}".encode()) for i in range(200)]
            ids = await asyncio.gather(*futures)
            for payload in (b"release-me", b"reject-me", b"give-me-back"):
                await producer.send(payload)
            assert await producer.flush(10) == 0
        assert len({first, *ids}) == 201
        async with queue.async_consumer() as consumer:
            seen: dict[bytes, AsyncMessage] = {}
            async for message in consumer:  # the iteration hands out every message once
                assert message.payload not in seen
                seen[message.payload] = message
                if len(seen) == 204:
                    break
            assert seen[b"ack-me"].headers == {"k": b"v"} and seen[b"ack-me"].message_id == first
            for i, mid in enumerate(ids):
                assert seen[f"bulk-{i}".encode()].message_id == mid
                await seen[f"bulk-{i}".encode()].ack()
            await seen[b"ack-me"].keep_alive()
            await seen[b"ack-me"].ack()
            with pytest.raises(MessageSettledError):
                await seen[b"ack-me"].ack()
            await seen[b"release-me"].release()
            await seen[b"reject-me"].reject("not wanted")
            await seen[b"give-me-back"].give_back()
            assert consumer.in_flight == 0
            # The release and the give-back come back through the tracker: counted and not counted.
            again = {m.payload: m for m in await receive_until(consumer, 2)}
            assert again[b"release-me"].delivery_count == 2 and again[b"release-me"].redelivered
            assert again[b"give-me-back"].delivery_count == 1
            for message in again.values():
                await message.ack()
            assert await consumer.receive(1.0) is None
            assert await consumer.flush(10) == 0

    with tracker_thread(config):
        asyncio.run(scenario())
    figures = stats(config, "aio")
    assert (figures["acked"], figures["dead_lettered"]) == (203, 1), figures


def test_receives_cancelled_while_waiting_take_nothing_and_lose_nothing(kmq_config: ConfigFactory) -> None:
    # Receives are cancelled at random moments while messages arrive: each message is received exactly once, by a
    # receive that returned it (a cancel of a finished task changes nothing), never taken by one that was cancelled.
    config = kmq_config()
    queue = Service(config).queue("cancel")
    n = 300

    async def scenario() -> list[bytes]:
        received: list[bytes] = []
        rng = random.Random(7)
        async with queue.async_producer() as producer, queue.async_consumer() as consumer:
            await consumer.receive(0.1)  # joins the group first (nothing is sent yet)

            async def send_slowly() -> None:
                for i in range(n):
                    await producer.send(f"m-{i}".encode())
                    if i % 10 == 0:
                        await asyncio.sleep(0.005)

            sender = asyncio.create_task(send_slowly())
            cancelled = 0
            while not sender.done() or len(received) < n:
                task = asyncio.create_task(consumer.receive(5))
                await asyncio.sleep(rng.choice([0, 0, 0.0005, 0.002]))
                if task.cancel():
                    cancelled += 1
                try:
                    message = await task
                except asyncio.CancelledError:
                    continue
                if message is not None:
                    received.append(message.payload)
                    await message.ack()
                if sender.done() and not message:
                    break
            await sender
            assert cancelled > 0
            assert consumer.in_flight == 0, "a cancelled receive took a message it never returned"
        return received

    received = asyncio.run(scenario())
    assert sorted(received) == sorted(f"m-{i}".encode() for i in range(n))


def test_a_task_cancelled_while_holding_a_message_releases_it_at_once(kmq_config: ConfigFactory) -> None:
    # A 60 s redelivery timeout: only the release on cancellation can bring the message back within the test.
    config = kmq_config(redelivery_timeout_ms=60_000)
    queue = Service(config).queue("held")

    async def scenario() -> None:
        async with queue.async_producer() as producer:
            await producer.send(b"job")
        async with queue.async_consumer() as consumer:
            holding = asyncio.Event()

            async def handle() -> None:
                message = await consumer.receive(30)
                assert message is not None
                holding.set()
                await asyncio.Event().wait()  # a handler that never finishes

            task = asyncio.create_task(handle())
            await asyncio.wait_for(holding.wait(), 30)
            assert consumer.in_flight == 1
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert consumer.in_flight == 0, "the cancelled task's message is still held"
            again = await consumer.receive(30)
            assert again is not None and again.payload == b"job"
            assert again.delivery_count == 2  # the handler had it: a delivery, as Consumer.close counts it
            await again.ack()

    with tracker_thread(config):
        asyncio.run(scenario())


def test_closing_gives_back_unreceived_and_releases_received_messages(kmq_config: ConfigFactory) -> None:
    config = kmq_config(redelivery_timeout_ms=60_000)
    queue = Service(config).queue("closing")

    async def first_consumer() -> bytes:
        async with queue.async_producer() as producer:
            for i in range(3):
                await producer.send(f"job-{i}".encode())
        async with queue.async_consumer() as consumer:
            got = await receive_until(consumer, 1)
            assert len(got) == 1
            return got[0].payload  # received and never settled: released by the close

    async def second_consumer() -> dict[bytes, int]:
        async with queue.async_consumer() as consumer:
            got = await receive_until(consumer, 3, timeout_s=45)
            for message in got:
                await message.ack()
            return {m.payload: m.delivery_count for m in got}

    with tracker_thread(config):
        held = asyncio.run(first_consumer())
        counts = asyncio.run(second_consumer())
    assert sorted(counts) == [b"job-0", b"job-1", b"job-2"]
    assert counts == {p: 2 if p == held else 1 for p in counts}, "the others were given back, never received"
    assert wait_for(lambda: stats(config, "closing")["acked"] == 3, timeout_s=30)


def test_a_consumer_of_an_unreachable_broker_fails_with_the_sync_consumers_error() -> None:
    config = Config(bootstrap_servers="127.0.0.1:1", connect_timeout_ms=1_000)

    async def scenario() -> None:
        consumer = Service(config).queue("nowhere").async_consumer()
        with pytest.raises(KmqError, match=r"127\.0\.0\.1:1"):
            await consumer.receive(1)
        await consumer.close()

    asyncio.run(scenario())


def test_async_grouped_sends_come_out_in_order_one_at_a_time_per_group(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=2)
    queue = Service(config).queue("aio")

    async def scenario() -> None:
        async with queue.async_producer() as producer:
            for n in range(4):
                for group in ("account-7", "account-9"):
                    await producer.send(b"%d" % n, group=group)
        order: dict[str, list[int]] = {"account-7": [], "account-9": []}
        async with queue.async_consumer() as consumer:
            for n in range(4):
                got = await receive_until(consumer, 2)
                assert sorted(m.group or "" for m in got) == ["account-7", "account-9"], "one per group at a time"
                assert not await consumer.receive_many(10, 0.3), "a group's next waits for its settle"
                for message in got:
                    order[message.group or ""].append(int(message.payload))
                    if n == 1 and message.delivery_count == 1:
                        await message.release()  # comes back before the group's later ones
                    else:
                        await message.ack()
        assert order == {g: [0, 1, 1, 2] for g in order}, order

    asyncio.run(scenario())
