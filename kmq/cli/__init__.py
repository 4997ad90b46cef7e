"""The ``kmq`` command: topics, send, worker, tracker, stats and dead letters.

Every subcommand reads ``--config FILE`` (kmq or kafka-mq-go YAML keys) with ``KMQ_*`` environment overrides.
Exit codes: 0 success, 1 a runtime failure (broker, topic, handler import), 2 a usage error.

One module per command group, each adding its subcommands' parsers and running them: ``topics``, ``send``,
``worker``, ``tracker``, ``stats``, ``dlq``, ``control`` (pause, resume, purge), ``inspect``, ``audit``; ``app``
puts them together (the parser, the error handling); ``options`` and ``output`` are what they share.
"""

from kmq.cli.app import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]
