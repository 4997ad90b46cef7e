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
    return {"dlq": Command(cmd_dlq)}


def cmd_dlq(config: Config, args: argparse.Namespace) -> int:
    from kmq.ops.dlq import list_dead_letters, redrive

    if args.action == "redrive":
        print(f"redrove {plural(redrive(config, args.queue, args.limit), 'message')} onto {args.queue!r}")
        return EXIT_OK
    letters = list_dead_letters(config, args.queue, args.limit, include_redriven=args.all)
    if args.json:
        print(json.dumps([letter.as_dict() for letter in letters], indent=2))
        return EXIT_OK
    rows = [[str(d.dlq_id), d.first_message_id, str(d.delivery_count), printable(d.reason, 60),
             printable(d.payload.decode("utf-8", "replace"), 40), *(["yes" if d.redriven else ""] if args.all else [])]
            for d in letters]
    print(format_table(["dlq_id", "first_id", "deliveries", "reason", "payload",
                        *(["redriven"] if args.all else [])], rows))
    waiting = sum(not d.redriven for d in letters)
    limited = " (--limit reached: there may be more)" if args.limit is not None and len(letters) >= args.limit else ""
    print(f"{plural(waiting, 'dead letter')} waiting in {config.dlq_topic!r}{limited}", file=sys.stderr)
    return EXIT_OK
