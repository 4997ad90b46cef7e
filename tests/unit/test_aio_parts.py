"""The asyncio parts without a broker: the loop signal, coroutine handler runs, the async producer's backlog."""

from __future__ import annotations

import asyncio
import functools
import threading

import pytest

from kmq import Config, ConfigError, DeliveryError, Message, Reject, Worker
from kmq.aio import AsyncProducer
from kmq.client.loop_signal import LoopSignal
from kmq.wire import MessageId
from kmq.worker.async_runner import call_async, is_coroutine_handler
from kmq.worker.handler_runner import RETURNED, TIMED_OUT

OFFLINE = Config(bootstrap_servers="127.0.0.1:1")


def a_message() -> Message:
    return Message(b"p", {}, "q", MessageId(0, 1), 1, MessageId(0, 1), 0, None)  # type: ignore[arg-type]


async def async_handler(message: Message) -> None:
    pass


def sync_handler(message: Message) -> None:
    pass


class AsyncCallable:
    async def __call__(self, message: Message) -> None:
        pass


def test_coroutine_handlers_are_told_from_sync_ones() -> None:
    assert is_coroutine_handler(async_handler)
    assert is_coroutine_handler(functools.partial(async_handler))
    assert is_coroutine_handler(AsyncCallable())
    assert not is_coroutine_handler(sync_handler)
    assert not is_coroutine_handler(functools.partial(sync_handler))
    assert Worker(OFFLINE, ["q"], async_handler).coroutines
    assert not Worker(OFFLINE, ["q"], sync_handler).coroutines


def test_a_coroutine_handler_cannot_run_in_child_processes() -> None:
    with pytest.raises(ConfigError, match="async def handler runs on the worker's event loop"):
        Worker(OFFLINE, ["q"], async_handler, processes=True, handler_spec="m:f")


@pytest.mark.parametrize(("body", "kind", "detail"), [
    ("return", "returned", ""),
    ("reject", "rejected", "nope"),
    ("raise", "failed", "ValueError: boom"),
    ("own-timeout", "failed", "TimeoutError: its own"),
    ("hang", "timed_out", ""),
])
def test_a_coroutine_run_ends_in_the_outcome_a_thread_run_would(body: str, kind: str, detail: str) -> None:
    async def handler(message: Message) -> None:
        if body == "reject":
            raise Reject("nope")
        if body == "raise":
            raise ValueError("boom")
        if body == "own-timeout":
            raise TimeoutError("its own")
        if body == "hang":
            await asyncio.Event().wait()

    outcome = asyncio.run(call_async(handler, a_message(), 0.2))
    assert (outcome.kind, outcome.detail) == (kind, detail)
    if body == "return":
        assert outcome is RETURNED
    if body == "hang":
        assert outcome is TIMED_OUT


def test_the_loop_signal_wakes_a_waiter_from_another_thread_only_once_armed() -> None:
    async def scenario() -> tuple[bool, bool]:
        signal = LoopSignal()
        signal.notify()  # not armed: nobody waits, nothing crosses to the loop
        signal.arm()
        woken = asyncio.Event()

        async def waiter() -> None:
            await signal.wait(30)
            woken.set()

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0.05)
        early = woken.is_set()
        threading.Thread(target=signal.notify, args=(3,)).start()
        await asyncio.wait_for(task, 30)
        signal.arm()
        await signal.wait(0.05)  # nobody notifies: returns after its timeout
        return early, woken.is_set()

    assert asyncio.run(scenario()) == (False, True)


def test_send_async_never_blocks_the_loop_when_librdkafkas_queue_is_full() -> None:
    # An unreachable broker and room for 5 records: a blocking send would wait for ever (and time the test out).
    config = Config(bootstrap_servers="127.0.0.1:1", kafka={"queue.buffering.max.messages": "5"})

    async def scenario() -> None:
        producer = AsyncProducer(config, "q")
        futures = [producer.send_async(f"m{i}".encode()) for i in range(20)]
        assert len(producer._backlog) == 15 and [r.data for r, _ in producer._backlog][:2] == [b"m5", b"m6"]
        assert not any(f.done() for f in futures)
        await asyncio.sleep(0.05)
        assert len(producer._backlog) == 15, "nothing drained: the broker is unreachable"
        assert await producer.flush(0.2) == 20
        await producer.close(0.2)
        for future in futures[5:]:
            with pytest.raises(DeliveryError, match="closed before sending"):
                future.result()

    asyncio.run(scenario())
