"""``kmq dlq``: a queue's dead letters, listed or moved back onto the queue."""

from __future__ import annotations

import argparse
import json
import sys

from kmq.cli.options import COUNT, EXIT_OK, Command, Subparsers, subcommand
from kmq.cli.output import format_table, plural, printable
from kmq.config import Config


def add_parsers(subs: Subparsers) -> dict[str, Command]:
    dlq = subcommand(subs, "dlq", "List a queue's dead letters, or move them back onto the queue.",
                     "kmq dlq list emails --limit 20\n  kmq dlq redrive emails")
    dlq.add_argument("action", choices=["list", "redrive"])
    dlq.add_argument("queue")
    dlq.add_argument("--limit", type=COUNT, default=None)
    dlq.add_argument("--json", action="store_true", help="one JSON object a letter (list)")
    dlq.add_argument("--all", action="store_true", help="list: also the letters an earlier redrive moved (marked)")
    dlq.add_argument("--set", dest="topic_set", metavar="SET",
                     help="only this topic set's dead-letter topic (default: every set the queue's messages may be "
                          "in: its own, and while it moves, the one it moves from)")
    return {"dlq": Command(cmd_dlq)}


def cmd_dlq(config: Config, args: argparse.Namespace) -> int:
    from kmq.ops.dlq import list_dead_letters, redrive

    if args.action == "redrive":
        moved = redrive(config, args.queue, args.limit, topic_set=args.topic_set)
        print(f"redrove {plural(moved, 'message')} onto {args.queue!r}")
        return EXIT_OK
    letters = list_dead_letters(config, args.queue, args.limit, include_redriven=args.all, topic_set=args.topic_set)
    sets = [config.topic_set(args.topic_set)] if args.topic_set else list(config.reading_sets(args.queue))
    by_set = len(sets) > 1
    if args.json:
        print(json.dumps([letter.as_dict() for letter in letters], indent=2))
        return EXIT_OK
    rows = [[*([d.topic_set] if by_set else []), str(d.dlq_id), d.first_message_id, str(d.delivery_count),
             printable(d.reason, 60), printable(d.payload.decode("utf-8", "replace"), 40),
             *(["yes" if d.redriven else ""] if args.all else [])]
            for d in letters]
    print(format_table([*(["set"] if by_set else []), "dlq_id", "first_id", "deliveries", "reason", "payload",
                        *(["redriven"] if args.all else [])], rows))
    waiting = sum(not d.redriven for d in letters)
    limited = " (--limit reached: there may be more)" if args.limit is not None and len(letters) >= args.limit else ""
    where = ", ".join(repr(s.dead_letters) for s in sets)
    print(f"{plural(waiting, 'dead letter')} waiting in {where}{limited}", file=sys.stderr)
    return EXIT_OK
