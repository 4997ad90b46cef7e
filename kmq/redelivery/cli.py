"""``kmq-redelivery-tracker``: run one tracker replica until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

import structlog

from kmq import logs
from kmq._kafka.topics import check_topics
from kmq.config import Config
from kmq.errors import KafkaClientError, KmqError
from kmq.metrics_http import serve
from kmq.redelivery.metrics import TrackerMetrics
from kmq.redelivery.tracker import RedeliveryTracker

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
WAIT_FOR_BROKER_S = 5.0
#: How often the watchdog looks at the loop.
WATCH_EVERY_S = 5.0

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kmq-redelivery-tracker",
        description="Track in-flight kmq messages on the markers topic and redeliver those whose worker "
                    "went silent. Run several replicas for fail-over: they share the markers partitions.",
        epilog="example: kmq-redelivery-tracker --config kmq.yaml --metrics-port 9464",
    )
    p.add_argument("--config", help="YAML config (kmq or kafka-mq-go keys); KMQ_* variables override it")
    p.add_argument("--metrics-port", type=int, help="serve /metrics and /healthz on this port (0 = off)")
    p.add_argument("--log-level", default=os.environ.get("KMQ_LOG_LEVEL", "info"))
    p.add_argument("--log-json", action="store_true", help="JSON log lines instead of key=value")
    return p


def load_config(path: str | None) -> Config:
    return Config.from_yaml(path) if path else Config.load()


def run(config: Config) -> int:
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()
        if tracker is not None:
            tracker.stop()

    tracker: RedeliveryTracker | None = None
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    metrics = TrackerMetrics()
    server = None
    if config.metrics_port:  # bound first: a port in use fails at once, before the tracker joins its group
        server = serve(metrics.registry, config.metrics_host, config.metrics_port,
                       lambda: tracker.health() if tracker is not None else "starting",
                       live=lambda: tracker.liveness() if tracker is not None else None)
    try:
        if not wait_for_topics(config, stop):
            return EXIT_OK
        tracker = RedeliveryTracker(config, metrics=metrics)
        if stop.is_set():
            tracker.stop()
        threading.Thread(target=watch_loop, args=(tracker, stop), name="kmq-tracker-watchdog", daemon=True).start()
        tracker.run()
    finally:
        stop.set()
        if server is not None:
            server.shutdown()
            server.server_close()
    return EXIT_OK


def watch_loop(tracker: RedeliveryTracker, done: threading.Event, every_s: float = WATCH_EVERY_S,
               exit_process: Callable[[int], object] = os._exit) -> None:
    """A loop blocked in a call that does not return cannot stop itself: once it has not turned for LOOP_STALL_S
    this thread ends the process with one line, for its supervisor to restart it (its next owner of each markers
    partition rebuilds from the last commit: nothing is lost, copies not yet Ended may be made again)."""
    while not done.wait(every_s):
        stalled = tracker.stalled()
        if stalled is not None:
            log.error("tracker_fatal", error=f"{stalled}: exiting for a restart")
            print(f"kmq-redelivery-tracker: error: {stalled}: exiting for a restart", file=sys.stderr, flush=True)
            exit_process(EXIT_ERROR)
            return


def wait_for_topics(config: Config, stop: threading.Event) -> bool:
    """Checks the topics (markers with LogAppendTime) before tracking; while the broker cannot be reached, says so
    every few seconds and tries again (a deployed tracker may start before its broker). False if stopped."""
    while not stop.is_set():
        started = time.monotonic()
        try:
            check_topics(config, timeout_s=WAIT_FOR_BROKER_S)
            return True
        except KafkaClientError as err:
            log.warning("tracker_waiting_for_kafka", bootstrap_servers=config.bootstrap_servers, error=str(err),
                        retry_every_s=WAIT_FOR_BROKER_S)
            stop.wait(max(0.0, WAIT_FOR_BROKER_S - (time.monotonic() - started)))
    return False


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logs.configure(args.log_level, args.log_json)
    try:
        config = load_config(args.config)
        if args.metrics_port is not None:
            config = config.replace(metrics_port=args.metrics_port)
        return run(config)
    except KmqError as err:
        print(f"kmq-redelivery-tracker: error: {err}", file=sys.stderr)
        return EXIT_ERROR
