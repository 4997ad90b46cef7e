"""The ``kmq`` command put together: the parser of every command group, and how a command's failure is said."""

from __future__ import annotations

import argparse
import json
import os
import sys

from confluent_kafka import KafkaError, KafkaException

from kmq import _kafka, logs
from kmq.cli import acl, audit, console, control, dlq, inspect, schedule, send, stats, topics, tracker, worker
from kmq.cli.options import EXIT_ERROR, EXIT_USAGE, Command, Parser, add_log_options
from kmq.config import Config
from kmq.errors import ConfigError, KmqError

#: The command groups, in the order ``kmq --help`` lists their commands.
GROUPS = (topics, send, worker, tracker, stats, dlq, control, schedule, inspect, audit, acl, console)


def _add_commands(subs: argparse._SubParsersAction[Parser]) -> dict[str, Command]:
    commands: dict[str, Command] = {}
    for group in GROUPS:
        commands.update(group.add_parsers(subs))
    return commands


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="kmq", description="SQS-style queues on Apache Kafka.",
                    epilog="Run `kmq COMMAND --help` for a command's options and an example.")
    add_log_options(parser, defaults=True)
    subs = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    parser.set_defaults(_subparsers=subs.choices, _commands=_add_commands(subs))
    return parser


#: Every ``kmq`` command by name.
COMMANDS: dict[str, Command] = build_parser().get_default("_commands")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the subcommand's parser, so the line names it: "kmq send: error: …"
        args._subparsers[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    logs.configure(args.log_level, args.log_json)
    command: Command = args._commands[args.command]
    usage = command.usage_error(args)
    if usage is not None:
        parser.exit(EXIT_USAGE, f"kmq {args.command}: error: {usage}\n")
    try:
        config = Config.from_yaml(args.config) if args.config else Config.load()
        code = command.run(config, args)
        sys.stdout.flush()  # here, so a closed pipe is reported below and not at interpreter exit
        return code
    except ConfigError as err:  # a setting the user gave (file, variable or option): a usage error
        return _fail(args, str(err), EXIT_USAGE)
    except KmqError as err:
        return _fail(args, str(err))
    except KafkaException as exc:  # e.g. an unknown librdkafka property under `kafka:` (a usage error)
        error = _kafka.to_kmq_error(exc, "Kafka client")
        return _fail(args, str(error), EXIT_USAGE if error.code == KafkaError._INVALID_ARG else EXIT_ERROR)
    except BrokenPipeError:
        # The reader went away (`kmq … | head`): nothing more can be printed there.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _fail(args, "output closed before it was all written (broken pipe)")
    except KeyboardInterrupt:
        return EXIT_ERROR


def _fail(args: argparse.Namespace, message: str, code: int = EXIT_ERROR) -> int:
    """The one line a failed command prints: plain, or a JSON object with ``--log-json`` (all of stderr is then
    JSON lines)."""
    if args.log_json:
        print(json.dumps({"level": "error", "event": "command_failed", "command": args.command, "error": message,
                          "exit_code": code}), file=sys.stderr)
    else:
        print(f"kmq {args.command}: error: {message}", file=sys.stderr)
    return code
