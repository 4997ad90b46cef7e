"""``kmq-redelivery-tracker``: run one tracker replica until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType

import structlog

from kmq import logs
from kmq._kafka.topics import check_topics
from kmq.config import Config
from kmq.errors import AuthenticationError, AuthorizationError, KafkaClientError, KmqError
from kmq.heap import tune_gc
from kmq.metrics_http import serve
from kmq.redelivery.metrics import TrackerMetrics, registry_of
from kmq.redelivery.tracker import RedeliveryTracker
from kmq.topic_sets import TopicSet

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
    p.add_argument("--set", dest="topic_set", action="append", metavar="SET",
                   help="track this topic set (repeatable; default: every set in the config)")
    p.add_argument("--log-level", default=os.environ.get("KMQ_LOG_LEVEL", "info"))
    p.add_argument("--log-json", action="store_true", help="JSON log lines instead of key=value")
    return p


def load_config(path: str | None) -> Config:
    return Config.from_yaml(path) if path else Config.load()


def run(config: Config, topic_sets: Sequence[str] | None = None) -> int:
    """Tracks the topic sets named (default: every set of ``config``), each in its own tracker group, until SIGTERM
    or SIGINT. A failure in one set's tracker stops them all (the process exits; a supervisor restarts it)."""
    sets = [config.topic_set(name) for name in topic_sets] if topic_sets else list(config.all_topic_sets)
    stop = threading.Event()
    trackers: list[RedeliveryTracker] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()
        for tracker in list(trackers):
            tracker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    metrics = {topics.name: TrackerMetrics() for topics in sets}
    server = None
    if config.metrics_port:  # bound first: a port in use fails at once, before the tracker joins its group
        server = serve(registry_of(metrics), config.metrics_host, config.metrics_port,
                       lambda: _health(trackers, len(sets)), live=lambda: _liveness(trackers))
    try:
        for topics in sets:
            if not wait_for_topics(config, topics, stop):
                return EXIT_OK
        for topics in sets:
            trackers.append(RedeliveryTracker(config, topics, metrics=metrics[topics.name]))
        if stop.is_set():
            on_signal(signal.SIGTERM, None)
        threading.Thread(target=watch_loop, args=(trackers, stop), name="kmq-tracker-watchdog", daemon=True).start()
        tune_gc()  # set up: from here on the process is one loop over markers
        _run_all(trackers)
    finally:
        stop.set()
        for tracker in trackers:
            tracker.stop()
        if server is not None:
            server.shutdown()
            server.server_close()
    return EXIT_OK


def _health(trackers: list[RedeliveryTracker], expected: int) -> str | None:
    if len(trackers) < expected:
        return "starting"
    return next((f"{t.topics.name}: {problem}" if expected > 1 else problem
                 for t in trackers if (problem := t.health()) is not None), None)


def _liveness(trackers: list[RedeliveryTracker]) -> str | None:
    return next((f"{t.topics.name}: {problem}" if len(trackers) > 1 else problem
                 for t in list(trackers) if (problem := t.liveness()) is not None), None)


def _run_all(trackers: list[RedeliveryTracker]) -> None:
    """Runs each tracker's loop (one in this thread, the others in threads of their own) until all return; the
    first to end, stopped or failed, stops the others. Raises the first failure."""
    failures: list[BaseException] = []

    def loop(tracker: RedeliveryTracker) -> None:
        try:
            tracker.run()
        except BaseException as err:  # noqa: BLE001 - re-raised below, once every loop has ended
            failures.append(err)
        finally:
            for other in trackers:
                other.stop()

    threads = [threading.Thread(target=loop, args=(t,), name=f"kmq-tracker-{t.topics.name}", daemon=True)
               for t in trackers[1:]]
    for thread in threads:
        thread.start()
    loop(trackers[0])
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def watch_loop(trackers: Sequence[RedeliveryTracker], done: threading.Event, every_s: float = WATCH_EVERY_S,
               exit_process: Callable[[int], object] = os._exit) -> None:
    """A loop blocked in a call that does not return cannot stop itself: once one of ``trackers`` has not turned
    for LOOP_STALL_S this thread ends the process with one line, for its supervisor to restart it (the next owner
    of each markers partition rebuilds from the last commit: nothing is lost, copies not yet Ended may be made
    again)."""
    while not done.wait(every_s):
        stalled = next((problem for t in trackers if (problem := t.stalled()) is not None), None)
        if stalled is not None:
            log.error("tracker_fatal", error=f"{stalled}: exiting for a restart")
            print(f"kmq-redelivery-tracker: error: {stalled}: exiting for a restart", file=sys.stderr, flush=True)
            exit_process(EXIT_ERROR)
            return


def wait_for_topics(config: Config, topics: TopicSet, stop: threading.Event) -> bool:
    """Checks a set's topics (markers with LogAppendTime) before tracking; while the broker cannot be reached, says
    so every few seconds and tries again (a deployed tracker may start before its broker). False if stopped."""
    while not stop.is_set():
        started = time.monotonic()
        try:
            check_topics(config, topics, timeout_s=WAIT_FOR_BROKER_S)
            return True
        except (AuthenticationError, AuthorizationError):
            raise  # waiting changes nothing: the credentials or the ACLs must
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
        return run(config, args.topic_set)
    except KmqError as err:
        print(f"kmq-redelivery-tracker: error: {err}", file=sys.stderr)
        return EXIT_ERROR
