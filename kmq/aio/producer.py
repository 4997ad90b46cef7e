"""AsyncProducer: a queue's Producer for asyncio code, a thin facade over the same producer.

``send_async`` never blocks the event loop: it checks and produces the record as the sync producer does (into
librdkafka's queue, no I/O) and returns an asyncio Future. While librdkafka's queue is full the records wait, in
order, in a backlog that a task of this producer moves on as the queue drains. Delivery reports come on the
producer's thread and reach the loop in batches: one ``call_soon_threadsafe`` per burst of reports, not one per
message. ``flush`` and ``close`` wait in the executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import deque
from datetime import datetime
from types import TracebackType

from kmq.client.producer import HeadersIn, OutgoingRecord, Payload, Producer
from kmq.config import Config
from kmq.delivery import Delivery
from kmq.errors import DeliveryError
from kmq.wire import MessageId

#: How long the backlog task sleeps while librdkafka's queue is still full.
BACKLOG_RETRY_S = 0.005

_Report = tuple["asyncio.Future[MessageId]", Delivery[MessageId]]


class AsyncProducer:
    """Sends messages to one queue from asyncio code: ``await send(...)`` returns the MessageId once durable,
    ``send_async(...)`` an asyncio Future of it; ``async with`` closes it (flushing first). Use it from one event
    loop."""

    def __init__(self, config: Config, queue: str) -> None:
        self._config = config
        self._producer = Producer(config, queue)  # makes the librdkafka client: no I/O yet
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reports: deque[_Report] = deque()
        self._reports_scheduled = False
        self._backlog: deque[tuple[OutgoingRecord, asyncio.Future[MessageId]]] = deque()
        self._backlog_task: asyncio.Task[None] | None = None
        #: Records handed to librdkafka whose report has not been settled on the loop (the loop's own count:
        #: librdkafka's queue length also counts its requests and log events).
        self._handed = 0

    @property
    def queue(self) -> str:
        return self._producer.queue

    @property
    def producer(self) -> Producer:
        """The sync Producer underneath."""
        return self._producer

    def send_async(self, payload: Payload, headers: HeadersIn = None, *, time_limit: float | None = None,
                   delay: float | None = None, deliver_at: datetime | None = None,
                   ttl: float | None = None, dedup_id: str | None = None) -> asyncio.Future[MessageId]:
        """Queues one message without blocking the loop; the Future resolves to its MessageId once durable, or
        raises DeliveryError. Bad input raises at once (PayloadError). Options as ``Producer.send_async``. (The
        first deduplicated send of a producer looks the topic's partitions up: ``send`` does that off the loop.)"""
        record = self._producer._prepare(payload, headers, time_limit=time_limit, delay=delay,
                                         deliver_at=deliver_at, ttl=ttl, dedup_id=dedup_id)
        loop = self._loop or self._bind()
        future: asyncio.Future[MessageId] = loop.create_future()
        if self._backlog:  # keep the order: behind what waits already
            self._backlog.append((record, future))
            return future
        try:
            delivery = self._producer._produce(record, block=False)
        except BufferError:
            self._backlog.append((record, future))
            if self._backlog_task is None or self._backlog_task.done():
                self._backlog_task = loop.create_task(self._move_backlog(), name="kmq-producer-backlog")
            return future
        self._handed += 1
        delivery.add_done_callback(functools.partial(self._reported, future))
        return future

    async def send(self, payload: Payload, headers: HeadersIn = None, timeout: float | None = None, *,
                   time_limit: float | None = None, delay: float | None = None,
                   deliver_at: datetime | None = None, ttl: float | None = None,
                   dedup_id: str | None = None) -> MessageId:
        """Sends one message and returns its MessageId once durable; raises DeliveryError on failure or after
        ``timeout`` seconds. Cancelling the call does not unsend a message already handed to librdkafka."""
        wait_s = timeout if timeout is not None else self._config.connect_timeout_ms / 1000 + 20
        if self._producer._needs_partitions(dedup_id):  # a metadata request: in the executor, not on the loop
            await asyncio.get_running_loop().run_in_executor(None, self._producer._partitions)
        future = self.send_async(payload, headers, time_limit=time_limit, delay=delay, deliver_at=deliver_at,
                                 ttl=ttl, dedup_id=dedup_id)
        try:
            async with asyncio.timeout(wait_s):
                return await future
        except TimeoutError:
            raise DeliveryError(
                f"send to queue {self.queue!r} not acknowledged within {wait_s:.0f}s: "
                f"is Kafka reachable at {self._config.bootstrap_servers}?", retriable=True) from None

    async def flush(self, timeout: float = 30.0) -> int:
        """Waits until every message sent so far is durable (or failed); returns how many are still undelivered
        after ``timeout`` seconds."""
        if self._backlog_task is not None and not self._backlog_task.done():
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.shield(self._backlog_task)
            except TimeoutError:
                return len(self._backlog) + self._undelivered()
        await asyncio.get_running_loop().run_in_executor(None, self._producer.flush, timeout)
        return len(self._backlog) + self._undelivered()

    def _undelivered(self) -> int:
        """Handed to librdkafka and not reported yet (a report waiting for the loop is delivered or failed)."""
        return self._handed - len(self._reports)

    async def close(self, timeout: float = 30.0) -> None:
        """Flushes, then releases the client (in the executor)."""
        await self.flush(timeout)
        if self._backlog_task is not None:
            self._backlog_task.cancel()
        await asyncio.get_running_loop().run_in_executor(None, self._producer.close, 0)
        for _, future in self._backlog:
            if not future.done():
                future.set_exception(DeliveryError(f"producer for queue {self.queue!r} closed before sending"))
        self._backlog.clear()

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    # --- the backlog and delivery reports ----------------------------------------------------------------------

    def _bind(self) -> asyncio.AbstractEventLoop:
        self._loop = asyncio.get_running_loop()
        return self._loop

    async def _move_backlog(self) -> None:
        backlog = self._backlog
        while backlog:
            record, future = backlog[0]
            try:
                delivery = self._producer._produce(record, block=False)
            except BufferError:
                await asyncio.sleep(BACKLOG_RETRY_S)  # the producer's thread serves reports meanwhile
                continue
            except Exception as err:  # noqa: BLE001 - this record's failure, reported on its future
                backlog.popleft()
                if not future.done():
                    future.set_exception(err)
                continue
            backlog.popleft()
            self._handed += 1
            delivery.add_done_callback(functools.partial(self._reported, future))

    def _reported(self, future: asyncio.Future[MessageId], delivery: Delivery[MessageId]) -> None:
        """On the producer's thread: queues the report; the first of a burst schedules one hop to the loop."""
        self._reports.append((future, delivery))
        if not self._reports_scheduled:
            self._reports_scheduled = True
            assert self._loop is not None
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits these any more
                self._loop.call_soon_threadsafe(self._settle_reports)

    def _settle_reports(self) -> None:
        self._reports_scheduled = False  # first: a report queued from now on schedules another hop
        reports = self._reports
        while reports:
            future, delivery = reports.popleft()
            self._handed -= 1
            if future.done():  # cancelled by its awaiter: the message was produced all the same
                continue
            error = delivery.exception()
            if error is None:
                future.set_result(delivery.result())
            else:
                future.set_exception(error)
