"""The Spark lifecycle audit against scripted scenarios on the real broker (local mode)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer as RawProducer
from pyspark.sql import SparkSession

from kmq import Service, wire
from kmq.ops.audit.job import AuditOptions, run
from kmq.ops.dlq import list_dead_letters
from kmq.ops.inspect import inspect_message
from kmq.wire import MessageId
from kmq.wire.markers import EndReason, Marker, MarkerType, encode
from tests.appended import complete_lines
from tests.helpers import FAST_GROUP, ConfigFactory, WorkerProcess, receive_n, tracker_thread
from tests.markers_io import wait_for

pytestmark = pytest.mark.timeout(300)


def test_the_audit_accounts_for_every_message_of_a_scripted_scenario(
    kmq_config: ConfigFactory, tmp_path: Path, spark: SparkSession
) -> None:
    config = kmq_config(redelivery_timeout_ms=2000, max_deliveries=3, consumer_kafka=FAST_GROUP)
    service = Service(config)
    alpha, beta = service.queue("alpha"), service.queue("beta")
    with alpha.producer() as pa, beta.producer() as pb:
        for i in range(10):
            pa.send(b"a-%d" % i)
        for i in range(3):
            pb.send(b"crash-%d" % i)
    with tracker_thread(config) as tracker:
        # beta: a worker takes 3 messages and is killed; another consumer gets them back and acks.
        worker = WorkerProcess(config, "beta", hold=3)
        worker.wait_holding()
        worker.kill()
        with alpha.consumer() as ca:
            msgs = {m.payload: m for m in receive_n(ca, 10)}
            for i in range(6):
                msgs[b"a-%d" % i].ack()
            for i in (6, 7):
                msgs[b"a-%d" % i].release()
            for i in (8, 9):
                msgs[b"a-%d" % i].reject("bad")
            for again in receive_n(ca, 2, timeout_s=30):
                again.ack()
            ca.flush()
        with beta.producer() as pb:
            for i in range(2):
                pb.send(b"poison-%d" % i)
            pb.send(b"held")
            pb.send(b"ok-0")
            pb.send(b"ok-1")
        with beta.consumer() as cb:
            held = None
            deadline = time.monotonic() + 60
            settled = 0
            while settled < 3 + 2 * 3 + 2 and time.monotonic() < deadline:
                msg = cb.receive(0.5)
                if msg is None:
                    continue
                if msg.payload == b"held":
                    held = msg
                    continue
                if msg.payload.startswith(b"poison"):
                    msg.release()
                else:
                    msg.ack()
                settled += 1
            assert held is not None
            assert wait_for(lambda: tracker.metrics.dead_letters.labels("beta")._value.get() == 2, timeout_s=30)
            cb.flush()
            time.sleep(1.5)  # a keep-alive for "held" after the last Start: it is in flight, not overdue
            result = run(config, AuditOptions(out_dir=tmp_path), spark)
            held.ack()
    a, b = result["queues"]["alpha"], result["queues"]["beta"]
    assert {k: a[k] for k in ("produced", "delivered", "acked", "released", "rejected", "redelivered",
                              "dead_lettered", "in_flight", "lost", "acked_more_than_once",
                              "delivered_more_than_once")} == {
        "produced": 10, "delivered": 12, "acked": 8, "released": 2, "rejected": 2, "redelivered": 2,
        "dead_lettered": 2, "in_flight": 0, "lost": 0, "acked_more_than_once": 0, "delivered_more_than_once": 2}
    assert {k: b[k] for k in ("produced", "acked", "redelivered", "recovered", "released", "dead_lettered",
                              "rejected", "in_flight", "lost", "delivered_more_than_once")} == {
        "produced": 8, "acked": 5, "redelivered": 3 + 2 * 2, "recovered": 3, "released": 6, "dead_lettered": 2,
        "rejected": 0, "in_flight": 1, "lost": 0, "delivered_more_than_once": 3 + 2}
    assert a["delivery_count_histogram"] == {"1": 8, "2": 2}
    assert b["delivery_count_histogram"] == {"1": 3, "2": 3, "3": 2}
    assert result["malformed_markers"] == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["queues"]["alpha"]["acked"] == 8
    assert (tmp_path / "lifecycle.parquet").is_dir() and (tmp_path / "audit.png").exists()


def test_the_audit_reports_a_start_without_end_past_its_deadline_as_lost_and_counts_garbage(
    kmq_config: ConfigFactory, tmp_path: Path, spark: SparkSession
) -> None:
    config = kmq_config(partitions=1, marker_partitions=1)
    with Service(config).queue("q").producer() as producer:
        first = producer.send(b"done")
        second = producer.send(b"vanishes")
    raw = RawProducer({"bootstrap.servers": config.bootstrap_servers})
    for mid, payload in ((first, b"done"), (second, b"vanishes")):
        start = Marker(MarkerType.START, MessageId(mid.partition, mid.offset), 500, b"q", payload)
        raw.produce(config.marker_topic, encode(start), b"q")
    raw.produce(config.marker_topic, encode(Marker(MarkerType.END, first, instance_id="host:1")), b"q")
    raw.produce(config.marker_topic, b"garbage", b"q")
    assert raw.flush(10) == 0
    time.sleep(1.0)
    now_ms = int(time.time() * 1000)
    result = run(config, AuditOptions(out_dir=tmp_path, now_ms=now_ms), spark)
    q = result["queues"]["q"]
    assert (q["produced"], q["acked"], q["overdue"], q["lost"]) == (2, 1, 1, 1)
    assert result["malformed_markers"] == 1


def test_a_late_ack_racing_the_trackers_copy_counts_as_processed_twice_and_headers_do_not_break_the_audit(
    kmq_config: ConfigFactory, tmp_path: Path, spark: SparkSession
) -> None:
    # The documented race, as the markers record it: the tracker redelivers M (End REDELIVERED, copy C), the
    # copy is acked, then the worker that still held M acks it too. And M carries a user header.
    config = kmq_config(partitions=1, marker_partitions=1)
    with Service(config).queue("q").producer() as producer:
        original = producer.send(b"raced", headers={"trace-id": "42"})
    raw = RawProducer({"bootstrap.servers": config.bootstrap_servers})
    raw.produce(config.message_topic, b"raced", b"q", headers=[("trace-id", b"42"), *wire.DeliveryHeaders(
        2, original, 1).encode()])
    assert raw.flush(10) == 0
    copy = MessageId(original.partition, original.offset + 1)
    for marker in (Marker(MarkerType.START, original, 60_000, b"q", b"raced", delivery_count=1),
                   Marker(MarkerType.END, original, end_reason=EndReason.REDELIVERED),
                   Marker(MarkerType.START, copy, 60_000, b"q", b"raced", delivery_count=2,
                          first_message_id=original),
                   Marker(MarkerType.END, copy, instance_id="host:1"),
                   Marker(MarkerType.END, original, instance_id="host:2")):
        raw.produce(config.marker_topic, encode(marker), b"q")
    assert raw.flush(10) == 0
    result = run(config, AuditOptions(out_dir=tmp_path, now_ms=int(time.time() * 1000)), spark)
    q = result["queues"]["q"]
    assert {k: q[k] for k in ("produced", "acked", "redelivered", "acked_more_than_once",
                              "delivered_more_than_once", "duplicate_acks", "lost")} == {
        "produced": 1, "acked": 1, "redelivered": 1, "acked_more_than_once": 1, "delivered_more_than_once": 1,
        "duplicate_acks": 1, "lost": 0}
    assert q["processing_ms_p50_p95_p99"][0] is not None


def test_stats_and_the_audit_classify_what_kafka_mq_go_components_wrote_and_never_count_it_as_acks(
    kmq_config: ConfigFactory, tmp_path: Path, spark: SparkSession
) -> None:
    # Exactly what Go components write: a Go tracker copies M and R (key and value only) and writes bare Ends for
    # them (R was released first); a Go consumer acks N with a bare End. kmq consumers then ack the two copies.
    from kmq.ops.stats import collect

    config = kmq_config(partitions=1, marker_partitions=1)
    with Service(config).queue("go").producer() as producer:
        m, n, r = (producer.send(p) for p in (b"job-m", b"job-n", b"job-r"))
    raw = RawProducer({"bootstrap.servers": config.bootstrap_servers})
    for payload in (b"job-m", b"job-r"):  # the Go tracker's copies: no kmq headers
        raw.produce(config.message_topic, payload, b"go")
    assert raw.flush(10) == 0
    copy_m, copy_r = MessageId(0, r.offset + 1), MessageId(0, r.offset + 2)
    kmq_ack = {"instance_id": "host:1"}
    for marker in (Marker(MarkerType.START, m, 60_000, b"go", b"job-m"),  # Go consumer Starts: no count, no writer
                   Marker(MarkerType.START, n, 60_000, b"go", b"job-n"),
                   Marker(MarkerType.START, r, 60_000, b"go", b"job-r"),
                   Marker(MarkerType.KEEPALIVE, r, 0, reason="released"),
                   Marker(MarkerType.END, m), Marker(MarkerType.END, n), Marker(MarkerType.END, r),
                   Marker(MarkerType.START, copy_m, 60_000, b"go", b"job-m", delivery_count=1,
                          first_message_id=copy_m, instance_id="host:1"),
                   Marker(MarkerType.START, copy_r, 60_000, b"go", b"job-r", delivery_count=1,
                          first_message_id=copy_r, instance_id="host:1"),
                   Marker(MarkerType.END, copy_m, **kmq_ack), Marker(MarkerType.END, copy_r, **kmq_ack)):
        raw.produce(config.marker_topic, encode(marker), b"go")
    assert raw.flush(10) == 0
    [stats] = collect(config, ["go"])
    assert (stats.acked, stats.redelivered, stats.released, stats.ended_by_go, stats.in_flight) == (2, 2, 1, 1, 0)
    result = run(config, AuditOptions(out_dir=tmp_path, now_ms=int(time.time() * 1000)), spark)
    q = result["queues"]["go"]
    assert {k: q[k] for k in ("produced", "acked", "redelivered", "go_redelivered", "ended_by_go",
                              "released", "lost", "acked_more_than_once")} == {
        "produced": 3, "acked": 2, "redelivered": 2, "go_redelivered": 2, "ended_by_go": 1,
        "released": 1, "lost": 0, "acked_more_than_once": 0}


def test_the_audit_counts_delayed_expired_and_purged_messages_apart_never_as_lost(
    kmq_config: ConfigFactory, tmp_path: Path, spark: SparkSession
) -> None:
    config = kmq_config(queue_ttl_ms={"ops": 1})
    queue = Service(config).queue("ops")
    with queue.producer() as producer:
        producer.send(b"expires")                   # the queue's 1 ms time to live
        producer.send(b"later", delay=600, ttl=900)  # read early: a hop through the tracker
        producer.send(b"purged", ttl=900)
        producer.send(b"kept", ttl=900)
    with queue.consumer() as consumer:
        got = {m.payload: m for m in receive_n(consumer, 2, timeout_s=20)}
        got[b"kept"].ack()
        queue.purge()
        assert wait_for(lambda: got[b"purged"].settled, timeout_s=10)
        assert consumer.flush(10) == 0
    result = run(config, AuditOptions(out_dir=tmp_path, now_ms=int(time.time() * 1000)), spark)
    q = result["queues"]["ops"]
    # Neither the expired nor the purged one counts as a delivery (a consumer purged it, before its handler ran).
    assert {k: q[k] for k in ("produced", "acked", "expired", "purged", "delayed", "lost", "in_flight",
                              "delivered")} == {
        "produced": 4, "acked": 1, "expired": 1, "purged": 1, "delayed": 1, "lost": 0, "in_flight": 0,
        "delivered": 1}


def test_after_a_worker_is_killed_mid_run_the_audits_lost_and_duplicate_figures_agree_with_the_handlers_log(
    kmq_config: ConfigFactory, tmp_path: Path, spark: SparkSession
) -> None:
    import signal
    import subprocess
    import sys

    from kmq.ops.stats import collect
    from tests.audit_oracle import compare_with_handler_log
    from tests.helpers import ROOT, env_for

    config = kmq_config(redelivery_timeout_ms=3000, consumer_kafka=FAST_GROUP, receive_buffer_capacity=2)
    with Service(config).queue("chaos").producer() as producer:
        sent = {producer.send(b"job-%d" % i) for i in range(30)}
    runs = tmp_path / "runs.jsonl"

    def worker(*extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "kmq.cli", "worker", "tests.handlers:note_slowly", "--queue",
                                 "chaos", *extra], cwd=ROOT, env={**env_for(config), "KMQTEST_RECORD": str(runs)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)

    def noted() -> int:
        return len(complete_lines(runs))

    with tracker_thread(config):
        first = worker("--concurrency", "2")
        try:
            assert wait_for(lambda: noted() >= 6, timeout_s=60)
        finally:
            first.kill()  # SIGKILL mid-run: its running jobs (and any it held) come back through the tracker
            first.wait(30)
        second = worker("--concurrency", "4")
        try:
            assert wait_for(lambda: collect(config, ["chaos"])[0].acked == 30, timeout_s=90)
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(60)
    run(config, AuditOptions(out_dir=tmp_path / "audit"), spark)
    check = compare_with_handler_log(tmp_path / "audit", runs, "chaos", sent)
    assert check.agrees(exact=False), check.explain()
    assert (check.audit_lost, check.log_lost) == (0, 0)
    assert check.log_more_than_once >= 1, "the kill interrupted no run: nothing was tested"
    # Every duplicate the handlers saw, the audit reports; beyond them only deliveries a killed worker held unstarted.
    assert check.log_more_than_once <= check.audit_more_than_once <= check.log_more_than_once + \
        check.unstarted_recovered, check.explain()


def test_stats_and_the_audit_give_the_same_figures_for_one_scenario_in_the_one_vocabulary(
    kmq_config: ConfigFactory, tmp_path: Path, spark: SparkSession
) -> None:
    """Retries, a refusal and a dead letter after max deliveries, a give-back, a delay, an expiry, a purge of
    messages still on the topic, an at-most-once queue and a message held in flight: every state and counter of
    kmq.wire.vocabulary, the same in `kmq stats` and in the audit (issue #20)."""
    import dataclasses

    from kmq.ops.stats import collect
    from kmq.wire import vocabulary as v

    config = kmq_config(redelivery_timeout_ms=2000, max_deliveries=2, consumer_kafka=FAST_GROUP,
                        queue_ttl_ms={"ttl": 1}, at_most_once_queues=("amo",))
    service = Service(config)
    jobs = service.queue("jobs")
    with jobs.producer() as p:
        for name in ("ack", "retry", "refuse", "give", "poison", "held"):
            p.send(name.encode())
    with service.queue("later").producer() as p:
        p.send(b"later", delay=600)
    with service.queue("ttl").producer() as p:
        p.send(b"stale")
    with service.queue("gone").producer() as p:
        for i in range(3):
            p.send(b"gone-%d" % i)
    service.queue("gone").purge()  # no consumer ever reads them: purged on the topic, not waiting
    with service.queue("amo").producer() as p:
        for i in range(3):
            p.send(b"amo-%d" % i)
    with service.queue("amo").consumer() as c:
        for m in receive_n(c, 3):
            m.ack()
    with tracker_thread(config), jobs.consumer() as c, service.queue("later").consumer() as later, \
            service.queue("ttl").consumer() as ttl:
        got = {m.payload: m for m in receive_n(c, 6)}
        got[b"ack"].ack()
        got[b"retry"].release()
        got[b"refuse"].reject("bad input")
        got[b"give"].give_back()
        got[b"poison"].release()
        held = got[b"held"]
        settled = 0
        deadline = time.monotonic() + 60
        while settled < 3 and time.monotonic() < deadline:  # retry, give (acked) and poison's second delivery
            m = c.receive(0.5)
            if m is None:
                continue
            if m.payload == b"poison":
                m.release()  # its second delivery: the tracker dead-letters it (max_deliveries 2)
            else:
                m.ack()
            settled += 1
        assert settled == 3
        assert wait_for(lambda: collect(config, ["jobs"])[0].dead_lettered == 2, timeout_s=30)
        assert receive_n(later, 1, timeout_s=2) == [] and receive_n(ttl, 1, timeout_s=2) == []
        assert wait_for(lambda: [r.delayed for r in collect(config, ["later"])] == [1], timeout_s=30)
        assert wait_for(lambda: [r.expired for r in collect(config, ["ttl"])] == [1], timeout_s=30)
        for consumer in (c, later, ttl):
            assert consumer.flush(10) == 0
        now_ms = int(time.time() * 1000)
        stats = {row.queue: dataclasses.asdict(row) for row in collect(config, now_ms=now_ms)}
        audit = run(config, AuditOptions(out_dir=tmp_path, now_ms=now_ms), spark)["queues"]
        held.ack()
    for queue in ("jobs", "later", "ttl", "gone", "amo"):
        shared = [f for f in (*v.STATES, *v.COUNTERS) if f in stats[queue]]
        assert {f: stats[queue][f] for f in shared} == {f: audit[queue][f] for f in shared}, queue
    j = stats["jobs"]
    assert {k: j[k] for k in ("acked", "dead_lettered", "rejected", "in_flight", "delivered", "released",
                              "returned", "redelivered", "waiting")} == {
        "acked": 3, "dead_lettered": 2, "rejected": 1, "in_flight": 1, "delivered": 8, "released": 3,
        "returned": 1, "redelivered": 2, "waiting": 0}
    assert (stats["later"]["delayed"], stats["later"]["delivered"], stats["later"]["redelivered"]) == (1, 0, 0)
    assert (stats["ttl"]["expired"], stats["ttl"]["delivered"], stats["ttl"]["dead_lettered"]) == (1, 0, 0)
    assert (stats["gone"]["purged"], stats["gone"]["waiting"], stats["gone"]["delivered"]) == (3, 0, 0)
    assert (stats["amo"]["consumed"], stats["amo"]["waiting"]) == (3, 0)
    # `kmq dlq list` and `kmq inspect` speak the same: the letters waiting are the dead_lettered messages, and each
    # message's state is the one stats counted it in.
    letters = list_dead_letters(config, "jobs", None)
    assert len(letters) == stats["jobs"]["dead_lettered"] == 2
    assert sorted(letter.payload for letter in letters) == [b"poison", b"refuse"]
    states = {name: inspect_message(config, "jobs", got[name].message_id).state
              for name in (b"ack", b"refuse", b"poison", b"held")}
    assert states == {b"ack": v.ACKED, b"refuse": v.DEAD_LETTERED, b"poison": v.DEAD_LETTERED, b"held": v.ACKED}


def test_grouped_messages_redelivered_in_place_give_the_same_figures_in_stats_and_the_audit_and_no_order_violation(
    kmq_config: ConfigFactory, tmp_path: Path, spark: SparkSession
) -> None:
    import dataclasses

    from kmq.ops.stats import collect
    from kmq.wire import vocabulary as v

    config = kmq_config(partitions=3, consumer_kafka=FAST_GROUP)
    queue = Service(config).queue("grouped")
    with queue.producer() as p:
        for n in range(4):
            for account in ("a", "b", "c"):
                p.send(b"%d" % n, group=account)
    done, given_back = 0, False
    with queue.consumer() as c:
        deadline = time.monotonic() + 60
        while done < 12 and time.monotonic() < deadline:
            m = c.receive(0.5)
            if m is None:
                continue
            if m.payload == b"1" and m.delivery_count == 1:
                m.release()  # in place: it comes back before message 2 of its group
            elif m.payload == b"2" and m.group == "a" and not given_back:
                m.give_back()  # comes back at once, its count unchanged
                given_back = True
            else:
                m.ack()
                done += 1
        assert done == 12 and c.flush(10) == 0
    now_ms = int(time.time() * 1000)
    stats = dataclasses.asdict(collect(config, ["grouped"], now_ms=now_ms)[0])
    result = run(config, AuditOptions(out_dir=tmp_path, now_ms=now_ms), spark)
    audit = result["queues"]["grouped"]
    shared = [f for f in (*v.STATES, *v.COUNTERS) if f in stats]
    assert {f: stats[f] for f in shared} == {f: audit[f] for f in shared}
    assert {k: stats[k] for k in ("acked", "delivered", "released", "returned", "redelivered")} == {
        "acked": 12, "delivered": 15, "released": 3, "returned": 1, "redelivered": 0}
    groups = result["groups"]["grouped"]
    assert (groups["groups"], groups["messages"], groups["order_violations"]) == (3, 12, 0)
    assert {g["group"] for g in groups["slowest_groups"]} == {"a", "b", "c"}
