"""mkdocs hook: ``<!-- kmq-help COMMAND -->`` in a page becomes that command's ``--help``, taken from kmq's own
argument parser at build time, so the CLI reference cannot drift from the CLI."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
from typing import Any

HELP = re.compile(r"<!-- kmq-help(?: (?P<command>[a-z]+(?: [a-z-]+)?))? -->")


def command_help(command: str | None) -> str:
    from kmq.cli import build_parser

    os.environ["COLUMNS"] = "118"  # argparse wraps to the terminal: the same width on every machine
    parser = build_parser()
    if command is None:
        return parser.format_help()
    for word in command.split():  # "schedule add": a command's own subcommand
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = subparsers.choices[word]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        parser.print_help()
    return out.getvalue()


def on_page_markdown(markdown: str, **_: Any) -> str:
    return HELP.sub(lambda m: f"```text\n{command_help(m['command']).rstrip()}\n```", markdown)
