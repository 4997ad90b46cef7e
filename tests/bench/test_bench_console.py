"""The console bench (`make bench`): page render times with 100 queues and a million messages on the topics.

The topics are generated as the audit's scale bench generates them (kmq.ops.audit.generate: realistic lives with
retries, tracker copies, dead letters, purges, both marker formats) over the last two hours, across 100 queues. The
console's Follower reads them once (its catch-up: time, records/s, memory), then each page is rendered through
the application (in process, no network) 20 times. The baseline, measured in the same run on the same topics, is
what a console that read the topics per page view would pay: ``kmq stats``' scan (kmq.ops.stats.collect). Also:
a follow-up round after 1,000 more messages, the incremental cost of staying live. Reports, never asserts timings.
Writes bench-results/<timestamp>-console/ and prints the table.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from kmq import logs
from kmq.client import Producer
from kmq.config import Config
from kmq.console.app import create_app
from kmq.console.follower import Follower
from kmq.console.model import Models
from kmq.console.settings import Settings
from kmq.ops import stats
from kmq.ops.audit import generate
from kmq.ops.audit.synthetic.plans import PlanMaker, QueueSpec
from kmq.ops.audit.synthetic.simulator import Simulator
from kmq.topic_sets import DEFAULT_SET
from kmq.wire import now_ms
from kmq.wire import vocabulary as v
from tests.bench.results import Case, markdown, write
from tests.helpers import ROOT, unique

QUICK = bool(os.environ.get("KMQ_BENCH_QUICK"))
MESSAGES = 100_000 if QUICK else 1_000_000
QUEUES = [QueueSpec(f"q{i:03d}", marker_format="kafka-mq-go" if i % 10 == 9 else "kmq", purge=i % 25 == 0)
          for i in range(100)]
HOURS = 2.0
RENDERS = 20

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]


def _arrivals(messages: int, tick_ms: int) -> Iterator[tuple[int, Any]]:
    """Messages spread over ``HOURS`` and the queues (some queues busier: a Zipf-like share)."""
    maker = PlanMaker(7, never_read_share=0.02)
    ticks = int(HOURS * 3_600_000 / tick_ms)
    weights = [1 / (i + 1) ** 0.6 for i in range(len(QUEUES))]
    edges, total = [], sum(weights)
    acc = 0.0
    for w in weights:
        acc += w / total
        edges.append(acc)
    for i in range(messages):
        x = (i * 0.6180339887498949) % 1.0
        queue = next((q for edge, q in zip(edges, QUEUES, strict=True) if x < edge), QUEUES[-1])
        yield i * ticks // messages, maker.plan(queue)


def _generate(bootstrap: str) -> tuple[Config, int, float]:
    prefix = unique("console-bench")
    config = Config(bootstrap_servers=bootstrap, message_topic=f"{prefix}.messages", marker_topic=f"{prefix}.markers",
                    at_most_once_queues=())
    generate.prepare(config, 6, 3)
    started = time.monotonic()
    tick_ms = 1000
    sink = generate.KafkaSink(config)
    simulator = Simulator(sink, start_ms=now_ms() - int(HOURS * 3_600_000) - 60_000, tick_ms=tick_ms, partitions=6,
                          marker_partitions=3, seed=7)
    outcome = simulator.run(_arrivals(MESSAGES, tick_ms))
    predicted = sink.close()
    generate.finish(config, outcome, predicted)
    return config, sink.produced, time.monotonic() - started


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _times_ms(client: TestClient, path: str, n: int = RENDERS) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        answer = client.get(path)
        out.append((time.perf_counter() - started) * 1000)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:500])
    return out


def test_bench_console(kafka_bootstrap: str) -> None:
    logs.configure("warning")
    config, records, generate_s = _generate(kafka_bootstrap)
    print(f"\ngenerated {MESSAGES:,} messages ({records:,} records) over {len(QUEUES)} queues in {generate_s:.0f} s")

    rss_before = _rss_mb()
    models = Models([config.default_topics])
    model = models[DEFAULT_SET]
    follower = Follower(config, models)
    started = time.monotonic()
    follower.round()
    catch_up_s = time.monotonic() - started
    rss_after = _rss_mb()
    followed = models.status.records
    print(f"caught up: {followed:,} records in {catch_up_s:.1f} s; peak RSS {rss_before:.0f} -> {rss_after:.0f} MB")

    started = time.monotonic()
    rescanned = stats.collect(config)
    rescan_ms = (time.monotonic() - started) * 1000
    assert len(rescanned) >= len(QUEUES) - 1
    # The console's figures are kmq stats' (one classification): every state of every queue agrees.
    with model.lock:
        for row in rescanned:
            summary = model.live.summary(row.queue)
            assert (summary.states[v.WAITING], summary.states[v.ACKED], summary.states[v.DEAD_LETTERED]) == (
                row.waiting, row.acked, row.dead_lettered), row.queue

    busiest = max(rescanned, key=lambda r: r.produced).queue
    with model.lock:
        first_waiting = next(model.live.keys(busiest, v.WAITING))
    app = create_app(config, Settings(anonymous_viewers=True), models)
    pages = {"overview": "/", "queue (busiest, waiting, page 1)": f"/queue?q={busiest}",
             "queue (busiest, acked, page 200)": f"/queue?q={busiest}&state=acked&page=200",
             "dead letters (all queues)": "/dead-letters", "dead letters (one queue, by reason)":
             f"/dead-letters?q={busiest}&reason=failed&status=any", "workers and trackers": "/workers",
             "message (payload and story)": f"/message?q={busiest}&id={first_waiting[1]}"}
    cases = []
    with TestClient(app) as client:
        for name, path in pages.items():
            times = _times_ms(client, path)
            p50, p95 = statistics.median(times), sorted(times)[int(len(times) * 0.95) - 1]
            print(f"{name:40s} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms")
            cases.append(Case(f"console page: {name}", "ms", p50, rescan_ms, "kmq stats scan of the same topics",
                              {"queues": len(QUEUES), "messages": MESSAGES, "records": followed, "renders": RENDERS},
                              {"p95_ms": round(p95, 1), "all_ms": [round(t, 1) for t in times]}))

    with Producer(config, busiest) as producer:
        for i in range(1000):
            producer.send_async(b"more %d" % i)
        producer.flush()
    started = time.monotonic()
    follower.round()
    live_round_ms = (time.monotonic() - started) * 1000
    print(f"a round after 1,000 more messages: {live_round_ms:.0f} ms (a scan: {rescan_ms:.0f} ms)")
    cases.append(Case("console: a follower round after 1,000 new messages", "ms", live_round_ms, rescan_ms,
                      "kmq stats scan of the same topics", {"queues": len(QUEUES), "messages": MESSAGES}))
    cases.append(Case("console: catch-up (first round, every record)", "s", catch_up_s, rescan_ms / 1000,
                      "kmq stats scan of the same topics", {"records": followed},
                      {"records_per_s": round(followed / catch_up_s), "rss_mb_before": round(rss_before),
                       "rss_mb_after": round(rss_after)}))
    follower.close()
    out = write(ROOT / "bench-results" / (time.strftime("%Y%m%dT%H%M%S") + "-console"), cases,
                {"generate_s": round(generate_s, 1), "records_generated": records})
    print("\n" + markdown(cases) + f"\n\nresults in {out}")
