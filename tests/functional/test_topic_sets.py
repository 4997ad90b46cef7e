"""Topic sets on a real broker: a routed queue lives on its set's topics and groups end to end; a tracker process
serves several sets, a group each; a queue moves between sets under load without losing or repeating a message."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from kmq import Config, Consumer, Producer
from kmq.ops.dlq import list_dead_letters, redrive
from kmq.ops.stats import QueueStats, collect
from tests.appended import complete_lines
from tests.helpers import ROOT, ConfigFactory, config_file, free_port, receive_n
from tests.markers_io import wait_for
from tests.move_handler import FAIL_ONCE_EVERY, REJECT_ONCE_EVERY

pytestmark = pytest.mark.xdist_group("topic-sets")


def _end_offsets(admin: AdminClient, config: Config, topic: str) -> int:
    from confluent_kafka import Consumer as RawConsumer

    reader = RawConsumer({"bootstrap.servers": config.bootstrap_servers, "group.id": "unused"})
    try:
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    finally:
        reader.close()


def test_a_routed_queue_lives_on_its_sets_topics_and_groups_end_to_end(kmq_config: ConfigFactory,
                                                                        admin: AdminClient) -> None:
    # Given a set "a" for the queues a.*, and a queue no route matches
    config = kmq_config(sets=("a",), routes=[{"queues": "a.*", "set": "a"}])
    a = config.topic_set("a")
    # When both get messages and a consumer acks the routed queue's
    with Producer(config, "a.jobs") as producer:
        for i in range(5):
            producer.send(f"job-{i}".encode())
    with Producer(config, "plain") as producer:
        for i in range(3):
            producer.send(f"plain-{i}".encode())
    with Consumer(config, "a.jobs") as consumer:
        got = receive_n(consumer, 5)
        for msg in got:
            msg.ack()
        assert consumer.flush(30) == 0
    # Then the routed queue's records, markers and group are the set's, and the default set holds only the other's
    assert sorted(m.payload for m in got) == [f"job-{i}".encode() for i in range(5)]
    assert _end_offsets(admin, config, a.messages) == 5
    assert _end_offsets(admin, config, config.default_topics.messages) == 3
    assert _end_offsets(admin, config, a.markers) > 0
    assert _end_offsets(admin, config, config.default_topics.markers) == 0
    groups = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    assert a.consumer_group("a.jobs") in groups and config.default_topics.consumer_group("a.jobs") not in groups
    # And the tools read each queue in its set
    rows = {(r.queue, r.topic_set): r for r in collect(config)}
    assert set(rows) == {("a.jobs", "a"), ("plain", "default")}
    assert (rows["a.jobs", "a"].acked, rows["plain", "default"].waiting) == (5, 3)


def test_one_tracker_process_serves_several_sets_a_group_each(kmq_config: ConfigFactory, tmp_path: Path,
                                                                admin: AdminClient) -> None:
    # Given two sets and a tracker process for both, with metrics
    config = kmq_config(sets=("a", "b"), redelivery_timeout_ms=2000,
                        routes=[{"queues": "a.*", "set": "a"}, {"queues": "b.*", "set": "b"}])
    port = free_port()
    tracker = subprocess.Popen([sys.executable, "-m", "kmq.redelivery", "--config", str(config_file(config, tmp_path)),
                                "--set", "a", "--set", "b", "--metrics-port", str(port)], cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    try:
        # When a message of each set is released with a delay
        for queue in ("a.q", "b.q"):
            with Producer(config, queue) as producer:
                producer.send(b"again")
            with Consumer(config, queue) as consumer:
                [msg] = receive_n(consumer, 1)
                msg.release(0.5)
                assert consumer.flush(30) == 0
        # Then each set's tracker, in its own group, brings its own message back on its own set's topics
        for queue, name in (("a.q", "a"), ("b.q", "b")):
            with Consumer(config, queue) as consumer:
                [again] = receive_n(consumer, 1, timeout_s=40)
                assert (again.payload, again.delivery_count) == (b"again", 2)
                again.ack()
                assert consumer.flush(30) == 0
            assert _end_offsets(admin, config, config.topic_set(name).messages) >= 2  # the original and its copy
        groups = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
        assert {"a", "b"} <= {n for n in ("a", "b") if config.topic_set(n).tracker_group in groups}
        # And its metrics say which set each figure is of
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        lines = [line for line in body.splitlines() if line.startswith("kmq_redeliveries_total")]
        assert any(line.startswith('kmq_redeliveries_total{queue="a.q",topic_set="a"}') for line in lines), lines
        assert any(line.startswith('kmq_redeliveries_total{queue="b.q",topic_set="b"}') for line in lines), lines
    finally:
        tracker.send_signal(signal.SIGTERM)
        _, err = tracker.communicate(timeout=30)
    assert tracker.returncode == 0, err[-2000:]


MESSAGES = 2000


def _worker(config_path: Path, folder: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "kmq.cli", "worker", "tests.move_handler:handle", "--queue", "mv", "--config",
         str(config_path), "--concurrency", "4", "--backoff-base", "0.2", "--backoff-max", "0.5"], cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "MOVE_TEST_DIR": str(folder)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def _drain(worker: subprocess.Popen[str]) -> None:
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err[-2000:]


def _send(config: Config, numbers: range, rate_per_s: float) -> None:
    with Producer(config, "mv") as producer:
        started = time.monotonic()
        for i, n in enumerate(numbers):
            producer.send_async(str(n).encode())
            time.sleep(max(0.0, started + i / rate_per_s - time.monotonic()))
        assert producer.flush(60) == 0


def _old_set_drained(config: Config) -> bool:
    [row] = [r for r in collect(config, ["mv"]) if r.topic_set == "default"]
    letters = list_dead_letters(config, "mv", None, topic_set="default")
    return _empty(row) and not letters


def _empty(row: QueueStats) -> bool:
    return row.waiting == row.in_flight == row.delayed == row.overdue == 0


def _runs(folder: Path) -> Counter[int]:
    path = folder / "runs"
    return Counter(int(line.split()[0]) for line in complete_lines(path))


def test_a_queue_moves_to_another_set_under_load_losing_nothing_and_running_nothing_twice(
        kmq_config: ConfigFactory, tmp_path: Path) -> None:
    # Given queue "mv" in the default set, worked on and tracked, under a steady load; some of its messages fail
    # once (their set's tracker brings them back) and some are rejected once (dead letters, redriven below)
    # A redelivery timeout far above any pause of a loaded machine: a message redelivered because its keep-alives
    # came late would run twice whatever the move does.
    old = kmq_config(sets=("new",), partitions=3, redelivery_timeout_ms=20_000)
    moving = old.replace(routes=[{"queues": "mv", "set": "new", "draining": "default"}])
    final = old.replace(routes=[{"queues": "mv", "set": "new"}])
    old_file, moving_file, final_file = (config_file(c, tmp_path) for c in (old, moving, final))
    tracker = subprocess.Popen([sys.executable, "-m", "kmq.redelivery", "--config", str(moving_file)], cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    workers = [_worker(old_file, tmp_path)]
    half = MESSAGES // 2
    old_producer = threading.Thread(target=_send, args=(old, range(half), 250.0))
    try:
        old_producer.start()
        # When, half way through the old producer's sends, a worker with the moving configuration starts and the
        # old worker drains (a rolling restart), then producers switch to the new set
        assert wait_for(lambda: len(_runs(tmp_path)) >= half // 2, timeout_s=60)
        workers.append(_worker(moving_file, tmp_path))
        time.sleep(2)  # it joins both sets' groups
        _drain(workers.pop(0))
        old_producer.join(60)
        _send(moving, range(half, MESSAGES), 250.0)
        # And once the old set holds nothing of the queue (its dead letters redriven onto the new set), the
        # workers restart with the final configuration
        assert wait_for(lambda: redrive(moving, "mv") >= 0 and _old_set_drained(moving), timeout_s=90,
                        interval_s=1.0), [r for r in collect(moving, ["mv"])]
        workers.append(_worker(final_file, tmp_path))
        time.sleep(2)
        _drain(workers.pop(0))
        assert wait_for(lambda: redrive(final, "mv") >= 0 and len(_runs(tmp_path)) == MESSAGES, timeout_s=90,
                        interval_s=1.0), f"{MESSAGES - len(_runs(tmp_path))} messages never ran"
    finally:
        for worker in workers:
            worker.kill()
            worker.communicate(timeout=30)
        tracker.send_signal(signal.SIGTERM)
        tracker.wait(30)
    # Then every message ran to success exactly once: none lost, none run twice
    runs = _runs(tmp_path)
    assert sorted(runs) == list(range(MESSAGES))
    twice = {n for n, times in runs.items() if times > 1}
    assert not twice, [line for line in (tmp_path / "runs").read_text().splitlines() if int(line.split()[0]) in twice]
    # And the move really happened: messages were worked in both sets, failures and rejects came back across it
    rows = {r.topic_set: r for r in collect(final, ["mv"], topic_sets=["default", "new"])}
    assert rows["default"].acked > 0 and rows["new"].acked > 0
    assert all(_empty(r) for r in rows.values())
    assert len(list(tmp_path.glob("failed-*"))) == len(range(0, MESSAGES, FAIL_ONCE_EVERY))
    assert len(list(tmp_path.glob("rejected-*"))) == len(range(0, MESSAGES, REJECT_ONCE_EVERY))
