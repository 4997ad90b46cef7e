"""`make demo`: the whole system on one machine, with a crash, and a summary that proves nothing was lost.

Broker (KMQ_BOOTSTRAP_SERVERS, else the local Maven-jar KRaft broker) → topics → a tracker process → 10,000 jobs
on two queues → two worker processes, one killed with SIGKILL while it holds jobs (its /metrics say how many) →
wait until every job is acked or dead-lettered → a table per queue → everything started is stopped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from kmq import logs
from kmq._kafka.offsets import group_members
from kmq._kafka.topics import create_topics
from kmq.cli.output import format_table
from kmq.config import Config
from kmq.ops.lifecycle import QueueSummary
from kmq.ops.stats import Scanner
from kmq.service import Service
from kmq.testing.broker import LocalKafka
from kmq.wire import MessageId
from kmq.wire import vocabulary as v

QUEUES = ("emails", "thumbnails")
JOBS_PER_QUEUE = 5_000
TIMEOUT_S = 100
CONCURRENCY = 4
#: Worker 1 is killed once it holds this many jobs (running and read ahead), so that some of them cannot have been
#: acked when it dies: holding one, it may well have acked it by then.
KILL_HOLDING = 2 * CONCURRENCY
ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def broker() -> Iterator[str]:
    if os.environ.get("KMQ_BOOTSTRAP_SERVERS"):
        yield os.environ["KMQ_BOOTSTRAP_SERVERS"]
        return
    with LocalKafka() as local:
        say(f"local Kafka {local.version} up at {local.bootstrap_servers} in {local.start_seconds:.1f}s")
        yield local.bootstrap_servers


def say(text: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {text}", flush=True)


def environment(config: Config) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "KMQ_BOOTSTRAP_SERVERS": config.bootstrap_servers,
            "KMQ_MESSAGE_TOPIC": config.message_topic, "KMQ_MARKER_TOPIC": config.marker_topic,
            "KMQ_REDELIVERY_TIMEOUT_MS": str(config.redelivery_timeout_ms),
            "KMQ_MAX_DELIVERIES": str(config.max_deliveries), "KMQ_TRACKER_GROUP": config.tracker_group,
            "KMQ_CONSUMER_GROUP_PREFIX": config.consumer_group_prefix,
            # A killed worker's partitions move to the survivor after 6 s, not the default 45 s.
            "KMQ_CONSUMER_KAFKA_SESSION_TIMEOUT_MS": "6000", "KMQ_CONSUMER_KAFKA_HEARTBEAT_INTERVAL_MS": "1000"}


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def send_jobs(config: Config, jobs_per_queue: int) -> dict[str, set[MessageId]]:
    sent: dict[str, set[MessageId]] = {}
    for name in QUEUES:
        with Service(config).queue(name).producer() as producer:
            futures = [producer.send_async(f"{name}-job-{i}".encode()) for i in range(jobs_per_queue)]
            sent[name] = {f.result(60) for f in futures}
    return sent


def held_by(metrics_port: int) -> int:
    """Messages a worker holds now (read and not settled: buffered or running), from its /metrics; 0 if it does not
    answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=1) as answer:
            text = answer.read().decode()
    except OSError:
        return 0
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("kmq_worker_in_flight{"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def await_members(config: Config, count: int, timeout_s: float = 60) -> None:
    """Wait until ``count`` workers share every queue: jobs sent before worker 1 (started as worker 2, but slower
    to import under load) joined were all taken by worker 2, and the kill then cost nothing."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all((group_members(config, config.consumer_group(q), 5) or 0) >= count for q in QUEUES):
            return
        time.sleep(0.2)
    say(f"the workers did not all join within {timeout_s:.0f}s: going on")


def run(config: Config, logs_dir: Path, jobs_per_queue: int = JOBS_PER_QUEUE) -> int:
    create_topics(config, config.default_topics, partitions=6, marker_partitions=3)
    env = environment(config)
    tracker = start(["-m", "kmq.redelivery"], env, logs_dir / "tracker.log")
    worker_args = ["-m", "kmq.cli", "worker", "examples.demo:handle", "--concurrency", str(CONCURRENCY),
                   "--backoff-base", "0.2", "--backoff-max", "1", *[a for q in QUEUES for a in ("--queue", q)]]
    watched = free_port()  # worker 1's /metrics: it is killed while it holds jobs, so the crash costs something
    workers = [start([*worker_args, "--metrics-port", str(watched)], env, logs_dir / "worker-1.log"),
               start(worker_args, env, logs_dir / "worker-2.log")]
    await_members(config, len(workers))
    started = time.monotonic()
    sent = send_jobs(config, jobs_per_queue)
    say(f"sent {sum(map(len, sent.values())):,} jobs to {', '.join(QUEUES)} in {time.monotonic() - started:.1f}s")
    scanner = Scanner(config, config.default_topics)
    killed = False
    total = sum(map(len, sent.values()))
    done = 0
    try:
        while time.monotonic() - started < TIMEOUT_S:
            if not killed:
                # Watched from the start: worker 1 may start seconds after worker 2 (imports under load) and the
                # backlog then drains fast, so waiting for a share of it to be done first missed the window.
                held = held_by(watched)
                if held >= KILL_HOLDING or done >= total * 9 // 10:  # the latter: a worker starved all along
                    workers[0].send_signal(signal.SIGKILL)
                    killed = True
                    say(f"killed worker 1 (SIGKILL) at {done:,}/{total:,} done, holding {held:,} jobs: they must "
                        "come back")
            summaries = scanner.read()
            done = sum(s.states[v.ACKED] + s.states[v.DEAD_LETTERED] for s in summaries.values())
            in_flight = sum(s.states[v.IN_FLIGHT] + s.states[v.OVERDUE] for s in summaries.values())
            if done >= total and in_flight == 0:
                break
            time.sleep(0.1 if not killed else 0.5)
        duration = time.monotonic() - started
    finally:
        for proc in (*workers, tracker):
            if proc.poll() is None:
                proc.terminate()
        for proc in (*workers, tracker):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        summaries = scanner.read(keep_ids=True)
        scanner.close()
    return report(config, sent, summaries, duration)


def report(config: Config, sent: dict[str, set[MessageId]], summaries: Mapping[str, QueueSummary],
           duration: float) -> int:
    rows, lost_total, unfinished_total = [], 0, 0
    for name in sent:
        s = summaries.get(name) or QueueSummary()
        ids = s.first_ids
        done = ids[v.ACKED] | ids[v.DEAD_LETTERED]
        # Not done by the deadline is not lost: a job still on the topic or in flight (or overdue: a tracker
        # brings it back) will be processed.
        unfinished = (sent[name] & (ids[v.IN_FLIGHT] | ids[v.DELAYED] | ids[v.OVERDUE] | ids[v.WAITING])) - done
        lost = sent[name] - done - unfinished
        lost_total += len(lost)
        unfinished_total += len(unfinished)
        rows.append([name, f"{len(sent[name]):,}", f"{len(ids[v.ACKED] & sent[name]):,}",
                     f"{s.counters[v.REDELIVERED]:,}", f"{s.counters[v.RECOVERED]:,}",
                     f"{len(ids[v.DEAD_LETTERED] & sent[name]):,}",
                     f"{len(unfinished):,}", f"{len(lost):,}", f"{duration:.1f}s",
                     f"{len(sent[name]) / duration:,.0f}"])
    print()
    print(format_table(["queue", "sent", "acked", "redelivered", "after crash", "dead-lettered", "unfinished",
                        "lost", "duration", "msgs/s"], rows))
    print("redelivered: every delivery after the first (retries of failed jobs included); after crash: jobs the\n"
          "tracker took back from the killed worker (no ack, no release before the deadline); unfinished: still\n"
          "on the topic or in flight at the deadline; lost: neither done nor anywhere a worker would find it.")
    print()
    if lost_total:
        say(f"LOST {lost_total:,} jobs: not acked, not dead-lettered, not in flight, not waiting on the topic")
    if unfinished_total:
        say(f"UNFINISHED {unfinished_total:,} jobs after {TIMEOUT_S} s (waiting on the topic or in flight): "
            f"nothing lost, but the workers did not keep up")
    if not lost_total and not unfinished_total:
        say("lost = 0, unfinished = 0: every job was acked or dead-lettered")
    return 0 if lost_total == 0 and unfinished_total == 0 else 1


def main() -> int:
    logs.configure("warning")
    run_id = uuid.uuid4().hex[:8]
    chosen = os.environ.get("KMQ_DEMO_LOGS")
    logs_dir = Path(chosen) if chosen else Path(tempfile.mkdtemp(prefix=f"kmq-demo-{run_id}-"))
    logs_dir.mkdir(parents=True, exist_ok=True)
    with broker() as bootstrap:
        config = Config(bootstrap_servers=bootstrap, message_topic=f"demo-{run_id}.messages",
                        marker_topic=f"demo-{run_id}.markers", redelivery_timeout_ms=4000, max_deliveries=3)
        status = run(config, logs_dir)
    if status == 0 and not chosen:
        shutil.rmtree(logs_dir, ignore_errors=True)
    else:
        say(f"process logs kept in {logs_dir}")
    return status


if __name__ == "__main__":
    sys.exit(main())
