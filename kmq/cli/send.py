"""``kmq send``: messages onto a queue, from an argument, a file or stdin lines."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from kmq.cli.options import (
    COUNT,
    EXIT_OK,
    SECONDS,
    Command,
    Subparsers,
    header,
    iso_time,
    number,
    see_help,
    subcommand,
)
from kmq.cli.output import plural
from kmq.config import Config
from kmq.errors import KmqError


def add_parsers(subs: Subparsers) -> dict[str, Command]:
    send = subcommand(subs, "send", "Send messages to a queue: an argument, a file, or stdin lines.",
                      "kmq send emails '{\"to\": \"a@b.c\"}'\n  kmq send emails --file job.json\n"
                      "  cat jobs.txt | kmq send emails --stdin\n  kmq send emails load-test --count 100000")
    send.add_argument("queue")
    send.add_argument("payload", nargs="?", help="the payload (UTF-8); or use --file / --stdin")
    send.add_argument("--file", type=Path, help="send this file's bytes as one message")
    send.add_argument("--stdin", action="store_true", help="send each stdin line as a message")
    send.add_argument("--count", type=COUNT, default=1, help="send the payload N times (load); '{i}' is replaced")
    send.add_argument("--header", action="append", default=[], type=header, metavar="K=V")
    send.add_argument("--delay", type=SECONDS, metavar="SECONDS",
                      help="no handler gets it before this many seconds")
    send.add_argument("--at", dest="deliver_at", type=iso_time, metavar="TIME",
                      help="no handler gets it before TIME (ISO 8601, UTC if no zone)")
    send.add_argument("--ttl", type=number(float, 0, above=True), metavar="SECONDS",
                      help="no handler gets it after this many seconds (it expires)")
    send.add_argument("--time-limit", type=number(float, 0, above=True), metavar="SECONDS",
                      help="a handler may run this long on it (overrides the worker's --time-limit)")
    send.add_argument("--dedup-id", metavar="ID",
                      help="deduplication id: a send of an id the queue saw within dedup_window_ms is never handed "
                           "out; with --count or --stdin, '{i}' is replaced by the message's index")
    send.add_argument("--ids", action="store_true", help="print each message's id (PARTITION:OFFSET), one a line")
    return {"send": Command(cmd_send, usage_error)}


def usage_error(args: argparse.Namespace) -> str | None:
    given = [name for name, on in (("PAYLOAD", args.payload is not None), ("--file", args.file is not None),
                                   ("--stdin", args.stdin)) if on]
    if not given:
        return see_help("send", "nothing to send: give a PAYLOAD, --file or --stdin")
    if len(given) > 1:
        return see_help("send", f"give one of PAYLOAD, --file and --stdin, not {' and '.join(given)}")
    if args.delay is not None and args.deliver_at is not None:
        return see_help("send", "give --delay or --at, not both")
    if args.dedup_id is not None and (args.count > 1 or args.stdin) and "{i}" not in args.dedup_id:
        return see_help("send", "--dedup-id without '{i}' gives every message one id: all but the first would be "
                                "dropped as duplicates")
    return None


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
    # Fail fast, naming the broker or topic.
    check_topics(config, config.topics_for(args.queue), timeout_s=config.connect_timeout_ms / 1000)
    headers = dict(args.header)
    sent, started, last_report, skipped = 0, time.monotonic(), 0.0, [0]
    deliveries = []
    with Service(config).queue(args.queue).producer() as producer:
        for i, payload in enumerate(_payloads(args, skipped)):
            dedup_id = None if args.dedup_id is None else args.dedup_id.replace("{i}", str(i))
            deliveries.append(producer.send_async(payload, headers or None, delay=args.delay,
                                                  deliver_at=args.deliver_at, ttl=args.ttl,
                                                  time_limit=args.time_limit, dedup_id=dedup_id))
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
