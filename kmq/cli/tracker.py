"""``kmq tracker``: a redelivery tracker replica."""

from __future__ import annotations

import argparse

from kmq import logs
from kmq.cli.options import PORT, Command, Subparsers, subcommand
from kmq.config import Config


def add_parsers(subs: Subparsers) -> dict[str, Command]:
    tracker = subcommand(subs, "tracker", "Run a redelivery tracker replica (same as kmq-redelivery-tracker): of "
                                          "every topic set in the config, or of the sets named, a group per set.",
                         "kmq tracker --metrics-port 9464\n  kmq tracker --set tenant-a")
    tracker.add_argument("--metrics-port", type=PORT, help="serve /metrics and /healthz on this port")
    tracker.add_argument("--set", dest="topic_set", action="append", metavar="SET",
                         help="track this topic set (repeatable; default: every set in the config)")
    return {"tracker": Command(cmd_tracker)}


def cmd_tracker(config: Config, args: argparse.Namespace) -> int:
    from kmq.redelivery.cli import run

    if args.metrics_port is not None:
        config = config.replace(metrics_port=args.metrics_port)
    if args.log_level == "warning":  # the tracker's info lines (assignments, redeliveries) are its audit trail
        logs.configure("info", args.log_json)
    return run(config, args.topic_set)
