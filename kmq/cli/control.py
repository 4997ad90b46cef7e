"""``kmq pause``, ``kmq resume``, ``kmq purge``: operations on a whole queue, held in the control topic."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from kmq.cli.options import EXIT_OK, Command, Subparsers, iso_time, see_help, subcommand, time_ms
from kmq.config import Config
from kmq.wire import datetime_from_ms


def add_parsers(subs: Subparsers) -> dict[str, Command]:
    pause = subcommand(subs, "pause", "Stop a queue's consumers taking new messages (in-flight ones finish), until "
                                      "`kmq resume` or --until; held in Kafka, so it survives restarts.",
                       "kmq pause emails\n  kmq pause emails --until 2026-11-24T06:00")
    pause.add_argument("queue")
    pause.add_argument("--until", type=iso_time, metavar="TIME", help="resume by itself then (ISO 8601)")
    resume = subcommand(subs, "resume", "Let a paused queue's consumers take messages again.", "kmq resume emails")
    resume.add_argument("queue")
    purge = subcommand(subs, "purge", "Settle, without a handler, every message of a queue enqueued before a time "
                                      "(default now), in flight ones included; later messages are untouched.",
                       "kmq purge emails\n  kmq purge emails --before 2026-11-23T12:00")
    purge.add_argument("queue")
    purge.add_argument("--before", type=iso_time, metavar="TIME", help="default: now (ISO 8601)")
    return {"pause": Command(cmd_pause, pause_usage_error), "resume": Command(cmd_resume),
            "purge": Command(cmd_purge)}


def pause_usage_error(args: argparse.Namespace) -> str | None:
    if args.until is not None and args.until <= datetime.now(UTC):
        return see_help("pause", f"--until {args.until.isoformat()} is not in the future")
    return None


def cmd_pause(config: Config, args: argparse.Namespace) -> int:
    from kmq._kafka import control
    from kmq.wire import validate_queue_name

    control.pause(config, validate_queue_name(args.queue), time_ms(args.until))
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

    before = control.purge(config, validate_queue_name(args.queue), time_ms(args.before))
    when = datetime_from_ms(before).isoformat(timespec="milliseconds")
    print(f"purging {args.queue!r}: messages enqueued before {when} are settled without a handler as consumers "
          "and trackers reach them (`kmq stats` counts them as purged)")
    return EXIT_OK
