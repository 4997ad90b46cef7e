"""Logging: kmq emits through structlog to stderr, and librdkafka's own lines come through the same way.

``configure`` is for kmq's entry points (CLI, tracker). A library user who configures structlog keeps their
configuration; one who does not still gets kmq's lines on stderr, never on stdout (``use_stderr_by_default``).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from typing import Any

import structlog

LEVELS = ("debug", "info", "warning", "error", "critical")
#: One librdkafka line per (facility, client) per this many seconds; the next one says how many were held back.
LIBRDKAFKA_REPEAT_S = 30.0
#: librdkafka facilities that are noise to a kmq user (e.g. "BGQUEUE Purging 1 unserved events" at close).
LIBRDKAFKA_QUIET = frozenset({"BGQUEUE"})
#: Set by configure() at debug level: no repeat limit, and librdkafka's debug lines too.
_every_librdkafka_line = False
_LINE = re.compile(r"^(?P<fac>\S+) \[(?P<client>[^\]]*)\] \[[^\]]*\]: (?P<text>.*)$", re.S)


def use_stderr_by_default() -> None:
    """Sends structlog's default output to stderr, unless the application has configured structlog itself."""
    if not structlog.is_configured():
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))


def configure(level: str = "info", json: bool = False) -> None:
    """key=value lines (or JSON) on stderr, at ``level``; librdkafka's own logs come through the same way."""
    if level.lower() not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    numeric = logging.getLevelNamesMapping()[level.upper()]
    global _every_librdkafka_line
    # At debug, librdkafka's debug lines (its `debug` setting: cgrp, broker, …) come through, each of them.
    _every_librdkafka_line = numeric <= logging.DEBUG
    logging.basicConfig(level=numeric, stream=sys.stderr, format="%(message)s")
    renderer: structlog.typing.Processor = (structlog.processors.JSONRenderer() if json
                                            else structlog.processors.LogfmtRenderer(sort_keys=False))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,  # exc_info=True: the traceback, as one field of the line
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


class LibrdkafkaLines(logging.Handler):
    """Turns librdkafka's log lines (handed to a Python logger by confluent-kafka) into structlog events, one per
    facility and client per ``LIBRDKAFKA_REPEAT_S``: a broker outage makes each client say "Connection refused"
    many times a second. At debug level (``configure("debug")``) every line comes through, librdkafka's debug lines
    too: set librdkafka's ``debug`` (for example ``KMQ_CONSUMER_KAFKA_DEBUG=cgrp``) to see a group's state machine.

    They are diagnostics, logged at info with librdkafka's own level as ``rdkafka_level`` (critical ones stay
    errors): what they cause, kmq reports itself (a one-line error, a rate-limited ``kafka_client_error``).
    """

    def __init__(self, monotonic: Any = time.monotonic, repeat_s: float = LIBRDKAFKA_REPEAT_S) -> None:
        super().__init__(logging.DEBUG)
        self._repeat_s = repeat_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str], float] = {}
        self._held: dict[tuple[str, str], int] = {}
        self._log: structlog.typing.FilteringBoundLogger = structlog.get_logger("kmq.librdkafka")

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        match = _LINE.match(line)
        fac, client, text = (match["fac"], match["client"], match["text"]) if match else ("", "", line)
        if fac in LIBRDKAFKA_QUIET:
            level = logging.DEBUG
        else:
            level = logging.ERROR if record.levelno >= logging.CRITICAL else logging.INFO
        key = (fac, client)
        with self._lock:
            now = self._monotonic()
            if now - self._last.get(key, -self._repeat_s) < self._repeat_s:
                self._held[key] = self._held.get(key, 0) + 1
                return
            self._last[key] = now
            held = self._held.pop(key, 0)
        fields: dict[str, Any] = {"facility": fac, "client": client, "rdkafka_level": record.levelname.lower(),
                                  "message": text.strip()}
        if held:
            fields["repeated"] = held
        self._log.log(level, "librdkafka", **fields)


def librdkafka_logger() -> logging.Logger:
    """The logger every kmq Kafka client is given (``logger`` setting): its lines go through structlog."""
    logger = logging.getLogger("kmq.librdkafka")
    if not any(isinstance(h, LibrdkafkaLines) for h in logger.handlers):
        logger.addHandler(LibrdkafkaLines(repeat_s=0.0 if _every_librdkafka_line else LIBRDKAFKA_REPEAT_S))
        logger.propagate = False  # else the root handler prints the raw line as well
        logger.setLevel(logging.DEBUG if _every_librdkafka_line else logging.WARNING)
    return logger
