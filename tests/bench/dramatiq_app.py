"""The Dramatiq app the Dramatiq bench runs under the ``dramatiq`` command, on kmq or on Redis.

``BENCH_BROKER_URL`` picks the broker (``kmq://…`` or ``redis://…``; ``BENCH_HEARTBEAT_MS`` and
``BENCH_MAINTENANCE_CHANCE`` for Redis's heartbeat timeout and maintenance chance); each worker process writes its
counts to ``BENCH_OUT/<pid>.json`` when it shuts down, and ``slow`` appends the task number to ``BENCH_OUT/done.log``
when it finishes one.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import dramatiq
from dramatiq import Broker, Middleware, Worker

URL = os.environ["BENCH_BROKER_URL"]
OUT = Path(os.environ["BENCH_OUT"])

if URL.startswith("kmq://"):
    from kmq.dramatiq import KmqBroker

    broker: Broker = KmqBroker(url=URL)
else:
    from dramatiq.brokers.redis import RedisBroker

    # Dead workers' messages are requeued by the "maintenance" a command runs with this chance in 1,000,000
    # (Dramatiq's default, 1,000: with a worker fetching once a second, a requeue comes after ~15 minutes).
    broker = RedisBroker(url=URL, heartbeat_timeout=int(os.environ.get("BENCH_HEARTBEAT_MS", "60000")),
                         maintenance_chance=int(os.environ.get("BENCH_MAINTENANCE_CHANCE", "1000")))

_lock = threading.Lock()
_stats: dict[str, float | int | None] = {"count": 0, "first": None, "last": None}


class WriteStats(Middleware):
    def after_worker_shutdown(self, broker: Broker, worker: Worker) -> None:
        (OUT / f"{os.getpid()}.json").write_text(json.dumps(_stats))


broker.add_middleware(WriteStats())
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench", max_retries=0)
def noop(i: int) -> None:
    now = time.time()
    with _lock:
        _stats["count"] = int(_stats["count"] or 0) + 1
        _stats["first"] = _stats["first"] or now
        _stats["last"] = now


@dramatiq.actor(queue_name="bench_slow", max_retries=0)
def slow(i: int, seconds: float) -> None:
    time.sleep(seconds)
    with (OUT / "done.log").open("a") as done:
        done.write(f"{i}\n")
