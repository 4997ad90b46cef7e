"""One kmq Producer per (config, queue) for the whole process, shared by every kombu connection in it.

Celery opens a pool of connections per process (``broker_pool_limit``) and publishes to a queue from any of them:
a producer per connection would mean one librdkafka client per connection and queue. A forked child (Celery's
prefork pool) must not touch its parent's clients, so the pool belongs to one process id and a child starts its own.
"""

from __future__ import annotations

import atexit
import os
import threading

import structlog

from kmq import Config, Producer, Service

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: How long the exit handler waits for records still in the clients (``confirm_publish=False``).
EXIT_FLUSH_S = 10.0


class ProducerPool:
    """Thread-safe; ``get`` creates a queue's producer on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        #: Distinct configs seen (a Config is not hashable: its librdkafka mappings are read-only proxies).
        self._configs: list[Config] = []
        self._producers: dict[tuple[int, str], Producer] = {}

    def _config_index(self, config: Config) -> int:
        with self._lock:
            for index, known in enumerate(self._configs):
                if known is config or known == config:
                    return index
            self._configs.append(config)
            return len(self._configs) - 1

    def get(self, config: Config, queue: str) -> Producer:
        key = (self._config_index(config), queue)
        producer = self._producers.get(key)
        if producer is not None and self._pid == os.getpid():
            return producer
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's clients are not ours to use or close
                self._producers = {}
                self._pid = os.getpid()
            producer = self._producers.get(key)
            if producer is None:
                producer = self._producers[key] = Service(config).queue(queue).producer()
            return producer

    def close(self, timeout_s: float = EXIT_FLUSH_S) -> None:
        """Flushes and closes every producer of this process (records still undelivered are logged by each)."""
        with self._lock:
            producers, self._producers = self._producers, {}
            if self._pid != os.getpid():
                return
        for producer in producers.values():
            producer.close(timeout_s)


POOL = ProducerPool()
atexit.register(POOL.close)
