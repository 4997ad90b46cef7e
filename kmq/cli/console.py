"""``kmq console``: the web console (kmq.console, the ``kmq[console]`` extra)."""

from __future__ import annotations

import argparse

from kmq import logs
from kmq.cli.options import Command, Subparsers, subcommand
from kmq.config import Config


def add_parsers(subs: Subparsers) -> dict[str, Command]:
    from kmq.console.command import add_arguments  # argparse only: the web libraries load when it serves

    console = subcommand(subs, "console", "Serve the web console: queues, messages, dead letters, workers and "
                                          "trackers; pause, purge and redrive for operators (same as kmq-console).",
                         "kmq console --users users.yaml")
    add_arguments(console)
    return {"console": Command(cmd_console)}


def cmd_console(config: Config, args: argparse.Namespace) -> int:
    from kmq.console.command import run

    if args.log_level == "warning":  # its action lines (who paused, purged, redrove what) are its audit trail
        logs.configure("info", args.log_json)
    return run(config, args)
