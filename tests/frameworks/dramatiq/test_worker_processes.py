"""Dramatiq worker processes (the ``dramatiq`` command) on kmq: a SIGTERM drains, a SIGKILL loses nothing.

The worker runs ``worker_app`` with a broker built from a kmq:// URL on the session's topics; the session's
redelivery tracker (conftest) brings back what a killed worker held.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from dramatiq import Message

from kmq.dramatiq import KmqBroker
from tests.appended import complete_lines
from tests.frameworks.dramatiq.conftest import DramatiqSession
from tests.markers_io import wait_for

ROOT = Path(__file__).resolve().parents[3]
# A killed worker leaves its consumer group after the session timeout: seconds, not Kafka's default 45.
FAST_GROUP = {"consumer_kafka.session.timeout.ms": "6000", "consumer_kafka.heartbeat.interval.ms": "500"}


def session_url(session: DramatiqSession, queue_prefix: str, group: Mapping[str, str] = FAST_GROUP,
                **fields: str) -> str:
    config = session.config
    query = {"message_topic": config.message_topic, "marker_topic": config.marker_topic,
             "next_message_timeout_ms": "100", "queue_prefix": queue_prefix, "redelivery_timeout_ms": "3000",
             **group, **fields}
    return f"kmq://{config.bootstrap_servers}/?{urlencode(query)}"


class Workers:
    """``dramatiq`` command processes, each in its own process group (its worker children die with it)."""

    def __init__(self, url: str, log: Path) -> None:
        self.url, self.log = url, log
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, threads: int, processes: int = 1, url: str | None = None) -> subprocess.Popen[bytes]:
        env = {**os.environ, "DRAMATIQ_TEST_URL": url or self.url, "DRAMATIQ_TEST_LOG": str(self.log)}
        with (self.log.parent / f"worker-{len(self.procs)}.log").open("wb") as output:
            proc = subprocess.Popen(
                [sys.executable, "-m", "dramatiq", "tests.frameworks.dramatiq.worker_app", "--processes",
                 str(processes), "--threads", str(threads)], cwd=ROOT, env=env, start_new_session=True,
                stdout=output, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in complete_lines(self.log)]

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


@pytest.fixture
def queue_prefix(dramatiq_session: DramatiqSession) -> str:
    return f"{dramatiq_session.tag}-{uuid.uuid4().hex[:8]}."


@pytest.fixture
def workers(dramatiq_session: DramatiqSession, queue_prefix: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(session_url(dramatiq_session, queue_prefix), tmp_path / "events.jsonl")
    yield started
    started.stop_all()


@pytest.fixture
def sender(dramatiq_session: DramatiqSession, queue_prefix: str) -> Iterator[KmqBroker]:
    """A broker in the test process, on the workers' queues."""
    broker = KmqBroker(url=session_url(dramatiq_session, queue_prefix))
    yield broker
    broker.close()


def send_jobs(broker: KmqBroker, count: int, seconds: float) -> None:
    """Messages for worker_app's ``slow_job`` (its actor lives in the worker processes only)."""
    broker.declare_queue("jobs")
    for job in range(count):
        broker.enqueue(Message(queue_name="jobs", actor_name="slow_job", args=(job, seconds), kwargs={}, options={}))


def test_sigterm_drains_running_jobs_and_gives_back_the_prefetched_ones_uncounted(
        workers: Workers, sender: KmqBroker) -> None:
    # Given a worker with 2 threads (prefetch 4) busy with the first of 8 slow jobs
    first = workers.start(threads=2)
    send_jobs(sender, 8, seconds=1.5)
    assert wait_for(lambda: sum(e["event"] == "start" for e in workers.events()) >= 2, timeout_s=60)

    # When it gets SIGTERM
    first.send_signal(signal.SIGTERM)

    # Then it finishes the jobs it runs and exits cleanly
    assert first.wait(60) == 0
    done_by_first = {e["job"] for e in workers.events() if e["event"] == "done"}
    started_by_first = {e["job"] for e in workers.events() if e["event"] == "start"}
    assert started_by_first == done_by_first
    # And a second worker gets the rest, prefetched ones included, as first deliveries (given back, not counted)
    workers.start(threads=4)
    assert wait_for(lambda: {e["job"] for e in workers.events() if e["event"] == "done"} == set(range(8)),
                    timeout_s=90), workers.events()
    done = [e for e in workers.events() if e["event"] == "done"]
    assert sorted(e["job"] for e in done) == list(range(8)), "a job ran twice"
    assert {e["delivery_count"] for e in done} == {1}
    sender.join("jobs", timeout=30_000)


def test_a_sigkilled_worker_loses_nothing(workers: Workers, sender: KmqBroker) -> None:
    # Given a worker in the middle of 12 jobs, some done, some running, some prefetched
    first = workers.start(threads=3)
    send_jobs(sender, 12, seconds=0.8)
    assert wait_for(lambda: sum(e["event"] == "done" for e in workers.events()) >= 2, timeout_s=60)

    # When it is killed (no shutdown at all) and another worker starts
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(10)
    killed_at = workers.events()
    unfinished = {e["job"] for e in killed_at if e["event"] == "start"} - {
        e["job"] for e in killed_at if e["event"] == "done"}
    workers.start(threads=3)

    # Then every job is done: the tracker hands the dead worker's messages to the new one
    assert wait_for(lambda: {e["job"] for e in workers.events() if e["event"] == "done"} == set(range(12)),
                    timeout_s=120), workers.events()
    sender.join("jobs", timeout=60_000)
    # And the jobs that were running when it died come back as second deliveries
    redone = [e for e in workers.events()[len(killed_at):] if e["event"] == "start" and e["job"] in unfinished]
    assert unfinished and {e["job"] for e in redone} == unfinished
    assert all(e["delivery_count"] >= 2 for e in redone)


@pytest.mark.parametrize("client_id", ["", "jobs-{process}"], ids=["no client_id", "a client_id per process"])
def test_a_sigkilled_two_process_worker_is_recovered_within_the_redelivery_and_session_timeouts(
        workers: Workers, dramatiq_session: DramatiqSession, queue_prefix: str, client_id: str) -> None:
    """``dramatiq --processes 2 --threads 4``, killed with everything it held, a new one started at once: its
    partitions come back when the group evicts the dead members (the session timeout, which follows the redelivery
    timeout), its messages when the tracker's deadline passes. With a client_id per process the new processes take
    the dead ones' places in the group at once, and the tracker frees what they held at once."""
    redelivery_s, session_s = 10, 10
    fields = {"redelivery_timeout_ms": str(redelivery_s * 1000)}
    if client_id:
        fields["client_id"] = client_id
    url = session_url(dramatiq_session, queue_prefix, group={}, **fields)  # the broker's own session timeout
    broker = KmqBroker(url=url)
    try:
        # Given a worker with 2 processes of 4 threads in the middle of 120 jobs of 0.5 s, both processes at work
        # (a process killed while its group join is pending holds partitions for a second session timeout: the
        # broker's docs say so)
        first = workers.start(threads=4, processes=2, url=url)
        send_jobs(broker, 120, seconds=0.5)
        assert wait_for(lambda: len({e["pid"] for e in workers.events() if e["event"] == "done"}) == 2
                        and sum(e["event"] == "done" for e in workers.events()) >= 16, timeout_s=90)

        # When it is killed with all its processes, and a new one starts at once
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
        killed = time.monotonic()
        workers.start(threads=4, processes=2, url=url)

        # Then every job is done within the redelivery timeout (+ the session timeout without client ids) + 10 s
        bound_s = redelivery_s + (0 if client_id else session_s) + 10
        assert wait_for(lambda: {e["job"] for e in workers.events() if e["event"] == "done"} == set(range(120)),
                        timeout_s=bound_s + 60), workers.events()
        took_s = time.monotonic() - killed
        print(f"\nall 120 jobs done {took_s:.1f} s after the kill (bound {bound_s} s)")
        assert took_s <= bound_s
    finally:
        broker.close()
