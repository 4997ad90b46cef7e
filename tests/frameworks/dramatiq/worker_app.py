"""A Dramatiq app that the shutdown and crash tests run under the ``dramatiq`` command: one broker from a kmq://
URL (``DRAMATIQ_TEST_URL``), and an actor that logs each run, with its kmq delivery count, to ``DRAMATIQ_TEST_LOG``."""

from __future__ import annotations

import json
import os
import time

import dramatiq
from dramatiq.middleware import CurrentMessage

from kmq.dramatiq import KmqBroker, KmqMessageProxy

broker = KmqBroker(url=os.environ["DRAMATIQ_TEST_URL"])
broker.add_middleware(CurrentMessage())
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="jobs", max_retries=0)
def slow_job(job: int, seconds: float) -> None:
    record("start", job)
    time.sleep(seconds)
    record("done", job)


def record(event: str, job: int) -> None:
    proxy = CurrentMessage.get_current_message()
    assert isinstance(proxy, KmqMessageProxy)
    line = json.dumps({"event": event, "job": job, "pid": os.getpid(), "delivery_count": proxy.delivery_count})
    with open(os.environ["DRAMATIQ_TEST_LOG"], "a") as log:  # one short append per line: lines never interleave
        log.write(line + "\n")
