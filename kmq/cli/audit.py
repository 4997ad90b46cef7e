"""``kmq audit``: the Spark job over both topics."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from kmq.cli.options import EXIT_OK, Command, Subparsers, iso_time, subcommand, time_ms
from kmq.cli.output import format_table
from kmq.config import Config
from kmq.errors import KmqError

#: `kmq audit` prints three narrow tables (one of 20 columns was ~300 characters wide): what became of the messages
#: (produced, each state: kmq.wire.vocabulary, lost), what happened to them (counters, the duplicates), and how long
#: they waited and ran. A column of a rare state or counter is shown only when a queue has some.
STATE_COLUMNS = ["produced", "acked", "dead_lettered", "expired", "deduplicated", "purged", "in_flight", "delayed",
                 "waiting", "consumed", "lost"]
EVENT_COLUMNS = ["delivered", "released", "returned", "redelivered", "rejected", "delivered_more_than_once",
                 "acked_more_than_once"]
SHOWN_IF_ANY = {"expired", "deduplicated", "purged", "delayed", "consumed", "returned"}


def add_parsers(subs: Subparsers) -> dict[str, Command]:
    audit = subcommand(subs, "audit", "Spark job: every message's lifecycle per queue; lost, processed twice, slow, "
                                      "dead-lettered (needs kmq[spark]).",
                       "kmq audit --queue emails --from 2026-11-21T00:00 --out audit-out\n"
                       "  kmq audit --master spark://spark-master:7077")
    audit.add_argument("--queue", action="append", default=[], help="only these queues")
    audit.add_argument("--from", dest="from_time", type=iso_time,
                       help="enqueued at or after (ISO 8601, UTC if no zone)")
    audit.add_argument("--to", dest="to_time", type=iso_time, help="enqueued before (ISO 8601)")
    audit.add_argument("--master", help="Spark master (default local[2]; under spark-submit, spark-submit's)")
    audit.add_argument("--out", default="audit-out", help="directory for Parquet, summary.json and audit.png")
    audit.add_argument("--set", dest="topic_set", metavar="SET",
                       help="the topic set to audit (default: the one the --queue queues live in, else the default "
                            "set)")
    return {"audit": Command(cmd_audit)}


def cmd_audit(config: Config, args: argparse.Namespace) -> int:
    try:
        from kmq.ops.audit.job import AuditOptions, run
    except ImportError as err:
        raise KmqError(f"kmq audit needs the spark extra: pip install 'kmq[spark]' ({err})") from err
    # Under spark-submit the session exists already, with the master it was given.
    master = args.master or ("" if "PYSPARK_GATEWAY_PORT" in os.environ else "local[2]")
    options = AuditOptions(queues=tuple(args.queue), from_ms=time_ms(args.from_time), to_ms=time_ms(args.to_time),
                           master=master, out_dir=Path(args.out), topic_set=args.topic_set)
    result = run(config, options)
    # Only messages from before the window: not in the tables.
    queues = {name: data for name, data in sorted(result["queues"].items()) if "produced" in data}
    for title, columns in (("messages, by what became of them", STATE_COLUMNS),
                           ("events", EVENT_COLUMNS)):
        shown = [c for c in columns if c not in SHOWN_IF_ANY or any(d.get(c, 0) for d in queues.values())]
        print(f"{title}:")
        print(format_table(["queue", *shown], [[name, *(f"{d.get(c, 0):,}" for c in shown)]
                                               for name, d in queues.items()]))
        print()
    print("time (ms):")
    print(format_table(["queue", "wait p50/p95/p99", "processing p50/p95/p99"],
                       [[name, _percentiles(d.get("wait_ms_p50_p95_p99")),
                         _percentiles(d.get("processing_ms_p50_p95_p99"))] for name, d in queues.items()]))
    before = sum(d.get("before_window", 0) for d in result["queues"].values())
    if result["window"] is not None:
        print(f"{before:,} message(s) enqueued before the window had markers in it (not counted above)")
    read = result["topics"]
    print(f"read {sum(t.get('records', 0) for t in read.values()):,} records, "
          f"{sum(t.get('bytes', 0) or 0 for t in read.values()) / 1e6:,.1f} MB; "
          f"malformed markers: {result['malformed_markers']}; results in {args.out}")
    return EXIT_OK


def _percentiles(values: list[float] | None) -> str:
    if not values or values[0] is None:
        return "-"
    return "/".join(f"{v:,.0f}" for v in values)
