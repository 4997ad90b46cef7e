"""The Celery app the Celery bench runs (``celery -A tests.bench.celery_app worker``), on the broker the
``CELERY_BENCH_*`` environment names (kmq or Redis): one trivial task that records when it ran."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping

from celery import Celery

import kmq.kombu  # noqa: F401  (registers the kmq:// scheme)

TASK = "bench.noop"


def make_app(env: Mapping[str, str]) -> Celery:
    app = Celery("kmq_bench")
    app.conf.update(
        broker_url=env["CELERY_BENCH_BROKER"],
        broker_transport_options=json.loads(env.get("CELERY_BENCH_OPTIONS", "{}")),
        task_default_queue=env.get("CELERY_BENCH_QUEUE", "bench"),
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=int(env.get("CELERY_BENCH_PREFETCH", "4")),
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    out = env.get("CELERY_BENCH_OUT", os.devnull)
    work_s = float(env.get("CELERY_BENCH_WORK_S", "0"))

    @app.task(name=TASK)
    def noop(number: int) -> None:
        if work_s:
            time.sleep(work_s)
        with open(out, "a") as handle:  # one short O_APPEND write per run
            handle.write(f"{number} {time.time():.6f}\n")

    return app


app = make_app(os.environ) if "CELERY_BENCH_BROKER" in os.environ else None
