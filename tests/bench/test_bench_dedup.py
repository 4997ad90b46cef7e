"""The deduplication bench (`make bench`, issue #34), every figure beside its baseline from the same run:

- send_async with a dedup id on every send beside without (target >= 0.8x), alternating rounds, the median of each;
- consume (receive_many(500) + ack, one process, a tracker running) of a queue whose every message has a dedup id
  beside one without;
- memory per remembered id in a consumer's window beside a plain ``set`` of the same ids;
- the window rebuild a consumer does when it takes a partition over at one million remembered ids (reading the
  partition back and remembering every id) beside a plain consumer reading the same records.

Writes bench-results/<timestamp>-dedup/ and prints the table.
"""

from __future__ import annotations

import gc
import os
import statistics
import threading
import time
import tracemalloc
from typing import Any

import pytest
from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import TopicPartition

from kmq import Config, Service, logs
from kmq._kafka.factory import KafkaClients
from kmq.client.consumer.dedup import PartitionWindow
from kmq.client.consumer.deduplicator import Deduplicator, reader_read_back
from kmq.wire import HEADER_DEDUP_ID
from tests.bench import workloads as w
from tests.bench.results import Case, markdown, write
from tests.bench.test_bench import fresh
from tests.bench.tracker_probe import TrackerProbe
from tests.helpers import ROOT

QUICK = bool(os.environ.get("KMQ_BENCH_QUICK"))
N_SEND = 30_000 if QUICK else 100_000
N_CONSUME = 20_000 if QUICK else 100_000
N_REMEMBERED = 100_000 if QUICK else 1_000_000
ROUNDS = 2 if QUICK else 3

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1800)]


def send(config: Config, queue: str, n: int, dedup: bool, size: int = 256, prefix: str = "order") -> float:
    """send_async rate (msgs/s) of ``n`` messages, each with a dedup id of its own when ``dedup``."""
    payload = b"x" * size
    ids = [f"{prefix}-{i:08d}" for i in range(n)] if dedup else None
    with Service(config).queue(queue).producer() as producer:
        producer.send(b"x-warm", dedup_id="x-warm" if dedup else None)  # the metadata look-up is not measured
        started = time.perf_counter()
        if ids is None:
            for _ in range(n):
                producer.send_async(payload)
        else:
            for dedup_id in ids:
                producer.send_async(payload, dedup_id=dedup_id)
        assert producer.flush(300) == 0
        return n / (time.perf_counter() - started)


def send_cases(bootstrap: str) -> list[Case]:
    plain, keyed = [], []
    for _ in range(ROUNDS):
        plain.append(send(fresh(bootstrap, "dsend"), "q", N_SEND, dedup=False))
        keyed.append(send(fresh(bootstrap, "dsend"), "q", N_SEND, dedup=True))
    ours, base = statistics.median(keyed), statistics.median(plain)
    return [Case("send_async 256 B with a dedup id", "msgs/s", ours, base, "send_async without",
                 {"messages": N_SEND, "payload": 256, "partitions": 6, "rounds": ROUNDS},
                 extra={"ours_runs": keyed, "baseline_runs": plain}, note="target >= 0.8x")]


def consume_cases(bootstrap: str) -> list[Case]:
    rates: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(ROUNDS):
        for dedup in (False, True):
            config = fresh(bootstrap, "dconsume")
            queue = w.group("dconsume")
            send(config, queue, N_CONSUME, dedup)
            with TrackerProbe(config):
                rate, _ = w.run_consumers(w._kmq_consume, (config, queue, 500), N_CONSUME + 1, 1, timeout_s=300)
            rates[dedup].append(rate)
    ours, base = statistics.median(rates[True]), statistics.median(rates[False])
    return [Case("consume receive_many(500) + ack, every message with a dedup id", "msgs/s", ours, base,
                 "the same without dedup ids", {"messages": N_CONSUME, "payload": 256, "processes": 1,
                                                "tracker": "running", "rounds": ROUNDS},
                 extra={"ours_runs": rates[True], "baseline_runs": rates[False]}, note="target >= 0.8x")]


def memory_case() -> Case:
    ids = [f"order-{i:08d}".encode() for i in range(N_REMEMBERED)]
    window = PartitionWindow(0, 300_000)
    window._next_sweep = N_REMEMBERED * 2  # remember them all: this measures the cost of one id
    ts = 1_800_000_000_000

    def measure(fill: Any) -> float:
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        kept = fill()
        used = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        del kept
        return used / N_REMEMBERED

    def fill_window() -> PartitionWindow:
        for offset, key in enumerate(ids):
            window.observe(offset, ts + offset, key)
        return window

    ours = measure(fill_window)
    assert len(window) == N_REMEMBERED
    base = measure(lambda: set(ids))
    return Case("memory per remembered id (14-byte ids)", "B", ours, base, "a set of the same ids",
                {"ids": N_REMEMBERED}, note="tracemalloc; the id bytes themselves are not counted on either side")


def rebuild_case(bootstrap: str) -> Case:
    """A partition with ``N_REMEMBERED`` records, each with its own dedup id: the rebuild a consumer taking it over
    does (read back one window, remember every id), beside a raw consumer reading the same records."""
    config = fresh(bootstrap, "drebuild")
    queue = "q"
    _send_one_partition(config, queue, N_REMEMBERED)
    raw_s = _raw_read(config, N_REMEMBERED)
    dedup = Deduplicator(queue.encode(), config.dedup_window_ms, config.dedup_clock_skew_ms,
                         reader_read_back(KafkaClients(), config, queue, threading.Event()), None)
    record = _Record(N_REMEMBERED, int(time.time() * 1000))
    started = time.perf_counter()
    assert dedup.screen([record]) is not None  # type: ignore[list-item]
    ours_s = time.perf_counter() - started
    assert dedup.records_read_back == N_REMEMBERED and len(dedup.windows) == N_REMEMBERED + 1
    return Case(f"window rebuild after a rebalance, {N_REMEMBERED:,} remembered ids", "s", ours_s, raw_s,
                "a raw consumer reading the same records", {"records": N_REMEMBERED, "payload": 64, "partition": 1},
                note=f"{N_REMEMBERED / ours_s:,.0f} ids/s")


class _Record:
    """The first record a consumer must decide after the rebalance (it is past every record written)."""

    def __init__(self, offset: int, ts: int) -> None:
        self._offset, self._ts = offset, ts

    def topic(self) -> str:
        return "m"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"q"

    def error(self) -> None:
        return None

    def headers(self) -> list[tuple[str, bytes]]:
        return [(HEADER_DEDUP_ID, b"after-the-rebalance")]

    def timestamp(self) -> tuple[int, int]:
        return 1, self._ts


def _send_one_partition(config: Config, queue: str, n: int) -> None:
    """``n`` records with dedup ids of their own, all on partition 0 (the producer's partition choice, bypassed)."""
    from kmq.client.producer import Producer

    producer = Producer(config, queue)
    producer._partition_of = lambda dedup_id: 0  # type: ignore[method-assign]
    for i in range(n):
        producer.send_async(b"y" * 64, dedup_id=f"order-{i:08d}")
    assert producer.flush(600) == 0
    producer.close()


def _raw_read(config: Config, n: int) -> float:
    consumer = RawConsumer({"bootstrap.servers": config.bootstrap_servers, "group.id": w.group("raw"),
                            "enable.partition.eof": True, "fetch.max.bytes": 16 * 1024 * 1024})
    consumer.assign([TopicPartition(config.message_topic, 0, 0)])
    started, read = time.perf_counter(), 0
    while read < n:
        read += sum(1 for r in consumer.consume(5000, 1.0) if r.error() is None)
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def test_bench_dedup(kafka_bootstrap: str) -> None:
    logs.configure("error")
    started = time.monotonic()
    cases = [*send_cases(kafka_bootstrap), *consume_cases(kafka_bootstrap), memory_case(),
             rebuild_case(kafka_bootstrap)]
    out = write(ROOT / "bench-results" / (time.strftime("%Y%m%dT%H%M%S") + "-dedup"), cases,
                {"quick": QUICK, "seconds": round(time.monotonic() - started)})
    print("\n" + markdown(cases) + f"\n\nresults in {out}")
    assert all(c.ours is not None for c in cases)
