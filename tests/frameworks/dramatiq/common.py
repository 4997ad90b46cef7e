"""The helpers Dramatiq's test modules import from their package's ``common`` module (which the sdist does not
ship): ours, for the kmq-backed run. ``run_suite`` puts a module re-exporting these beside the test files."""

from __future__ import annotations

import platform
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pika
import pytest
from dramatiq import Broker, Worker

skip_on_windows = pytest.mark.skipif(platform.system() == "Windows", reason="not on Windows")
# Dramatiq's TimeLimit middleware raises in worker threads through a CPython API.
skip_on_pypy = pytest.mark.skipif(platform.python_implementation() == "PyPy", reason="time limits need CPython")
# test_broker.py builds a RabbitMQ broker object with these (never connects in the tests we run).
RABBITMQ_CREDENTIALS = pika.credentials.PlainCredentials("guest", "guest")


@contextmanager
def worker(broker: Broker, **options: Any) -> Iterator[Worker]:
    """A started Dramatiq worker, stopped on exit."""
    started = Worker(broker, **options)
    started.start()
    try:
        yield started
    finally:
        started.stop()
