"""The Celery app the worker tests run (``celery -A tests.frameworks.kombu.celery_app worker``): one task that
records each run in a file (its start too, with ``CELERY_TEST_STARTS``), on kmq through ``kmq://`` (brokers and
topics from the ``KMQ_*`` environment). A number listed in ``CELERY_TEST_KILLERS`` kills its own pool child."""

from __future__ import annotations

import faulthandler
import os
import signal
import time
from collections.abc import Mapping

from celery import Celery, Task

import kmq.kombu  # noqa: F401  (registers the kmq:// scheme)

TASK = "kmq_test.record"


def make_app(env: Mapping[str, str]) -> Celery:
    app = Celery("kmq_test")
    kmq_settings = {name: env[f"KMQ_{name.upper()}"] for name in ("bootstrap_servers", "message_topic", "marker_topic")
                    if f"KMQ_{name.upper()}" in env}
    app.conf.update(
        broker_url="kmq://" + env.get("KMQ_BOOTSTRAP_SERVERS", "").split(",")[0],
        broker_transport_options={"kmq": kmq_settings, "queue_name_prefix": env.get("CELERY_TEST_PREFIX", ""),
                                  "visibility_timeout": float(env.get("CELERY_TEST_VISIBILITY_S", "5"))},
        task_default_queue=env.get("CELERY_TEST_QUEUE", "celery"),
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=int(env.get("CELERY_TEST_PREFETCH", "1")),
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    out = env.get("CELERY_TEST_OUT", os.devnull)
    starts = env.get("CELERY_TEST_STARTS", os.devnull)
    killers = {int(n) for n in env.get("CELERY_TEST_KILLERS", "").split(",") if n}
    work_s = float(env.get("CELERY_TEST_WORK_S", "0.05"))

    @app.task(name=TASK, bind=True)
    def record(self: Task, number: int) -> int:
        # What kmq says of this delivery reaches the task in its request's properties.
        line = f"{number} {self.request.hostname} {os.getpid()} {self.request.properties.get('kmq_delivery_count')}\n"
        with open(starts, "a") as handle:  # one short O_APPEND write per run: lines never interleave
            handle.write(line)
        if number in killers:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(work_s)
        with open(out, "a") as handle:
            handle.write(line)
        return number

    return app


# A worker that does not stop is told to print every thread's stack (the test does so before killing it).
faulthandler.register(signal.SIGPWR, all_threads=True)  # Celery takes SIGUSR1 for itself
app = make_app(os.environ)
