"""The Celery app the worker tests run (``celery -A tests.frameworks.kombu.celery_app worker``): one task that
records each run in a file, on kmq through ``kmq://`` (brokers and topics from the ``KMQ_*`` environment)."""

from __future__ import annotations

import faulthandler
import os
import signal
import socket
import time
from collections.abc import Mapping

from celery import Celery

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
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    out = env.get("CELERY_TEST_OUT", os.devnull)
    work_s = float(env.get("CELERY_TEST_WORK_S", "0.05"))

    @app.task(name=TASK)
    def record(number: int) -> int:
        time.sleep(work_s)
        with open(out, "a") as handle:  # one short O_APPEND write per run: lines never interleave
            handle.write(f"{number} {socket.gethostname()} {os.getpid()}\n")
        return number

    return app


# A worker that does not stop is told to print every thread's stack (the test does so before killing it).
faulthandler.register(signal.SIGPWR, all_threads=True)  # Celery takes SIGUSR1 for itself
app = make_app(os.environ)
