"""``kmq console``, ``kmq-console``, ``python -m kmq.console``: serve the web console.

``kmq console`` (kmq.cli.console) adds ``add_arguments`` to its sub-parser and calls ``run(config, args)``;
``main`` is the stand-alone entry point (it loads the config itself, as ``kmq-redelivery-tracker`` does).
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Mapping

import structlog

from kmq import logs
from kmq.config import Config
from kmq.console import settings as console_settings
from kmq.console.settings import Settings
from kmq.errors import KmqError
from kmq.topic_sets import TopicSet

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

EXIT_ERROR = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The console's options, on ``kmq console``'s sub-parser or ``kmq-console``'s own."""
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1; KMQ_CONSOLE_HOST)")
    parser.add_argument("--port", type=int, help="port to listen on (default 8088; KMQ_CONSOLE_PORT)")
    parser.add_argument("--users", metavar="FILE", help="YAML file of users: name -> role (operator or viewer) "
                                                        "and password_hash or token_sha256 (KMQ_CONSOLE_USERS_FILE)")
    parser.add_argument("--anonymous-viewers", action="store_true",
                        help="let anyone who reaches the console view it without a login (acting still needs one)")
    parser.add_argument("--secure-cookies", action="store_true",
                        help="send the session cookie over HTTPS only (behind a TLS-terminating proxy)")
    parser.add_argument("--set", dest="topic_set", action="append", metavar="SET",
                        help="serve this topic set (repeatable; default: every set in the config). A tenant's "
                             "console names its own set: it then needs that set's ACLs only")
    parser.add_argument("--refresh", type=float, default=1.0, metavar="SECONDS",
                        help="how often the console reads the topics on (default 1)")
    parser.add_argument("--hash-password", action="store_true",
                        help="read a password (from the terminal, or one line of standard input) and print its "
                             "argon2 hash for a users file or KMQ_CONSOLE_OPERATOR_PASSWORD_HASH, then exit")


def settings_from(args: argparse.Namespace, env: Mapping[str, str]) -> Settings:
    """The console's settings: ``KMQ_CONSOLE_*`` variables, then the options on top."""
    fields = console_settings.from_env(env)
    if args.users:
        fields["users"] = {**fields.get("users", {}), **console_settings.load_users(args.users)}
    for name in ("host", "port"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    if args.refresh <= 0:
        raise KmqError(f"--refresh {args.refresh}: must be more than 0 seconds")
    return Settings(**fields, anonymous_viewers=args.anonymous_viewers, secure_cookies=args.secure_cookies,
                    refresh_s=args.refresh)


def run(config: Config, args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    """Serves the console until interrupted (``kmq console``)."""
    if args.hash_password:
        return _hash_password()
    settings = settings_from(args, os.environ if env is None else env)
    serve(config, settings, served_sets(config, args.topic_set))
    return 0


def served_sets(config: Config, names: list[str] | None) -> list[TopicSet]:
    """The topic sets the console serves: those named (each once, in order), or every set of the config."""
    if not names:
        return list(config.all_topic_sets)
    return [config.topic_set(name) for name in dict.fromkeys(names)]


def serve(config: Config, settings: Settings, sets: list[TopicSet] | None = None) -> None:
    try:
        import uvicorn

        from kmq.console.app import create_app
    except ImportError as err:
        raise KmqError(f"the console needs its extra ({err.name} is missing): pip install 'kmq[console]'") from err
    from kmq.console.follower import Follower
    from kmq.console.model import Models

    models = Models(list(config.all_topic_sets) if sets is None else sets, frozenset(config.at_most_once_queues))
    follower = Follower(config, models, settings.refresh_s).start()
    log.info("console_starting", url=f"http://{settings.host}:{settings.port}/", topic_sets=list(models.sets),
             operators=settings.operators, anonymous_viewers=settings.open_viewing,
             bootstrap_servers=config.bootstrap_servers)
    try:
        uvicorn.run(create_app(config, settings, models), host=settings.host, port=settings.port, log_config=None,
                    access_log=False, server_header=False)
    finally:
        follower.close()


def _hash_password() -> int:
    from kmq.console.auth import hash_password

    if sys.stdin.isatty():
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            print("kmq-console: the two passwords differ", file=sys.stderr)
            return EXIT_ERROR
    else:
        password = sys.stdin.readline().rstrip("\n")
    if len(password) < 12:
        print("kmq-console: a password of fewer than 12 characters is too easy to guess", file=sys.stderr)
        return EXIT_ERROR
    print(hash_password(password))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kmq-console", description="The kmq web console: queues, messages, dead "
                                     "letters, workers and trackers, read from the topics; pause, purge and "
                                     "redrive for operators.",
                                     epilog="example: KMQ_BOOTSTRAP_SERVERS=localhost:9092 kmq-console --users "
                                            "users.yaml")
    parser.add_argument("--config", help="YAML config (kmq or kafka-mq-go keys); KMQ_* variables override it")
    parser.add_argument("--log-level", default=os.environ.get("KMQ_LOG_LEVEL", "info"))
    parser.add_argument("--log-json", action="store_true", help="JSON log lines instead of key=value")
    add_arguments(parser)
    args = parser.parse_args(argv)
    logs.configure(args.log_level, args.log_json)
    if args.hash_password:
        return _hash_password()
    try:
        config = Config.from_yaml(args.config) if args.config else Config.load()
        return run(config, args)
    except KmqError as err:
        print(f"kmq-console: error: {err}", file=sys.stderr)
        return EXIT_ERROR
