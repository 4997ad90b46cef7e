"""``kmq inspect``: one message's life."""

from __future__ import annotations

import argparse
import json

from kmq.cli.options import EXIT_OK, Command, Subparsers, message_id, subcommand
from kmq.cli.output import plural, printable
from kmq.config import Config
from kmq.wire import datetime_from_ms


def add_parsers(subs: Subparsers) -> dict[str, Command]:
    inspect = subcommand(subs, "inspect", "One message's life: enqueued, each delivery (who, when, delivery count), "
                                          "keep-alives, releases, copies, rejects, dead letter, and its state now.",
                         "kmq inspect emails 3:1042\n  kmq inspect emails 3:1042 --json")
    inspect.add_argument("queue")
    inspect.add_argument("message_id", type=message_id, metavar="PARTITION:OFFSET")
    inspect.add_argument("--json", action="store_true")
    inspect.add_argument("--set", dest="topic_set", metavar="SET",
                         help="the topic set to look in (default: the one the queue lives in)")
    return {"inspect": Command(cmd_inspect)}


def cmd_inspect(config: Config, args: argparse.Namespace) -> int:
    from kmq.ops.inspect import inspect_message
    from kmq.wire import validate_queue_name

    life = inspect_message(config, validate_queue_name(args.queue), args.message_id, topic_set=args.topic_set)
    if args.json:
        print(json.dumps(life.as_dict(), indent=2))
        return EXIT_OK
    headers = " ".join(f"{k}={printable(v, 40)}" for k, v in life.headers.items()) or "none"
    print(f"message {life.first_message_id} of queue {life.queue!r}: {plural(life.payload_bytes, 'byte')}, "
          f"headers {headers}")
    for event in life.events:
        when = datetime_from_ms(event.at_ms).isoformat(timespec="milliseconds")
        detail = "  ".join(f"{k}={printable(str(v), 60)}" for k, v in event.detail.items())
        print(f"{when}  {event.what:<13} {event.message_id:<12} {detail}".rstrip())
    print(f"state: {life.state}: {life.summary}" + (f" (held by {life.holder})" if life.holder else ""))
    return EXIT_OK
