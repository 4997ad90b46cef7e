"""What every command group shares: exit codes, the parser class, argument types, a subcommand's common options."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NoReturn, TypeAlias

from kmq import logs
from kmq.config import Config
from kmq.wire import MessageId, ms_from_datetime

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


class Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error (exit 2), pointing at --help instead of printing the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


Subparsers: TypeAlias = "argparse._SubParsersAction[Parser]"


def _no_usage_error(args: argparse.Namespace) -> str | None:
    return None


@dataclass(frozen=True)
class Command:
    """A subcommand: what runs it, and the option combinations argparse cannot check (the whole error text after
    ``kmq COMMAND: error:``, or None)."""

    run: Callable[[Config, argparse.Namespace], int]
    usage_error: Callable[[argparse.Namespace], str | None] = _no_usage_error


def see_help(command: str, message: str) -> str:
    return f"{message} (see kmq {command} --help)"


def number(kind: type[int] | type[float], low: float, *, above: bool = False,
           high: float | None = None) -> Callable[[str], float]:
    """An argparse type: ``kind`` at least ``low`` (greater, with ``above``), at most ``high``."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") \
                from None
        if value < low or (above and value == low) or (high is not None and value > high):
            bound = f"> {low}" if above else f">= {low}"
            raise argparse.ArgumentTypeError(f"must be {bound}{f' and <= {high}' if high is not None else ''}, "
                                             f"got {text}")
        return value
    return parse


COUNT = number(int, 1)
SECONDS = number(float, 0)
PORT = number(int, 0, high=65535)


def message_id(text: str) -> MessageId:
    try:
        mid = MessageId.parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be PARTITION:OFFSET, got {text!r}") from None
    if mid.partition < 0 or mid.offset < 0:
        raise argparse.ArgumentTypeError(f"must be PARTITION:OFFSET, got {text!r}")
    return mid


def header(text: str) -> tuple[str, str]:
    """A ``--header K=V`` (the value may hold ``=``)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"must be K=V, got {text!r}")
    return key, value


def iso_time(text: str) -> datetime:
    """An ISO 8601 time; UTC when it names no zone."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def time_ms(moment: datetime | None) -> int | None:
    return None if moment is None else ms_from_datetime(moment)


def _log_level(text: str) -> str:
    if text.lower() not in logs.LEVELS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(logs.LEVELS)}, got {text!r}")
    return text.lower()


def add_log_options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    # Accepted before and after the subcommand; the subcommand's only override what was given there.
    parser.add_argument("--log-level", type=_log_level,
                        default=os.environ.get("KMQ_LOG_LEVEL", "warning") if defaults else argparse.SUPPRESS,
                        help="debug, info, warning (default; $KMQ_LOG_LEVEL), error")
    parser.add_argument("--log-json", action="store_true", default=False if defaults else argparse.SUPPRESS,
                        help="JSON log lines instead of key=value")


def subcommand(subs: Subparsers, name: str, help_text: str, example: str) -> Parser:
    """A subcommand's parser, with ``--config``, the log options and an example under its help."""
    parser = subs.add_parser(name, help=help_text, description=help_text, epilog=f"example:\n  {example}",
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=os.environ.get("KMQ_CONFIG"),
                        help="YAML config file (default: $KMQ_CONFIG; KMQ_* variables override it)")
    add_log_options(parser, defaults=False)
    return parser
