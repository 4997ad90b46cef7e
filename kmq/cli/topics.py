"""``kmq topics``: create or check the topics kmq needs."""

from __future__ import annotations

import argparse

from kmq.cli.options import COUNT, EXIT_ERROR, EXIT_OK, Command, Subparsers, subcommand
from kmq.cli.output import plural
from kmq.config import Config


def add_parsers(subs: Subparsers) -> dict[str, Command]:
    topics = subcommand(subs, "topics",
                        "Create or check the messages, markers (LogAppendTime) and dead-letter topics.",
                        "kmq topics create --partitions 12 --marker-partitions 3\n  kmq topics check")
    topics.add_argument("action", choices=["create", "check"])
    topics.add_argument("--partitions", type=COUNT, default=6, help="messages topic partitions (default 6)")
    topics.add_argument("--marker-partitions", type=COUNT, default=3, help="markers/DLQ partitions (default 3)")
    topics.add_argument("--replication-factor", type=COUNT, default=None,
                        help="default: from the cluster, 3 with three or more brokers (min.insync.replicas: one less)")
    topics.add_argument("--set", dest="topic_set", action="append", metavar="SET",
                        help="only this topic set's topics (repeatable; default: every set in the config)")
    topics.add_argument("--strict", action="store_true",
                        help="check: exit 1 when a topic is less durable than kmq needs (replication, min ISR, "
                             "unclean election, markers retention)")
    return {"topics": Command(cmd_topics)}


def cmd_topics(config: Config, args: argparse.Namespace) -> int:
    from kmq._kafka.topics import check_topics, create_topics, durability_warnings

    timeout_s = config.connect_timeout_ms / 1000
    sets = [config.topic_set(n) for n in args.topic_set] if args.topic_set else list(config.all_topic_sets)
    weak = []
    for topics in sets:
        if args.action == "create":
            for status in create_topics(config, topics, partitions=args.partitions,
                                        marker_partitions=args.marker_partitions,
                                        replication_factor=args.replication_factor, timeout_s=timeout_s):
                note = "" if status.partitions == status.requested else f"; {status.requested} requested, not changed"
                print(f"{status.name}: {'created' if status.created else 'exists'} "
                      f"({plural(status.partitions, 'partition')}{note}), "
                      f"replication factor {status.replication}, min.insync.replicas {status.min_insync}")
        else:
            for name, partitions in check_topics(config, topics, timeout_s=timeout_s, strict_retention=True).items():
                print(f"{name}: ok ({plural(partitions, 'partition')})")
        weak += durability_warnings(config, topics, timeout_s=timeout_s)
    for line in weak:
        print(f"warning: {line}")
    return EXIT_ERROR if weak and args.action == "check" and args.strict else EXIT_OK
