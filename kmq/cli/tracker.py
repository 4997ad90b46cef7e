"""``kmq tracker``: a redelivery tracker replica."""

from __future__ import annotations

import argparse

from kmq import logs
from kmq.cli.options import PORT, Command, Subparsers, subcommand
from kmq.config import Config


def add_parsers(subs: Subparsers) -> dict[str, Command]:
    tracker = subcommand(subs, "tracker", "Run a redelivery tracker replica (same as kmq-redelivery-tracker).",
                         "kmq tracker --metrics-port 9464")
    tracker.add_argument("--metrics-port", type=PORT, help="serve /metrics and /healthz on this port")
    return {"tracker": Command(cmd_tracker)}


def cmd_tracker(config: Config, args: argparse.Namespace) -> int:
    from kmq.redelivery.cli import run

    if args.metrics_port is not None:
        config = config.replace(metrics_port=args.metrics_port)
    if args.log_level == "warning":  # the tracker's info lines (assignments, redeliveries) are its audit trail
        logs.configure("info", args.log_json)
    return run(config)
