"""``kmq schedule``: recurring sends, kept on the control topic and fired by the tracker group."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from kmq.cli.options import EXIT_OK, Command, Parser, Subparsers, header, see_help, subcommand
from kmq.cli.output import format_table, printable
from kmq.config import Config
from kmq.errors import KmqError
from kmq.wire import datetime_from_ms

if TYPE_CHECKING:
    from kmq.ops.schedules import Schedules

class _Intermixed(Parser):
    """A parser that takes positionals between options (``add NAME --queue Q --cron E PAYLOAD``, as the issue and
    crontab users write it): plain argparse ends an optional positional at the first option."""

    _parsing = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._parsing:  # parse_known_intermixed_args calls this method itself
            return super().parse_known_args(args, namespace)
        self._parsing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._parsing = False


def add_parsers(subs: Subparsers) -> dict[str, Command]:
    text = ("Recurring sends: a payload onto a queue at every tick of a cron expression in a time zone, fired by the "
            "tracker group (one replica per tick, each tick with a dedup id: a failover neither skips nor doubles it).")
    schedule = subs.add_parser("schedule", help=text, description=text,
                               epilog="example:\n  kmq schedule add nightly --queue reports --cron '0 3 * * *' "
                                      "--tz Europe/Berlin '{\"report\": \"daily\"}'\n  kmq schedule list",
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = cast(Subparsers, schedule.add_subparsers(dest="action", required=True, metavar="ACTION",
                                                       parser_class=_Intermixed))
    add = subcommand(actions, "add", "Add a schedule (its first tick is the first after now).",
                     "kmq schedule add nightly --queue reports --cron '0 3 * * *' --tz Europe/Berlin "
                     "'{\"report\": \"daily\"}'\n  kmq schedule add heartbeat --queue pings --cron '* * * * * */10' "
                     "ping")
    add.add_argument("name")
    add.add_argument("payload", nargs="?", help="the payload (UTF-8); or use --file")
    add.add_argument("--queue", required=True)
    add.add_argument("--cron", required=True, metavar="EXPR",
                     help="minute hour day month weekday (a 6th field: seconds), or @hourly, @daily …")
    add.add_argument("--tz", default="UTC", metavar="ZONE", help="IANA time zone of the expression (default UTC)")
    add.add_argument("--file", type=Path, help="send this file's bytes at each tick")
    add.add_argument("--header", action="append", default=[], type=header, metavar="K=V")
    add.add_argument("--dedup-id-template", default="", metavar="TEMPLATE",
                     help="each tick's dedup id from {name}, {tick} (UTC), {tick_ms}, {local}; default "
                          "schedule:{name}:{tick}")
    add.add_argument("--missed", choices=["fire-last", "skip"], default="fire-last",
                     help="ticks missed while no tracker ran: fire the latest once (default), or skip them")
    add.add_argument("--replace", action="store_true", help="replace a schedule of that name")
    listing = subcommand(actions, "list", "List the schedules, their last fired and next tick.",
                         "kmq schedule list\n  kmq schedule list --json")
    listing.add_argument("--json", action="store_true")
    for action, what in (("pause", "Stop firing a schedule's ticks until resumed."),
                         ("resume", "Fire a paused schedule's ticks again, from now on (not those it missed)."),
                         ("remove", "Remove a schedule."),
                         ("run-now", "Send a schedule's payload once now, besides its ticks.")):
        subcommand(actions, action, what, f"kmq schedule {action} nightly").add_argument("name")
    return {"schedule": Command(cmd_schedule, usage_error)}


def usage_error(args: argparse.Namespace) -> str | None:
    if args.action == "add" and (args.payload is None) == (args.file is None):
        return see_help("schedule add", "give a PAYLOAD or --file (one of them)")
    return None


def cmd_schedule(config: Config, args: argparse.Namespace) -> int:
    from kmq.ops.schedules import Schedules

    schedules = Schedules(config)
    if args.action == "add":
        return _add(schedules, args)
    if args.action == "list":
        return _list(schedules, args.json)
    if args.action == "run-now":
        print(f"sent {args.name!r}'s payload once (id {schedules.run_now(args.name)})")
        return EXIT_OK
    getattr(schedules, args.action)(args.name)
    print(f"{args.action}{'d' if args.action.endswith('e') else 'ed'} schedule {args.name!r}")
    return EXIT_OK


def _add(schedules: Schedules, args: argparse.Namespace) -> int:
    if args.file is not None:
        try:
            payload = args.file.read_bytes()
        except OSError as err:
            raise KmqError(f"cannot read {args.file}: {err.strerror}") from err
    else:
        payload = args.payload.encode()
    added = schedules.add(args.name, args.queue, args.cron, payload, tz=args.tz, headers=dict(args.header),
                          dedup_id_template=args.dedup_id_template, missed=args.missed, replace=args.replace)
    info = next((i for i in schedules.list() if i.schedule.name == added.name), None)
    nxt = f"; next tick {_when(info.next_tick_ms)}" if info is not None and info.next_tick_ms else ""
    print(f"added schedule {added.name!r}: {added.cron!r} in {added.tz} onto {added.queue!r}{nxt}")
    return EXIT_OK


def _list(schedules: Schedules, as_json: bool) -> int:
    infos = schedules.list()
    if as_json:
        print(json.dumps([{"name": i.schedule.name, "queue": i.schedule.queue, "cron": i.schedule.cron,
                           "tz": i.schedule.tz, "missed": i.schedule.missed, "paused": i.schedule.paused,
                           "dedup_id_template": i.schedule.dedup_id_template,
                           "last_fired": _when(i.last_fired_ms), "next_tick": _when(i.next_tick_ms)}
                          for i in infos], indent=2))
        return EXIT_OK
    rows = [[i.schedule.name, i.schedule.queue, i.schedule.cron, i.schedule.tz, "yes" if i.schedule.paused else "",
             i.schedule.missed, _when(i.last_fired_ms) or "", _when(i.next_tick_ms) or "",
             printable(i.schedule.payload.decode("utf-8", "replace"), 30)] for i in infos]
    print(format_table(["name", "queue", "cron", "tz", "paused", "missed", "last_fired", "next_tick", "payload"],
                       rows))
    return EXIT_OK


def _when(ms: int | None) -> str | None:
    return None if ms is None else datetime_from_ms(ms).isoformat(timespec="seconds")
