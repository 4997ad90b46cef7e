"""The worker room: runs a handler over queues with threads or processes (``kmq worker``, ``@queue.worker``).

- ``worker``: Worker (the runtime: consumers, handler threads, settles, drain on SIGTERM);
- ``handler_runner``: one handler run in a thread or a child process, ending in an Outcome;
- ``time_limit``: the watchdog for handlers in threads; ``metrics``: the worker's Prometheus metrics.
"""

from kmq.worker.handler_runner import Handler, load_handler
from kmq.worker.worker import Backoff, Worker

__all__ = ["Backoff", "Handler", "Worker", "load_handler"]
