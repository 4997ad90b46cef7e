"""The worker room: runs a handler over queues with threads or processes (``kmq worker``, ``@queue.worker``).

- ``worker``: Worker, the run loop (consumers, threads, drain on SIGTERM, close);
- ``dispatch``: the Dispatcher that gives each free thread one message, from several consumers at once;
- ``handler_runner``: one handler run in a thread or a child process, ending in an Outcome;
- ``settle``: the settle policy (Outcome → ack, release with Backoff, reject, dead letter) and its counts;
- ``backoff``: Backoff, the delay before a failed message is retried;
- ``prefetch``: how many messages a consumer may hold, from how long the handlers take;
- ``time_limit``: the watchdog for handlers in threads; ``metrics``: the worker's Prometheus metrics.
"""

from kmq.worker.backoff import Backoff
from kmq.worker.handler_runner import Handler, load_handler
from kmq.worker.worker import Worker

__all__ = ["Backoff", "Handler", "Worker", "load_handler"]
