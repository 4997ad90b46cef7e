"""The ``kmq`` command: topics, send, worker, tracker, stats and dead letters.

Every subcommand reads ``--config FILE`` (kmq or kafka-mq-go YAML keys) with ``KMQ_*`` environment overrides.
Exit codes: 0 success, 1 a runtime failure (broker, topic, handler import), 2 a usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

import structlog
from confluent_kafka import KafkaError, KafkaException

from kmq import _kafka, logs
from kmq.config import Config
from kmq.errors import ConfigError, KmqError
from kmq.wire import MessageId, datetime_from_ms, ms_from_datetime

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

EXAMPLES = {
    "topics": "kmq topics create --partitions 12 --marker-partitions 3\n  kmq topics check",
    "send": "kmq send emails '{\"to\": \"a@b.c\"}'\n  kmq send emails --file job.json\n"
            "  cat jobs.txt | kmq send emails --stdin\n  kmq send emails load-test --count 100000",
    "worker": "kmq worker examples.worker:handle --queue emails --concurrency 8",
    "tracker": "kmq tracker --metrics-port 9464",
    "stats": "kmq stats\n  kmq stats --json --queue emails",
    "dlq": "kmq dlq list emails --limit 20\n  kmq dlq redrive emails",
    "inspect": "kmq inspect emails 3:1042\n  kmq inspect emails 3:1042 --json",
    "pause": "kmq pause emails\n  kmq pause emails --until 2026-11-24T06:00",
    "resume": "kmq resume emails",
    "purge": "kmq purge emails\n  kmq purge emails --before 2026-11-23T12:00",
    "audit": "kmq audit --queue emails --from 2026-11-21T00:00 --out audit-out\n"
             "  kmq audit --master spark://spark-master:7077",
}


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error (exit 2), pointing at --help instead of printing the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _number(kind: type[int] | type[float], low: float, *, above: bool = False,
            high: float | None = None) -> Callable[[str], float]:
    """An argparse type: ``kind`` at least ``low`` (greater, with ``above``), at most ``high``."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") \
                from None
        if value < low or (above and value == low) or (high is not None and value > high):
            bound = f"> {low}" if above else f">= {low}"
            raise argparse.ArgumentTypeError(f"must be {bound}{f' and <= {high}' if high is not None else ''}, "
                                             f"got {text}")
        return value
    return parse


COUNT = _number(int, 1)
SECONDS = _number(float, 0)
PORT = _number(int, 0, high=65535)


def _message_id(text: str) -> MessageId:
    try:
        mid = MessageId.parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be PARTITION:OFFSET, got {text!r}") from None
    if mid.partition < 0 or mid.offset < 0:
        raise argparse.ArgumentTypeError(f"must be PARTITION:OFFSET, got {text!r}")
    return mid


def _iso_time(text: str) -> datetime:
    """An ISO 8601 time; UTC when it names no zone."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _log_level(text: str) -> str:
    if text.lower() not in logs.LEVELS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(logs.LEVELS)}, got {text!r}")
    return text.lower()


def _add_log_options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    # Accepted before and after the subcommand; the subcommand's only override what was given there.
    parser.add_argument("--log-level", type=_log_level,
                        default=os.environ.get("KMQ_LOG_LEVEL", "warning") if defaults else argparse.SUPPRESS,
                        help="debug, info, warning (default; $KMQ_LOG_LEVEL), error")
    parser.add_argument("--log-json", action="store_true", default=False if defaults else argparse.SUPPRESS,
                        help="JSON log lines instead of key=value")


def _sub(subs: argparse._SubParsersAction[_Parser], name: str, help_text: str) -> _Parser:
    parser = subs.add_parser(name, help=help_text, description=help_text, epilog=f"example:\n  {EXAMPLES[name]}",
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=os.environ.get("KMQ_CONFIG"),
                        help="YAML config file (default: $KMQ_CONFIG; KMQ_* variables override it)")
    _add_log_options(parser, defaults=False)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kmq", description="SQS-style queues on Apache Kafka.",
                     epilog="Run `kmq COMMAND --help` for a command's options and an example.")
    _add_log_options(parser, defaults=True)
    subs = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    parser.set_defaults(_subparsers=subs.choices)

    topics = _sub(subs, "topics", "Create or check the messages, markers (LogAppendTime) and dead-letter topics.")
    topics.add_argument("action", choices=["create", "check"])
    topics.add_argument("--partitions", type=COUNT, default=6, help="messages topic partitions (default 6)")
    topics.add_argument("--marker-partitions", type=COUNT, default=3, help="markers/DLQ partitions (default 3)")
    topics.add_argument("--replication-factor", type=COUNT, default=None,
                        help="default: from the cluster, 3 with three or more brokers (min.insync.replicas: one less)")
    topics.add_argument("--strict", action="store_true",
                        help="check: exit 1 when a topic is less durable than kmq needs (replication, min ISR, "
                             "unclean election, markers retention)")

    send = _sub(subs, "send", "Send messages to a queue: an argument, a file, or stdin lines.")
    send.add_argument("queue")
    send.add_argument("payload", nargs="?", help="the payload (UTF-8); or use --file / --stdin")
    send.add_argument("--file", type=Path, help="send this file's bytes as one message")
    send.add_argument("--stdin", action="store_true", help="send each stdin line as a message")
    send.add_argument("--count", type=COUNT, default=1, help="send the payload N times (load); '{i}' is replaced")
    send.add_argument("--header", action="append", default=[], metavar="K=V")
    send.add_argument("--delay", type=SECONDS, metavar="SECONDS",
                      help="no handler gets it before this many seconds")
    send.add_argument("--at", dest="deliver_at", type=_iso_time, metavar="TIME",
                      help="no handler gets it before TIME (ISO 8601, UTC if no zone)")
    send.add_argument("--ttl", type=_number(float, 0, above=True), metavar="SECONDS",
                      help="no handler gets it after this many seconds (it expires)")
    send.add_argument("--time-limit", type=_number(float, 0, above=True), metavar="SECONDS",
                      help="a handler may run this long on it (overrides the worker's --time-limit)")
    send.add_argument("--ids", action="store_true", help="print each message's id (PARTITION:OFFSET), one a line")

    worker = _sub(subs, "worker", "Run a handler over a queue: return → ack, kmq.Reject → reject, "
                                  "exception → retry with backoff, then dead letter after max deliveries.")
    worker.add_argument("handler", metavar="MODULE:FUNCTION")
    worker.add_argument("--queue", action="append", required=True, help="queue to serve (repeatable)")
    worker.add_argument("--concurrency", type=COUNT, default=1)
    worker.add_argument("--processes", action="store_true", help="run the handler in processes (CPU-bound work)")
    worker.add_argument("--backoff-base", type=SECONDS, default=1.0, help="seconds before the first retry")
    worker.add_argument("--backoff-max", type=SECONDS, default=300.0, help="longest retry delay in seconds")
    worker.add_argument("--drain-timeout", type=SECONDS, default=30.0,
                        help="seconds running handlers get to finish on SIGTERM (default 30)")
    worker.add_argument("--close-timeout", type=SECONDS, default=10.0,
                        help="then seconds to write the last markers and leave the group, even with the broker down "
                             "(default 10)")
    worker.add_argument("--time-limit", type=_number(float, 0, above=True), default=None, metavar="SECONDS",
                        help="stop a handler run after this long and release its message (a failed delivery)")
    worker.add_argument("--metrics-port", type=PORT, help="serve /metrics and /healthz on this port")

    tracker = _sub(subs, "tracker", "Run a redelivery tracker replica (same as kmq-redelivery-tracker).")
    tracker.add_argument("--metrics-port", type=PORT, help="serve /metrics and /healthz on this port")

    stats = _sub(subs, "stats", "Per queue: waiting (on the topic, not yet read), in flight, their oldest ages, "
                                "deliveries, acks, redeliveries, dead letters. Replays both topics in full.")
    stats.add_argument("--queue", action="append", help="only these queues")
    stats.add_argument("--json", action="store_true")

    dlq = _sub(subs, "dlq", "List a queue's dead letters, or move them back onto the queue.")
    dlq.add_argument("action", choices=["list", "redrive"])
    dlq.add_argument("queue")
    dlq.add_argument("--limit", type=COUNT, default=None)
    dlq.add_argument("--json", action="store_true", help="one JSON object a letter (list)")
    dlq.add_argument("--all", action="store_true", help="list: also the letters an earlier redrive moved (marked)")

    pause = _sub(subs, "pause", "Stop a queue's consumers taking new messages (in-flight ones finish), until "
                                "`kmq resume` or --until; held in Kafka, so it survives restarts.")
    pause.add_argument("queue")
    pause.add_argument("--until", type=_iso_time, metavar="TIME", help="resume by itself then (ISO 8601)")
    resume = _sub(subs, "resume", "Let a paused queue's consumers take messages again.")
    resume.add_argument("queue")
    purge = _sub(subs, "purge", "Settle, without a handler, every message of a queue enqueued before a time "
                                "(default now), in flight ones included; later messages are untouched.")
    purge.add_argument("queue")
    purge.add_argument("--before", type=_iso_time, metavar="TIME", help="default: now (ISO 8601)")

    inspect = _sub(subs, "inspect", "One message's life: enqueued, each delivery (who, when, delivery count), "
                                    "keep-alives, releases, copies, rejects, dead letter, and its state now.")
    inspect.add_argument("queue")
    inspect.add_argument("message_id", type=_message_id, metavar="PARTITION:OFFSET")
    inspect.add_argument("--json", action="store_true")

    audit = _sub(subs, "audit", "Spark job: every message's lifecycle per queue; lost, processed twice, slow, "
                                "dead-lettered (needs kmq[spark]).")
    audit.add_argument("--queue", action="append", default=[], help="only these queues")
    audit.add_argument("--from", dest="from_time", type=_iso_time,
                       help="enqueued at or after (ISO 8601, UTC if no zone)")
    audit.add_argument("--to", dest="to_time", type=_iso_time, help="enqueued before (ISO 8601)")
    audit.add_argument("--master", help="Spark master (default local[2]; under spark-submit, spark-submit's)")
    audit.add_argument("--out", default="audit-out", help="directory for Parquet, summary.json and audit.png")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the subcommand's parser, so the line names it: "kmq send: error: …"
        args._subparsers[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    logs.configure(args.log_level, args.log_json)
    usage = _usage_error(args)
    if usage is not None:
        parser.exit(EXIT_USAGE, f"kmq {args.command}: error: {usage} (see kmq {args.command} --help)\n")
    if args.command == "worker" and args.backoff_max < args.backoff_base:
        parser.exit(EXIT_USAGE, f"kmq worker: error: --backoff-max ({args.backoff_max}) is below --backoff-base "
                                f"({args.backoff_base})\n")
    try:
        config = Config.from_yaml(args.config) if args.config else Config.load()
        code = COMMANDS[args.command](config, args)
        sys.stdout.flush()  # here, so a closed pipe is reported below and not at interpreter exit
        return code
    except ConfigError as err:  # a setting the user gave (file, variable or option): a usage error
        return _fail(args, str(err), EXIT_USAGE)
    except KmqError as err:
        return _fail(args, str(err))
    except KafkaException as exc:  # e.g. an unknown librdkafka property under `kafka:` (a usage error)
        error = _kafka.to_kmq_error(exc, "Kafka client")
        return _fail(args, str(error), EXIT_USAGE if error.code == KafkaError._INVALID_ARG else EXIT_ERROR)
    except BrokenPipeError:
        # The reader went away (`kmq … | head`): nothing more can be printed there.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _fail(args, "output closed before it was all written (broken pipe)")
    except KeyboardInterrupt:
        return EXIT_ERROR


def _usage_error(args: argparse.Namespace) -> str | None:
    """Option combinations argparse cannot check."""
    if args.command == "send":
        given = [name for name, on in (("PAYLOAD", args.payload is not None), ("--file", args.file is not None),
                                       ("--stdin", args.stdin)) if on]
        if not given:
            return "nothing to send: give a PAYLOAD, --file or --stdin"
        if len(given) > 1:
            return f"give one of PAYLOAD, --file and --stdin, not {' and '.join(given)}"
        if args.delay is not None and args.deliver_at is not None:
            return "give --delay or --at, not both"
    if args.command == "pause" and args.until is not None and args.until <= datetime.now(UTC):
        return f"--until {args.until.isoformat()} is not in the future"
    return None


def _fail(args: argparse.Namespace, message: str, code: int = EXIT_ERROR) -> int:
    """The one line a failed command prints: plain, or a JSON object with ``--log-json`` (all of stderr is then
    JSON lines)."""
    if args.log_json:
        print(json.dumps({"level": "error", "event": "command_failed", "command": args.command, "error": message,
                          "exit_code": code}), file=sys.stderr)
    else:
        print(f"kmq {args.command}: error: {message}", file=sys.stderr)
    return code


def cmd_topics(config: Config, args: argparse.Namespace) -> int:
    from kmq._kafka.topics import check_topics, create_topics, durability_warnings

    timeout_s = config.connect_timeout_ms / 1000
    if args.action == "create":
        for status in create_topics(config, partitions=args.partitions, marker_partitions=args.marker_partitions,
                                    replication_factor=args.replication_factor, timeout_s=timeout_s):
            note = "" if status.partitions == status.requested else f"; {status.requested} requested, not changed"
            print(f"{status.name}: {'created' if status.created else 'exists'} "
                  f"({plural(status.partitions, 'partition')}{note}), "
                  f"replication factor {status.replication}, min.insync.replicas {status.min_insync}")
    else:
        for name, partitions in check_topics(config, timeout_s=timeout_s, strict_retention=True).items():
            print(f"{name}: ok ({plural(partitions, 'partition')})")
    weak = durability_warnings(config, timeout_s=timeout_s)
    for line in weak:
        print(f"warning: {line}")
    return EXIT_ERROR if weak and args.action == "check" and args.strict else EXIT_OK


def _payloads(args: argparse.Namespace, skipped: list[int]) -> Iterator[bytes]:
    if args.stdin:
        for line in sys.stdin.buffer:
            payload = line.rstrip(b"\r\n")
            if payload.strip():
                yield payload
            else:  # a blank line is a separator, not an empty job
                skipped[0] += 1
    elif args.file is not None:
        try:
            data = args.file.read_bytes()
        except OSError as err:
            raise KmqError(f"cannot read {args.file}: {err.strerror}") from err
        for _ in range(args.count):
            yield data
    elif args.payload is not None:
        for i in range(args.count):
            yield args.payload.replace("{i}", str(i)).encode()


def cmd_send(config: Config, args: argparse.Namespace) -> int:
    from kmq._kafka.topics import check_topics
    from kmq.service import Service
    from kmq.wire import validate_queue_name

    validate_queue_name(args.queue)
    check_topics(config, timeout_s=config.connect_timeout_ms / 1000)  # fail fast, naming the broker or topic
    headers = {}
    for item in args.header:
        key, sep, value = item.partition("=")
        if not sep:
            raise KmqError(f"--header must be K=V, got {item!r}")
        headers[key] = value
    sent, started, last_report, skipped = 0, time.monotonic(), 0.0, [0]
    deliveries = []
    with Service(config).queue(args.queue).producer() as producer:
        for payload in _payloads(args, skipped):
            deliveries.append(producer.send_async(payload, headers or None, delay=args.delay,
                                                  deliver_at=args.deliver_at, ttl=args.ttl,
                                                  time_limit=args.time_limit))
            sent += 1
            if args.count > 1000 and time.monotonic() - last_report > 0.5 and sys.stderr.isatty():
                last_report = time.monotonic()
                print(f"\rsent {sent}/{args.count} ({sent / args.count:.0%})", end="", file=sys.stderr)
        if producer.flush(60):
            raise KmqError("some messages were not delivered within 60 s")
    seconds = time.monotonic() - started
    ids = [str(d.result(0)) for d in deliveries]
    if args.ids:
        print("\n".join(ids))
    which = f" (id {ids[0]})" if len(ids) == 1 else ""
    blank = f"; {plural(skipped[0], 'blank line')} skipped" if skipped[0] else ""
    summary = (f"sent {plural(sent, 'message')}{which} to {args.queue!r} in {seconds:.2f}s "
               f"({sent / max(seconds, 1e-9):.0f} msgs/s){blank}")
    print(summary, file=sys.stderr if args.ids else sys.stdout)
    return EXIT_OK


def cmd_worker(config: Config, args: argparse.Namespace) -> int:
    from kmq.wire import validate_queue_name
    from kmq.worker import Backoff, Worker, load_handler

    # Like celery and dramatiq: handler modules resolve from the directory the command runs in.
    sys.path.insert(0, os.getcwd())
    handler = load_handler(args.handler)
    _warn_if_no_tracker(config)
    if args.metrics_port is not None:
        config = config.replace(metrics_port=args.metrics_port)
    worker = Worker(config, [validate_queue_name(q) for q in args.queue], handler, args.concurrency,
                    processes=args.processes, handler_spec=args.handler,
                    backoff=Backoff(base_s=args.backoff_base, max_s=args.backoff_max),
                    drain_timeout_s=args.drain_timeout, close_timeout_s=args.close_timeout,
                    time_limit_s=args.time_limit)
    try:
        worker.run()
    finally:
        print(json.dumps(dict(worker.counts)))  # what was done, also when the end was not clean
    return EXIT_OK


def cmd_tracker(config: Config, args: argparse.Namespace) -> int:
    from kmq.redelivery.cli import run

    if args.metrics_port is not None:
        config = config.replace(metrics_port=args.metrics_port)
    if args.log_level == "warning":  # the tracker's info lines (assignments, redeliveries) are its audit trail
        logs.configure("info", args.log_json)
    return run(config)


def cmd_stats(config: Config, args: argparse.Namespace) -> int:
    from kmq.ops.stats import collect

    rows = collect(config, args.queue, _progress)
    if sys.stderr.isatty():
        print("\r\033[K", end="", file=sys.stderr)  # clears the progress line
    _warn_if_no_tracker(config)
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in rows], indent=2))
        return EXIT_OK
    columns = [c for c in STATS_COLUMNS if c not in STATS_IF_ANY or any(getattr(r, c) for r in rows)]
    table = [[str(getattr(r, c)) for c in columns] for r in rows]
    print(format_table(columns, table))
    return EXIT_OK


def _warn_if_no_tracker(config: Config) -> None:
    """Without a tracker nothing comes back: not a release, not what a crashed worker held. Said on stderr."""
    from kmq._kafka.offsets import group_members

    if group_members(config, config.tracker_group) == 0:
        structlog.get_logger("kmq.cli").warning(
            "no_redelivery_tracker", group=config.tracker_group,
            note="released messages and those of crashed workers will not come back until a tracker runs "
                 "(kmq tracker)")


#: `kmq stats` columns: messages per state (kmq.wire.vocabulary), then counters; the rare states only when seen.
STATS_COLUMNS = ["queue", "paused", "waiting", "oldest_waiting_age_s", "in_flight", "oldest_in_flight_age_s", "delayed",
                 "overdue", "acked", "dead_lettered", "rejected", "expired", "purged", "consumed", "ended_by_go",
                 "vanished", "delivered", "released", "returned", "redelivered"]
STATS_IF_ANY = {"paused", "consumed", "ended_by_go", "vanished"}


_last_progress = [0.0]


def _progress(topic: str, done: int, total: int) -> None:
    """Long replays say how far they are: on a terminal every second, in a log every 10 s."""
    if sys.stderr.isatty():
        print(f"\rreading {topic}: {done:,}/{total:,} ({done / max(total, 1):.0%})", end="", file=sys.stderr)
    elif time.monotonic() - _last_progress[0] >= 10:
        _last_progress[0] = time.monotonic()
        print(f"reading {topic}: {done:,}/{total:,} records ({done / max(total, 1):.0%})", file=sys.stderr)


def cmd_dlq(config: Config, args: argparse.Namespace) -> int:
    from kmq.ops.dlq import list_dead_letters, redrive

    if args.action == "redrive":
        print(f"redrove {plural(redrive(config, args.queue, args.limit), 'message')} onto {args.queue!r}")
        return EXIT_OK
    letters = list_dead_letters(config, args.queue, args.limit, include_redriven=args.all)
    if args.json:
        print(json.dumps([letter.as_dict() for letter in letters], indent=2))
        return EXIT_OK
    rows = [[str(d.dlq_id), d.first_message_id, str(d.delivery_count), _printable(d.reason, 60),
             _printable(d.payload.decode("utf-8", "replace"), 40), *(["yes" if d.redriven else ""] if args.all else [])]
            for d in letters]
    print(format_table(["dlq_id", "first_id", "deliveries", "reason", "payload",
                        *(["redriven"] if args.all else [])], rows))
    waiting = sum(not d.redriven for d in letters)
    limited = " (--limit reached: there may be more)" if args.limit is not None and len(letters) >= args.limit else ""
    print(f"{plural(waiting, 'dead letter')} waiting in {config.dlq_topic!r}{limited}", file=sys.stderr)
    return EXIT_OK


def _printable(text: str, width: int) -> str:
    """One table cell: control characters (newlines, tabs) escaped, cut to ``width``."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return shown if len(shown) <= width else shown[:width - 1] + "…"


def cmd_pause(config: Config, args: argparse.Namespace) -> int:
    from kmq._kafka import control
    from kmq.wire import validate_queue_name

    control.pause(config, validate_queue_name(args.queue), _time_ms(args.until))
    print(f"paused {args.queue!r}" + (f" until {args.until.isoformat()}" if args.until else " until resumed"))
    return EXIT_OK


def cmd_resume(config: Config, args: argparse.Namespace) -> int:
    from kmq._kafka import control
    from kmq.wire import validate_queue_name

    control.resume(config, validate_queue_name(args.queue))
    print(f"resumed {args.queue!r}")
    return EXIT_OK


def cmd_purge(config: Config, args: argparse.Namespace) -> int:
    from kmq._kafka import control
    from kmq.wire import validate_queue_name

    before = control.purge(config, validate_queue_name(args.queue), _time_ms(args.before))
    when = datetime_from_ms(before).isoformat(timespec="milliseconds")
    print(f"purging {args.queue!r}: messages enqueued before {when} are settled without a handler as consumers "
          "and trackers reach them (`kmq stats` counts them as purged)")
    return EXIT_OK


def cmd_inspect(config: Config, args: argparse.Namespace) -> int:
    from kmq.ops.inspect import inspect_message
    from kmq.wire import validate_queue_name

    life = inspect_message(config, validate_queue_name(args.queue), args.message_id)
    if args.json:
        print(json.dumps(life.as_dict(), indent=2))
        return EXIT_OK
    headers = " ".join(f"{k}={_printable(v, 40)}" for k, v in life.headers.items()) or "none"
    print(f"message {life.first_message_id} of queue {life.queue!r}: {plural(life.payload_bytes, 'byte')}, "
          f"headers {headers}")
    for event in life.events:
        when = datetime_from_ms(event.at_ms).isoformat(timespec="milliseconds")
        detail = "  ".join(f"{k}={_printable(str(v), 60)}" for k, v in event.detail.items())
        print(f"{when}  {event.what:<13} {event.message_id:<12} {detail}".rstrip())
    print(f"state: {life.state}: {life.summary}" + (f" (held by {life.holder})" if life.holder else ""))
    return EXIT_OK


def _time_ms(moment: datetime | None) -> int | None:
    return None if moment is None else ms_from_datetime(moment)


#: `kmq audit` columns: produced and counters, messages per state (kmq.wire.vocabulary), lost, the duplicates.
AUDIT_COLUMNS = ["produced", "delivered", "released", "returned", "redelivered", "acked", "dead_lettered", "rejected",
                 "expired", "purged", "in_flight", "delayed", "waiting", "consumed", "lost",
                 "delivered_more_than_once", "acked_more_than_once"]


def cmd_audit(config: Config, args: argparse.Namespace) -> int:
    try:
        from kmq.ops.audit.job import AuditOptions, run
    except ImportError as err:
        raise KmqError(f"kmq audit needs the spark extra: pip install 'kmq[spark]' ({err})") from err
    # Under spark-submit the session exists already, with the master it was given.
    master = args.master or ("" if "PYSPARK_GATEWAY_PORT" in os.environ else "local[2]")
    options = AuditOptions(queues=tuple(args.queue), from_ms=_time_ms(args.from_time), to_ms=_time_ms(args.to_time),
                           master=master, out_dir=Path(args.out))
    result = run(config, options)
    rows = []
    for name, data in sorted(result["queues"].items()):
        if "produced" not in data:
            continue  # only messages from before the window
        rows.append([name, *(f"{data.get(c, 0):,}" for c in AUDIT_COLUMNS),
                     _p50_p99(data.get("wait_ms_p50_p95_p99")), _p50_p99(data.get("processing_ms_p50_p95_p99"))])
    print(format_table(["queue", *AUDIT_COLUMNS, "wait ms p50/p99", "processing ms p50/p99"], rows))
    before = sum(d.get("before_window", 0) for d in result["queues"].values())
    if result["window"] is not None:
        print(f"{before:,} message(s) enqueued before the window had markers in it (not counted above)")
    read = result["topics"]
    print(f"read {sum(t.get('records', 0) for t in read.values()):,} records, "
          f"{sum(t.get('bytes', 0) or 0 for t in read.values()) / 1e6:,.1f} MB; "
          f"malformed markers: {result['malformed_markers']}; results in {args.out}")
    return EXIT_OK


def plural(count: int, noun: str) -> str:
    """``1 message``, ``2 messages``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _p50_p99(values: list[float] | None) -> str:
    if not values or values[0] is None:
        return "-"
    return f"{values[0]:,.0f}/{values[2]:,.0f}"


def format_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


COMMANDS = {"topics": cmd_topics, "send": cmd_send, "worker": cmd_worker, "tracker": cmd_tracker,
            "stats": cmd_stats, "dlq": cmd_dlq, "inspect": cmd_inspect, "pause": cmd_pause,
            "resume": cmd_resume, "purge": cmd_purge, "audit": cmd_audit}

if __name__ == "__main__":
    sys.exit(main())
