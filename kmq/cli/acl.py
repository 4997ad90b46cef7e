"""``kmq acl plan``: the least-privilege ACLs of a tenant's topic set, printed or applied."""

from __future__ import annotations

import argparse
import json
import sys

from kmq.cli.options import EXIT_OK, Command, Subparsers, subcommand
from kmq.cli.output import format_table, plural
from kmq.config import Config


def add_parsers(subs: Subparsers) -> dict[str, Command]:
    from kmq.ops.acl import ROLES

    acl = subcommand(subs, "acl", "Print (or --apply) the prefixed ACLs a tenant's producers, workers, trackers and "
                                  "operators need on its topic set, and nothing more.",
                     "kmq acl plan --tenant tenant-a\n  kmq acl plan --tenant tenant-a --role worker --principal "
                     "User:a-workers --apply")
    acl.add_argument("action", choices=["plan"])
    acl.add_argument("--tenant", required=True, metavar="SET", help="the tenant's topic set (a name in topic_sets)")
    acl.add_argument("--principal", help="whom the ACLs allow (default User:<SET>)")
    acl.add_argument("--role", action="append", choices=ROLES,
                     help="only what this role needs (repeatable; default all four)")
    acl.add_argument("--apply", action="store_true", help="create them through the admin API (needs the right to "
                                                          "alter ACLs: a super user's credentials in the config)")
    acl.add_argument("--json", action="store_true")
    return {"acl": Command(cmd_acl)}


def cmd_acl(config: Config, args: argparse.Namespace) -> int:
    from kmq.ops.acl import ROLES, plan

    entries = plan(config.topic_set(args.tenant), args.principal or f"User:{args.tenant}",
                   tuple(args.role or ROLES))
    if args.json:
        print(json.dumps([e.as_dict() for e in entries], indent=2))
    else:
        print(format_table(["principal", "resource", "pattern", "name", "operation", "permission", "for"],
                           [[e.principal, e.resource_type, e.pattern_type, e.name, e.operation, "ALLOW",
                             ", ".join(e.roles)] for e in entries]))
    if args.apply:
        from kmq._kafka.acls import create_acls

        created = create_acls(config, entries)
        print(f"applied {plural(created, 'ACL')} for {entries[0].principal} on {entries[0].name!r}",
              file=sys.stderr if args.json else sys.stdout)
    return EXIT_OK
