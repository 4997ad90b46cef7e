"""`make demo`: the whole system on one machine, with a crash, and a summary that proves nothing was lost.

Broker (KMQ_BOOTSTRAP_SERVERS, else the local Maven-jar KRaft broker) → topics → a tracker process → 10,000 jobs
on two queues → two worker processes, one killed with SIGKILL halfway → wait until every job is acked or
dead-lettered → a table per queue → everything started is stopped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from kmq import logs
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
            "KMQ_MAX_DELIVERIES": str(config.max_deliveries),
            # A killed worker's partitions move to the survivor after 6 s, not the default 45 s.
            "KMQ_CONSUMER_KAFKA_SESSION_TIMEOUT_MS": "6000", "KMQ_CONSUMER_KAFKA_HEARTBEAT_INTERVAL_MS": "1000"}


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def send_jobs(config: Config) -> dict[str, set[MessageId]]:
    sent: dict[str, set[MessageId]] = {}
    for name in QUEUES:
        with Service(config).queue(name).producer() as producer:
            futures = [producer.send_async(f"{name}-job-{i}".encode()) for i in range(JOBS_PER_QUEUE)]
            sent[name] = {f.result(60) for f in futures}
    return sent


def run(config: Config, logs_dir: Path) -> int:
    create_topics(config, partitions=6, marker_partitions=3)
    env = environment(config)
    tracker = start(["-m", "kmq.redelivery"], env, logs_dir / "tracker.log")
    worker_args = ["-m", "kmq.cli", "worker", "examples.demo:handle", "--concurrency", "4",
                   "--backoff-base", "0.2", "--backoff-max", "1", *[a for q in QUEUES for a in ("--queue", q)]]
    started = time.monotonic()
    sent = send_jobs(config)
    say(f"sent {sum(map(len, sent.values())):,} jobs to {', '.join(QUEUES)} in {time.monotonic() - started:.1f}s")
    workers = [start(worker_args, env, logs_dir / f"worker-{i}.log") for i in (1, 2)]
    scanner = Scanner(config)
    killed = False
    total = sum(map(len, sent.values()))
    try:
        while time.monotonic() - started < TIMEOUT_S:
            summaries = scanner.read()
            done = sum(s.states[v.ACKED] + s.states[v.DEAD_LETTERED] for s in summaries.values())
            in_flight = sum(s.states[v.IN_FLIGHT] + s.states[v.OVERDUE] for s in summaries.values())
            if not killed and done >= total // 2:
                workers[0].send_signal(signal.SIGKILL)
                killed = True
                say(f"killed worker 1 (SIGKILL) at {done:,}/{total:,} done; its unacked jobs must come back")
            if done >= total and in_flight == 0:
                break
            time.sleep(0.5)
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
