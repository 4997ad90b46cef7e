"""``kmq stats``: per queue, its messages by state and its counters."""

from __future__ import annotations

import argparse
import dataclasses
import json

from kmq.cli.options import EXIT_OK, Command, Subparsers, subcommand
from kmq.cli.output import clear_progress, format_table, progress
from kmq.cli.preflight import warn_if_no_tracker
from kmq.config import Config

#: `kmq stats` columns: messages per state (kmq.wire.vocabulary), then counters; the rare states only when seen.
STATS_COLUMNS = ["queue", "paused", "waiting", "oldest_waiting_age_s", "in_flight", "oldest_in_flight_age_s", "delayed",
                 "overdue", "acked", "dead_lettered", "rejected", "expired", "deduplicated", "purged", "consumed",
                 "ended_by_go", "vanished", "delivered", "released", "returned", "redelivered"]
STATS_IF_ANY = {"paused", "deduplicated", "consumed", "ended_by_go", "vanished"}


def add_parsers(subs: Subparsers) -> dict[str, Command]:
    stats = subcommand(subs, "stats", "Per queue: waiting (on the topic, not yet read), in flight, their oldest "
                                      "ages, deliveries, acks, redeliveries, dead letters. Replays both topics in "
                                      "full.",
                       "kmq stats\n  kmq stats --json --queue emails")
    stats.add_argument("--queue", action="append", help="only these queues")
    stats.add_argument("--set", dest="topic_set", action="append", metavar="SET",
                       help="only these topic sets (default: every set; with --queue, the sets its messages may be "
                            "in)")
    stats.add_argument("--json", action="store_true")
    return {"stats": Command(cmd_stats)}


def cmd_stats(config: Config, args: argparse.Namespace) -> int:
    from kmq.ops.stats import collect, sets_to_read

    rows = collect(config, args.queue, progress, topic_sets=args.topic_set)
    clear_progress()
    for topics in sets_to_read(config, args.queue, args.topic_set):
        warn_if_no_tracker(config, topics)
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in rows], indent=2))
        return EXIT_OK
    columns = [c for c in STATS_COLUMNS if c not in STATS_IF_ANY or any(getattr(r, c) for r in rows)]
    if len(config.all_topic_sets) > 1:  # which set each row's messages are in (a moving queue has a row in each)
        columns.insert(1, "topic_set")
    table = [[str(getattr(r, c)) for c in columns] for r in rows]
    print(format_table(columns, table))
    return EXIT_OK
