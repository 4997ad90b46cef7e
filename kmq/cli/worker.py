"""``kmq worker``: a handler over queues."""

from __future__ import annotations

import argparse
import json
import os
import sys

from kmq.cli.options import COUNT, EXIT_ERROR, EXIT_OK, PORT, SECONDS, Command, Subparsers, number, subcommand
from kmq.cli.preflight import warn_if_no_tracker
from kmq.config import Config
from kmq.errors import ConfigError


def add_parsers(subs: Subparsers) -> dict[str, Command]:
    worker = subcommand(subs, "worker", "Run a handler over a queue: return → ack, kmq.Reject → reject, "
                                        "exception → retry with backoff, then dead letter after max deliveries.",
                        "kmq worker examples.worker:handle --queue emails --concurrency 8")
    worker.add_argument("handler", metavar="MODULE:FUNCTION")
    worker.add_argument("--queue", action="append", required=True, help="queue to serve (repeatable)")
    worker.add_argument("--concurrency", type=COUNT, default=1)
    worker.add_argument("--processes", type=COUNT, nargs="?", const=0, default=1, metavar="N",
                        help="N worker processes, each with its own consumers and --concurrency threads, supervised "
                             "(a dead one is restarted); for CPU-bound handlers (default 1)")
    worker.add_argument("--handler-processes", action="store_true",
                        help="run each thread's handler in a child process of its own, fed by the worker's consumer "
                             "(a --time-limit then kills CPU-bound code)")
    worker.add_argument("--backoff-base", type=SECONDS, default=1.0, help="seconds before the first retry")
    worker.add_argument("--backoff-max", type=SECONDS, default=300.0, help="longest retry delay in seconds")
    worker.add_argument("--drain-timeout", type=SECONDS, default=30.0,
                        help="seconds running handlers get to finish on SIGTERM (default 30)")
    worker.add_argument("--close-timeout", type=SECONDS, default=10.0,
                        help="then seconds to write the last markers and leave the group, even with the broker down "
                             "(default 10)")
    worker.add_argument("--time-limit", type=number(float, 0, above=True), default=None, metavar="SECONDS",
                        help="stop a handler run after this long and release its message (a failed delivery)")
    worker.add_argument("--metrics-port", type=PORT, help="serve /metrics and /healthz on this port")
    return {"worker": Command(cmd_worker, usage_error)}


def usage_error(args: argparse.Namespace) -> str | None:
    if args.processes == 0:  # the flag before it took a count
        return ("--processes takes a count: --processes N runs N worker processes, each consuming for itself; "
                "one handler process per thread, fed by one consumer, is --handler-processes")
    if args.backoff_max < args.backoff_base:
        return f"--backoff-max ({args.backoff_max}) is below --backoff-base ({args.backoff_base})"
    return None


def cmd_worker(config: Config, args: argparse.Namespace) -> int:
    from kmq.heap import tune_gc
    from kmq.wire import validate_queue_name
    from kmq.worker import Backoff, Worker, load_handler

    # Like celery and dramatiq: handler modules resolve from the directory the command runs in.
    sys.path.insert(0, os.getcwd())
    handler = load_handler(args.handler)
    if args.metrics_port is not None:
        config = config.replace(metrics_port=args.metrics_port)
    queues = [validate_queue_name(q) for q in args.queue]
    if args.processes > 1:
        return _run_pool(config, queues, handler, args)
    worker = Worker(config, queues, handler, args.concurrency,
                    processes=args.handler_processes, handler_spec=args.handler,
                    backoff=Backoff(base_s=args.backoff_base, max_s=args.backoff_max),
                    drain_timeout_s=args.drain_timeout, close_timeout_s=args.close_timeout,
                    time_limit_s=args.time_limit)
    worker.bind_metrics()  # a port in use: its one line before anything talks to the broker
    for topics in dict.fromkeys(config.topics_for(q) for q in args.queue):
        warn_if_no_tracker(config, topics)
    try:
        worker.run(on_started=tune_gc)
    finally:
        print(json.dumps(dict(worker.counts)))  # what was done, also when the end was not clean
    return EXIT_OK


def _run_pool(config: Config, queues: list[str], handler: object, args: argparse.Namespace) -> int:
    from kmq.worker import Backoff
    from kmq.worker.async_runner import is_coroutine_handler
    from kmq.worker.pool import WorkerPool, WorkerRecipe

    if is_coroutine_handler(handler):
        raise ConfigError("processes", "an async def handler scales with --concurrency on one event loop; "
                                       "--processes N is for sync (CPU-bound) handlers")
    recipe = WorkerRecipe(config, tuple(queues), args.handler, args.concurrency, args.handler_processes,
                          Backoff(base_s=args.backoff_base, max_s=args.backoff_max), args.drain_timeout,
                          args.close_timeout, args.time_limit, args.log_level, args.log_json)
    pool = WorkerPool(recipe, args.processes)
    pool.bind_metrics()
    for topics in dict.fromkeys(config.topics_for(q) for q in queues):
        warn_if_no_tracker(config, topics)
    try:
        pool.run()
    finally:
        print(json.dumps(dict(pool.counts)))
    for failure in pool.failures:
        print(f"kmq worker: error: {failure}", file=sys.stderr)
    return EXIT_ERROR if pool.failures else EXIT_OK
