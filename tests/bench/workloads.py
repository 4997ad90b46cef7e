"""Bench workloads. Each runs in its own process where the GIL would otherwise serialise the sides."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import KafkaException
from confluent_kafka import Producer as RawProducer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from kmq import Config, Service, logs, tune_gc
from kmq._kafka.topics import create_topics
from kmq.testing.broker import die_with_parent
from tests.helpers import ROOT, env_for

RAW_PRODUCER = {"enable.idempotence": True, "partitioner": "random", "linger.ms": 5}


def raw_produce(bootstrap: str, topic: str, n: int, size: int, key: bytes = b"bench") -> float:
    producer = RawProducer({"bootstrap.servers": bootstrap, **RAW_PRODUCER})
    payload = b"x" * size
    started = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, payload, key)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)
    return n / (time.perf_counter() - started)


def raw_produce_sync(bootstrap: str, topic: str, n: int, size: int) -> float:
    producer = RawProducer({"bootstrap.servers": bootstrap, **RAW_PRODUCER})
    payload = b"x" * size
    started = time.perf_counter()
    for _ in range(n):
        producer.produce(topic, payload, b"bench")
        producer.flush(30)
    return n / (time.perf_counter() - started)


def kmq_send(config: Config, queue: str, n: int, size: int, sync: bool) -> float:
    payload = b"x" * size
    with Service(config).queue(queue).producer() as producer:
        started = time.perf_counter()
        if sync:
            for _ in range(n):
                producer.send(payload)
        else:
            for _ in range(n):
                producer.send_async(payload)
            producer.flush(120)
        return n / (time.perf_counter() - started)


# --- consumers (run in child processes; they report through a queue) ------------------------------------
# Each reports when it got its first record and when it finished: a rate runs from the first record of any
# process to the last record of all, so group joins (5 s for a share group's first heartbeat) are not measured.

#: Messages a consumer counts before it adds them to the shared total (a lock between processes: 0.3-0.6 µs a call,
#: reading it too, a tenth of a message's cost in kmq if taken per message, while the baselines take it per batch).
COUNT_EVERY = 100


def set_up_done(go: Any) -> None:
    """Every consumer process, the baselines' too, tunes its collector once set up, as the performance guide tells
    a program that consumes through the library to (``kmq.tune_gc``), then waits for the start."""
    tune_gc()
    go.wait()


def _raw_consume(bootstrap: str, topic: str, group: str, total: Any, n: int, go: Any, out: Any, *,
                 latency: bool = False) -> None:
    """``latency``: each record's send→consume time is reported (the latency case; the throughput cases leave it
    out, as the ShareConsumer's does: 0.6 µs a record)."""
    consumer = RawConsumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                            "enable.auto.commit": False, "partition.assignment.strategy": "cooperative-sticky"})
    consumer.subscribe([topic])
    set_up_done(go)
    latencies: list[float] = []
    first_at = None
    while total.value < n:
        # Same fetch pattern as kmq's consumer: the first record as soon as it comes, then what is buffered.
        first = consumer.poll(0.2)
        batch = [first, *consumer.consume(499, 0)] if first is not None else []
        good = [m for m in batch if m.error() is None]
        if not good:
            continue
        first_at = first_at or time.perf_counter()
        if latency:
            now = time.time()
            latencies.extend(now - float(m.value().split(b"|", 1)[0]) for m in good if m.value()[:1] != b"x")
        # A rebalance under way fails the commit: the next owner re-reads from the last one (at least once).
        with contextlib.suppress(KafkaException):
            consumer.commit(asynchronous=False)
        with total.get_lock():
            total.value += len(good)
    _report(out, first_at, latencies)


def _kmq_consume(config: Config, queue: str, batch: int, total: Any, n: int, go: Any, out: Any, *,
                 latency: bool = False) -> None:
    """``batch`` 0: receive() + ack() per message; > 0: receive_many(batch) + ack() per message; < 0:
    receive_many(-batch) + ack_many() per batch. ``latency``: as ``_raw_consume``'s."""
    logs.configure("error")
    consumer = Service(config).queue(queue).consumer()
    set_up_done(go)
    latencies: list[float] = []
    first_at = None
    counted = 0  # received, not yet added to ``total``
    seen = 0  # ``total`` when last read: reading it takes its lock too
    while seen + counted < n:
        if batch:
            got = consumer.receive_many(abs(batch), 0.2)
        else:
            msg = consumer.receive(0.2)
            got = [msg] if msg is not None else []
        if not got:
            counted = _count(total, counted)  # another process may be waiting for what this one holds
            seen = total.value
            continue
        first_at = first_at or time.perf_counter()
        if latency:
            now = time.time()
            latencies.extend(now - float(m.payload.split(b"|", 1)[0]) for m in got if m.payload[:1] != b"x")
        if batch < 0:
            consumer.ack_many(got)
        else:
            for msg in got:
                msg.ack()
        counted += len(got)
        if counted >= COUNT_EVERY or seen + counted >= n:
            counted = _count(total, counted)
            seen = total.value
    _count(total, counted)
    consumer.flush(30)
    _report(out, first_at, latencies)


def _count(total: Any, counted: int) -> int:
    """Adds ``counted`` to the shared total; returns what is left to count (0)."""
    if counted:
        with total.get_lock():
            total.value += counted
    return 0


def _report(out: Any, first_at: float | None, latencies: list[float]) -> None:
    """Sends this process's first-record and end times and latencies, then exits at once: no close, so no group
    leave or release markers of this case overlap the next one (each case uses its own groups)."""
    out.put((first_at, time.perf_counter(), latencies))
    out.close()
    out.join_thread()  # os._exit skips the queue's feeder thread otherwise
    os._exit(0)


def share_group_from_earliest(admin: AdminClient) -> str:
    """A new share group's name, set to read from the earliest offset: a share group starts at "latest" unless told
    otherwise before its first member joins."""
    name = group("share")
    resource = ConfigResource("group", name, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    return name


def share_consumer(bootstrap: str, topic: str, group: str) -> Any:
    """The baseline's consumer: a ShareConsumer subscribed to ``topic``, acknowledging explicitly."""
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    return consumer


def _share_consume(bootstrap: str, topic: str, group: str, total: Any, n: int, go: Any, out: Any) -> None:
    """Kafka's own queues (KIP-932): explicit ACCEPT per record, one commit_sync per poll batch."""
    from confluent_kafka import AcknowledgeType

    consumer = share_consumer(bootstrap, topic, group)
    set_up_done(go)
    first_at = None
    while total.value < n:
        batch = consumer.poll(0.2) or []
        good = [m for m in batch if m.error() is None]
        if not good:
            continue
        first_at = first_at or time.perf_counter()
        for msg in good:
            consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
        consumer.commit_sync()
        with total.get_lock():
            total.value += len(good)
    _report(out, first_at, [])


def run_consumers(target: Any, args: tuple[Any, ...], n: int, processes: int, timeout_s: float = 120,
                  pace: Any = None) -> tuple[float, list[float]]:
    """Starts ``processes`` consumers, releases them together, returns (msgs/s from the first record to the
    last, latencies in s)."""
    ctx = mp.get_context("spawn")
    total, go, out = ctx.Value("l", 0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, total, n, go, out), daemon=True) for _ in range(processes)]
    for proc in procs:
        proc.start()
    # Several members: let the group settle, so the run is not a string of rebalances.
    time.sleep(1 if processes == 1 else 8)
    go.set()
    if pace is not None:
        pace()
    firsts, ends, latencies = [], [], []
    deadline = time.monotonic() + timeout_s
    while len(ends) < processes and time.monotonic() < deadline:
        try:
            first, end, lat = out.get(timeout=1)
        except Exception:  # noqa: BLE001 - queue.Empty from another module
            continue
        ends.append(end)
        if first is not None:
            firsts.append(first)
        latencies.extend(lat)
    for proc in procs:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
    if len(ends) < processes or not firsts:
        raise TimeoutError(f"consumers did not finish {n} messages in {timeout_s}s (got {total.value})")
    return n / (max(ends) - min(firsts)), latencies


def paced_sender(send: Any, n: int, rate: float, warm_up: int = 0) -> Any:
    """A callable that sends ``warm_up`` payloads the consumers do not time (``x|…``), then ``n`` timestamped ones,
    all at ``rate`` per second (for latency)."""
    def run() -> None:
        interval = 1 / rate
        started = time.perf_counter()
        for i in range(warm_up + n):
            send(f"x|{i}".encode() if i < warm_up else f"{time.time()}|{i}".encode())
            delay = started + (i + 1) * interval - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
    return run


def group(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def backlog_with_tracker(config: Config, prefix: str, n: int) -> Iterator[str]:
    """A queue (its name yielded) holding ``n`` messages of 256 B on ``config``'s topics, made here (6 partitions,
    3 of markers), and a tracker running beside it until the block ends. Sent from a process of its own, so that
    its delivery reports stay out of the caller's profile and timings."""
    create_topics(config, config.default_topics, partitions=6, marker_partitions=3)
    queue = group(prefix)
    sender = mp.get_context("spawn").Process(target=kmq_send, args=(config, queue, n, 256, False))
    sender.start()
    sender.join()
    # (dies with this process however it ends: a profile run killed by hand once left its trackers for hours)
    tracker = subprocess.Popen([sys.executable, "-m", "kmq.redelivery"], cwd=ROOT, env=env_for(config),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)
    try:
        yield queue
    finally:
        tracker.kill()
        tracker.wait()
